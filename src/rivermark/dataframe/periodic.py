"""DataFrames produced on a timer: ``PeriodicDataFrame``, ``Random``, ``DataFrame.from_periodic``.

Storing history: a periodic DataFrame emits only the newest block each
interval.  To keep the last N rows, or the last T of time, use a window's
``full()``, which is incremental, bounded and checkpointed::

    sdf = DataFrame.random(freq="10ms", interval="100ms")
    last_1000_rows = sdf.window(n=1000).full()       # a DataFrames of <= 1000 rows
    last_minute = sdf.window(value="60s").full()     # rows within 60 s of the newest

``last_1000_rows.stream.sink(...)`` then receives the whole history after each block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pandas as pd

from rivermark.core.node import Stream, check_callable
from rivermark.core.timeutil import parse_interval
from rivermark.dataframe.core import DataFrame, random_datapoint
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["PeriodicDataFrame", "Random", "random_datablock", "random_datapoint"]


def random_datablock(
    last: pd.Timestamp, now: pd.Timestamp, freq: str | pd.Timedelta = "100ms"
) -> pd.DataFrame:
    """Random rows at ``freq`` for the times in ``(last, now]``.

    Columns as streamz's: ``x`` uniform in [0, 1), ``y`` an integer drawn from
    a Poisson distribution (mean 1), ``z`` standard normal.

    >>> df = random_datablock(pd.Timestamp("2024-01-01"), pd.Timestamp("2024-01-01 00:00:01"))
    >>> len(df), list(df.columns), [str(t) for t in df.dtypes]
    (10, ['x', 'y', 'z'], ['float64', 'int64', 'float64'])
    """
    index = pd.date_range(start=last, end=now, freq=freq, inclusive="right")
    n = len(index)
    rng = np.random.default_rng()
    return pd.DataFrame(
        {
            "x": rng.random(n),
            "y": rng.poisson(1.0, n).astype("int64"),
            "z": rng.standard_normal(n),
        },
        index=index,
    )


class PeriodicDataFrame(DataFrame):
    """A DataFrame whose batches come from ``datafn(last=..., now=..., **kwargs)`` every ``interval``.

    As in streamz, ``datafn`` is called with keyword arguments: ``last`` and
    ``now`` (the previous and the current call's ``pd.Timestamp``) and the
    extra ``kwargs``; it returns the rows for that span (a function taking
    only ``**kwargs`` works too).  The first batch comes one ``interval``
    after the start.  As in streamz it starts at once (``start=True``);
    pass ``start=False`` and call :meth:`start` later.  The timer does not
    hold this object: once it is no longer referenced it can be collected,
    while its source goes on feeding the nodes below it until stopped.
    ``dask=True`` (streamz's Dask mode) scatters each batch to the Dask
    cluster of the default ``distributed.Client``: ``sdf.stream`` is then
    the source's ``scatter()``, and the operations on the DataFrame run on
    the cluster (``.stream.gather()`` brings results back).  The timer and
    the calls to ``datafn`` stay in this process.

    >>> from rivermark.testing import wait_for
    >>> def block(last, now):
    ...     return pd.DataFrame({"v": [1]}, index=[now])
    >>> sdf = PeriodicDataFrame(block, interval="5ms", start=False)
    >>> L = sdf.stream.sink_to_list()
    >>> sdf.start(); wait_for(lambda: len(L) >= 2); sdf.stop()
    >>> list(L[0].columns)
    ['v']
    """

    def __init__(
        self,
        datafn: Callable[..., pd.DataFrame] = random_datablock,
        interval: object = "500ms",
        dask: bool = False,
        start: bool = True,
        **kwargs: object,
    ) -> None:
        check_callable("PeriodicDataFrame", "datafn", datafn)
        if not isinstance(dask, bool):
            raise ConfigurationError(f"PeriodicDataFrame: dask must be True or False, got {dask!r}")
        self.interval = interval
        self.datafn = datafn
        self.kwargs = kwargs
        secs = parse_interval(interval, "PeriodicDataFrame", "interval")
        now = pd.Timestamp.now()
        self._calls = _Calls(datafn, kwargs, now)
        example = datafn(last=now - pd.Timedelta(seconds=secs), now=now, **kwargs).iloc[:0]
        # the source calls ``_calls``, not this object: the running timer does
        # not keep the DataFrame alive (as in streamz, it can be collected)
        source = Stream.from_periodic(  # type: ignore[attr-defined]
            self._calls, poll_interval=secs, wait_first=True
        )
        # with dask=True the batches go to the cluster as they come (a Dask client is needed)
        DataFrame.__init__(self, source.scatter() if dask else source, example=example)
        self.source = source
        if start:
            self.start()

    def start(self) -> None:
        """Start calling ``datafn`` (the first batch covers the time since this call)."""
        self._calls.last = pd.Timestamp.now()
        self.source.start()

    def stop(self) -> None:
        """Stop calling ``datafn``."""
        self.source.stop()


class _Calls:
    """The periodic source's function: ``datafn`` for the time since the last call."""

    def __init__(
        self, datafn: Callable[..., pd.DataFrame], kwargs: dict[str, object], last: pd.Timestamp
    ) -> None:
        self.datafn = datafn
        self.kwargs = kwargs
        self.last = last

    def __call__(self) -> pd.DataFrame:
        now = pd.Timestamp.now()
        df = self.datafn(last=self.last, now=now, **self.kwargs)
        self.last = now
        return df


class Random(PeriodicDataFrame):
    """Random data (``x``, ``y``, ``z`` columns) at ``freq``, emitted every ``interval``.

    >>> sdf = Random(freq="10ms", interval="100ms", start=False)
    >>> list(sdf.columns)
    ['x', 'y', 'z']
    """

    def __init__(
        self,
        freq: str | pd.Timedelta = "100ms",
        interval: object = "500ms",
        dask: bool = False,
        start: bool = True,
        datafn: Callable[..., pd.DataFrame] = random_datablock,
    ) -> None:
        super().__init__(datafn, interval=interval, dask=dask, start=start, freq=pd.Timedelta(freq))


def _from_periodic(
    datafn: Callable[..., pd.DataFrame] = random_datablock,
    interval: object = "500ms",
    *,
    dask: bool = False,
    start: bool = True,
    **kwargs: object,
) -> PeriodicDataFrame:
    """A :class:`PeriodicDataFrame` calling ``datafn(last, now, **kwargs)`` every ``interval``."""
    return PeriodicDataFrame(datafn, interval=interval, dask=dask, start=start, **kwargs)


def _random(
    freq: str | pd.Timedelta = "100ms",
    interval: object = "500ms",
    dask: bool = False,
    start: bool = True,
    datafn: Callable[..., pd.DataFrame] = random_datablock,
) -> Random:
    """A :class:`Random` DataFrame."""
    return Random(freq=freq, interval=interval, dask=dask, start=start, datafn=datafn)


DataFrame.from_periodic = staticmethod(_from_periodic)  # type: ignore[attr-defined]
DataFrame.random = staticmethod(_random)  # type: ignore[attr-defined]
