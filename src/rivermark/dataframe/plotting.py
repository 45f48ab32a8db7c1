"""Live plots of streaming DataFrames and Series through hvplot (optional).

Install with ``pip install rivermark[plot]``.  ``sdf.hvplot`` (also
``sdf.plot``) works as hvplot's accessor does on pandas: call it
(``sdf.hvplot(kind="line", y="x")``) or name the kind
(``sdf.hvplot.line(y="x")``, ``sdf.hvplot.hist()``, ``sdf.hvplot.heatmap(...)``);
every kind hvplot has is passed through.  The result is a HoloViews
``DynamicMap`` that redraws as batches arrive:

* a *streaming* frame (each batch is new rows) feeds a ``Buffer`` that keeps
  the last ``backlog`` rows;
* an *updating* frame (each batch is the whole current result, e.g.
  ``sdf.groupby("name").amount.sum()``) feeds a ``Pipe``: the plot shows the
  current result only, one bar per group, not a growing pile of old ones.

The index becomes a column (the default ``x`` axis), so it is visible in the
plot.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, cast

import pandas as pd

from rivermark.errors import ConfigurationError

if TYPE_CHECKING:
    import holoviews as hv

    from rivermark.dataframe.streaming import Streaming

logger = logging.getLogger(__name__)

__all__ = ["plot", "kinds", "HvPlot"]

#: kinds whose horizontal axis is the index column unless ``x`` is given
_INDEX_X = frozenset({"line", "step", "area", "bar", "barh", "scatter", "points", "errorbars"})


def _hvplot() -> tuple[ModuleType, type]:
    try:
        import holoviews as hv
        import hvplot.pandas  # noqa: F401  (registers .hvplot on pandas)
        from hvplot.plotting.core import hvPlotTabular
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "plot: hvplot is not installed; pip install 'rivermark[plot]' (hvplot, holoviews)"
        ) from e
    return hv, hvPlotTabular


@functools.lru_cache(maxsize=1)
def kinds() -> tuple[str, ...]:
    """Every plot kind of the installed hvplot (what ``sdf.hvplot.<kind>`` accepts).

    >>> {"line", "bar", "hist", "box", "heatmap"} <= set(kinds())
    True
    """
    _, tabular = _hvplot()
    return tuple(
        k
        for k in dir(tabular)
        if not k.startswith("_")
        and k not in ("explorer", "dataset")
        and callable(getattr(tabular, k))
    )


def _as_frame(x: pd.DataFrame | pd.Series) -> pd.DataFrame:
    if isinstance(x, pd.Series):
        x = x.to_frame(name=x.name if x.name is not None else "value")
    index_name = x.index.name or "index"
    return x.rename_axis(index_name).reset_index()


def plot(
    frame: Streaming, backlog: int = 1000, kind: str = "line", **kwargs: object
) -> hv.DynamicMap:
    """A DynamicMap of ``frame`` drawn with hvplot ``kind`` (see the module docs)."""
    hv, _ = _hvplot()
    from holoviews.streams import Buffer, Pipe

    if isinstance(backlog, bool) or not isinstance(backlog, int) or backlog < 1:
        raise ConfigurationError(f"plot: backlog must be a positive int, got {backlog!r}")
    if kind not in kinds():
        raise ConfigurationError(
            f"plot: kind must be one of hvplot's kinds ({', '.join(kinds())}), got {kind!r}"
        )
    example = _as_frame(cast("pd.DataFrame | pd.Series", frame.example))
    if kind in _INDEX_X and "x" not in kwargs:
        kwargs["x"] = example.columns[0]
    updating = frame._stream_type == "updating"
    # an updating frame's batch is the whole current result: shown in place of the last
    stream: Pipe | Buffer = (
        Pipe(data=example) if updating else Buffer(example, length=backlog, index=False)
    )

    def send(batch: pd.DataFrame | pd.Series) -> None:
        stream.send(_as_frame(batch))

    frame.stream.sink(send)  # type: ignore[attr-defined]

    def draw(data: pd.DataFrame) -> object:
        return data.hvplot(kind=kind, **kwargs)

    dmap = hv.DynamicMap(draw, streams=[stream])
    if updating:
        dmap.pipe = stream
    else:
        dmap.buffer = stream
    return dmap


class HvPlot:
    """``sdf.hvplot`` / ``sdf.plot``: call it with ``kind=``, or use ``.line()``, ``.hist()``, ..."""

    def __init__(self, frame: Streaming) -> None:
        self._frame = frame

    def __call__(
        self, *args: object, kind: str = "line", backlog: int = 1000, **kwargs: object
    ) -> hv.DynamicMap:
        if args:  # hvplot's positional x, y
            for name, value in zip(("x", "y"), args):
                kwargs.setdefault(name, value)
        return plot(self._frame, backlog=backlog, kind=kind, **kwargs)

    def __getattr__(self, kind: str) -> Callable[..., hv.DynamicMap]:
        if kind.startswith("_") or kind not in kinds():
            raise AttributeError(
                f"hvplot has no plot kind {kind!r}; the kinds are: {', '.join(kinds())}"
            )
        return functools.partial(self.__call__, kind=kind)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *kinds()})
