"""Live plots of streaming DataFrames and Series through hvplot (optional).

Install with ``pip install rivermark[plot]``.  ``sdf.plot(kind="line",
backlog=1000)`` returns a HoloViews ``DynamicMap`` fed by a ``Buffer`` that
keeps the last ``backlog`` rows; the index becomes a column (``x`` axis), so it
is visible in the plot.
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from ..errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["plot", "KINDS"]

KINDS = ("line", "bar", "scatter", "area")


def _as_frame(x: Any) -> pd.DataFrame:
    if isinstance(x, pd.Series):
        x = x.to_frame(name=x.name if x.name is not None else "value")
    index_name = x.index.name or "index"
    return x.rename_axis(index_name).reset_index()


def plot(frame: Any, backlog: int = 1000, kind: str = "line", **kwargs: Any) -> Any:
    """A DynamicMap plotting the last ``backlog`` rows of ``frame`` (hvplot ``kind``).

    ``sdf.plot(kind=...)`` and ``sdf.x.hvplot(...)`` call this; the kinds are:

    >>> KINDS
    ('line', 'bar', 'scatter', 'area')
    """
    try:
        import holoviews as hv
        import hvplot.pandas  # noqa: F401  (registers .hvplot on pandas)
        from holoviews.streams import Buffer
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "plot: hvplot is not installed; pip install 'rivermark[plot]' (hvplot, holoviews)"
        ) from e
    if isinstance(backlog, bool) or not isinstance(backlog, int) or backlog < 1:
        raise ConfigurationError(f"plot: backlog must be a positive int, got {backlog!r}")
    if kind not in KINDS:
        raise ConfigurationError(f"plot: kind must be one of {KINDS}, got {kind!r}")
    example = _as_frame(frame.example)
    x = example.columns[0]
    buffer = Buffer(example, length=backlog, index=False)

    def send(batch: Any) -> None:
        buffer.send(_as_frame(batch))

    frame.stream.sink(send)

    def draw(data: pd.DataFrame) -> Any:
        return data.hvplot(kind=kind, x=x, **kwargs)

    dmap = hv.DynamicMap(draw, streams=[buffer])
    dmap.buffer = buffer
    return dmap
