"""Event time on streaming DataFrames: a column gives each row its time; windows group by it.

``sdf.timestamps("ts", max_delay="5s")`` says which column holds the time
of each row (epoch seconds as numbers, or timezone-aware datetimes: the
convention of :mod:`rivermark.operators.watermarks`) and keeps the
watermark.  Windows follow it, and an aggregation completes them, in the
style of ``sdf.window(n).groupby(...).x.sum()``:

* ``.tumbling_window(size)``, ``.hopping_window(size, step)``,
  ``.session_window(gap)`` (each with ``grace=``; fixed windows with
  ``offset=``);
* optionally ``.groupby(column or columns)`` and a column selection
  (``["x"]``, ``.x`` or ``[["x", "y"]]``);
* ``.count()``, ``.size()``, ``.sum()``, ``.mean()``, ``.min()``, ``.max()``
  or ``.agg(func)`` (``func`` gets a window's values of one column as a
  ``pandas.Series``, in arrival order).

The result is a streaming DataFrame of the windows that closed, one batch
per input batch that closed any: columns ``start``, ``end`` (epoch seconds,
or datetimes in the time column's timezone), the key columns, then the
values.  ``.late`` is a streaming DataFrame of the rows that arrived after
their window had closed.

The watermark moves row by row as it does for records
(:class:`~rivermark.operators.eventtime.Timestamps`): per input partition
(a Kafka partition, from the batch's metadata; any other source is one) the
largest time seen minus ``max_delay``, the minimum over partitions, leaving
out a partition idle for ``idle_timeout``.  A row is judged against the
watermark of the rows before it and itself, so the windows and the late rows
are the same however the rows are cut into batches.

>>> import pandas as pd
>>> from rivermark import Stream
>>> from rivermark.dataframe import DataFrame
>>> source = Stream()
>>> sdf = DataFrame(source, example=pd.DataFrame({"ts": [0.0], "user": ["a"], "n": [0]}).iloc[:0])
>>> counts = sdf.timestamps("ts", max_delay=5).tumbling_window(10).groupby("user").n.sum()
>>> out = counts.stream.sink_to_list()
>>> source.emit(pd.DataFrame({"ts": [1.0, 4.0, 12.0], "user": ["a", "b", "a"], "n": [1, 2, 3]}))
>>> source.emit(pd.DataFrame({"ts": [17.0], "user": ["b"], "n": [4]}))
>>> out[0]
   start   end user  n
0    0.0  10.0    a  1
1    0.0  10.0    b  2
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from rivermark.core.node import Stream
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import NANOS, epoch_seconds, parse_interval
from rivermark.dataframe.core import DataFrame
from rivermark.dataframe.eventwindows import BUILT_IN, FrameWindow, WindowSpec
from rivermark.dataframe.running import OpName
from rivermark.dataframe.schema import Dtype
from rivermark.errors import ConfigurationError
from rivermark.operators.eventtime import emits_updates
from rivermark.operators.timestamps import Results, Timestamps, _ahead_of, _delay, _partition_of
from rivermark.operators.watermarks import to_epoch

logger = logging.getLogger(__name__)

__all__ = [
    "FrameTimestamps",
    "TimedDataFrame",
    "EventWindows",
    "WindowedDataFrame",
    "column_times",
    "timestamps",
]


def _dtype_problem(dtype: Dtype) -> str | None:
    """Why a column of ``dtype`` cannot hold event times (None: it can)."""
    # optional: an extension dtype need not have a kind
    if isinstance(dtype, pd.DatetimeTZDtype) or getattr(dtype, "kind", None) == "O":
        return None
    # optional: an extension dtype need not have a kind
    if getattr(dtype, "kind", None) == "M":
        return (
            "holds naive datetimes (no timezone); give them one upstream "
            "(sdf.assign(ts=sdf.ts.dt.tz_localize('UTC')) or in the source) or use epoch seconds"
        )
    if is_numeric_dtype(dtype) and not is_bool_dtype(dtype):
        return None
    return (
        f"has dtype {str(dtype)!r}; event times are epoch seconds (int or float) or "
        "timezone-aware datetimes"
    )


def column_times(values: pd.Series) -> np.ndarray:
    """The event times of a column as float epoch seconds; NaN where a row has none.

    Numbers are epoch seconds, timezone-aware datetimes are converted, an
    ``object`` column is converted value by value (see
    :func:`~rivermark.operators.watermarks.to_epoch`).  A column of another
    dtype (naive datetimes, strings, booleans) raises ``TypeError``.

    >>> column_times(pd.Series([1, 2.5, None])).tolist()
    [1.0, 2.5, nan]
    >>> column_times(pd.Series(pd.to_datetime([60], unit="s", utc=True))).tolist()
    [60.0]
    """
    dtype = values.dtype
    problem = _dtype_problem(dtype)
    if problem is not None:
        raise TypeError(f"event time: column {values.name!r} {problem}")
    if isinstance(dtype, pd.DatetimeTZDtype):
        return _datetime_seconds(values, dtype.unit)
    # optional: an extension dtype need not have a kind
    if getattr(dtype, "kind", None) != "O":
        secs = values.to_numpy(dtype=float, na_value=np.nan)
        return np.where(np.isfinite(secs), secs, np.nan)
    out = np.empty(len(values), dtype=float)
    for i, v in enumerate(values.tolist()):
        try:
            out[i] = to_epoch(v)
        except (TypeError, ValueError):
            out[i] = np.nan
    return out


def _datetime_seconds(values: pd.Series, unit: str) -> np.ndarray:
    """Datetimes (of ``unit``) as epoch seconds by integer arithmetic: whole seconds and
    the exact nanoseconds after them (:func:`~rivermark.core.timeutil.epoch_seconds`,
    the rule of a record's datetime), NaN where there is none."""
    ticks = values.to_numpy(dtype=f"datetime64[{unit}]")  # UTC
    missing = np.isnat(ticks)
    per = NANOS // _TICK_NANOS[unit]
    whole, after = np.divmod(ticks.view(np.int64), per)
    secs = epoch_seconds(whole, after * _TICK_NANOS[unit])
    return np.asarray(np.where(missing, np.nan, secs), dtype=float)


#: nanoseconds per tick of a datetime unit
_TICK_NANOS = {"s": NANOS, "ms": 10**6, "us": 10**3, "ns": 1}


class FrameTimestamps(Timestamps):
    """Give each row of a DataFrame batch its event time (``column``) and keep the watermark.

    Built by ``sdf.timestamps(column, ...)``.  Batches pass on unchanged,
    less the rows without a valid time: those go through the node's error
    policy together, as one DataFrame (``on_error="raise"`` stops the job
    naming the column and the first bad value, ``"skip"`` drops them and
    counts one error, a callable receives them).  For the window right
    below, the node keeps each passed row's time (:attr:`times`) and the
    watermark that row is judged against (:attr:`row_watermarks`).
    """

    carries_frames = True
    #: counted by ``_emit``: a batch with bad rows still passes its good ones
    derived_out = False
    str_list = ["column", "max_delay"]

    def __init__(
        self,
        upstream: Stream,
        column: Hashable,
        max_delay: object = 0,
        idle_timeout: object = None,
        **kwargs: Any,
    ) -> None:
        self.column = column
        #: the event time of each row of the batch being passed on
        self.times = np.empty(0)
        #: the watermark each of those rows is judged against (it moved by the row already)
        self.row_watermarks = np.empty(0)
        self._what = OpName(f"timestamps({column!r})")
        super().__init__(upstream, None, max_delay, idle_timeout, **kwargs)

    def update(
        self, x: object, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        try:
            if not isinstance(x, pd.DataFrame):
                raise TypeError(
                    f"timestamps: expected a pandas DataFrame batch, got {type(x).__name__}"
                )
            if self.column not in x.columns:
                raise KeyError(
                    f"timestamps: the batch has no column {self.column!r} (columns: "
                    f"{list(x.columns)!r}); emit batches with the example's columns"
                )
            times = column_times(x[self.column])
        except Exception as e:
            self._user_error(x, e, self._what)
            return None
        bad = np.isnan(times)
        if bad.any():
            first = x[self.column][bad].iloc[0]
            err = ValueError(
                f"timestamps: {int(bad.sum())} of {len(x)} row(s) have no valid time in column "
                f"{self.column!r} (first: {first!r}); give every row epoch seconds or a "
                "timezone-aware datetime"
            )
            self._user_error(x[bad], err, self._what)
            x, times = x[~bad], times[~bad]
        if len(times) and times.max() > self._far:
            x, times = self._future_rows(x, times)
        self.times = times
        self.row_watermarks = self._marks(_partition_of(metadata) if metadata else None, times)
        return self._emit(x, metadata)

    def _future_rows(self, x: pd.DataFrame, times: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        """The rows without those whose time is beyond ``max_future`` of the wall clock (they
        go through the error policy together); without ``max_future``, a warning, once."""
        now = self.wall_clock()
        self._far = now + self._ahead
        beyond = times > self._far
        if not beyond.any():
            return x, times
        first = x[self.column][beyond].iloc[:1].tolist()[0]  # a Python value, for the message
        ahead = _ahead_of(float(times[beyond][0]), now)
        if self.max_future is None:
            if not self._warned_far:
                self._warned_far = True
                logger.warning(
                    "%s: row %r of column %r is %s ahead of the wall clock; the watermark "
                    "moves there for good and every later row with a present time will be "
                    "late (a time in milliseconds? give seconds). Pass max_future= (e.g. "
                    "'1h') to send such rows through on_error instead",
                    self.display_name(),
                    first,
                    self.column,
                    ahead,
                )
            return x, times
        err = ValueError(
            f"timestamps: {int(beyond.sum())} of {len(x)} row(s) have a time in column "
            f"{self.column!r} beyond max_future={self.max_future:g} s of the wall clock (first: "
            f"{first!r}, {ahead} ahead); it would move the watermark there for good and make "
            "every later row late (a time in milliseconds? give seconds)"
        )
        self._user_error(x[beyond], err, self._what)
        return x[~beyond], times[~beyond]

    def _marks(self, partition: Hashable, times: np.ndarray) -> np.ndarray:
        """What each row is judged against (rows of one partition, in order): the larger
        of the watermark after it and its partition's own; records the watermark."""
        tracker = self._tracker
        if not len(times):
            return np.empty(0)
        run = np.maximum.accumulate(times)
        before = tracker.largest.get(partition)
        if before is not None:
            run = np.maximum(run, before)
        others = tracker.low_of_others(partition)
        low = run if others == math.inf else np.minimum(run, others)
        marks = np.maximum(low - self._max_delay, tracker.watermark)
        tracker.observe_run(partition, float(run[-1]), float(marks[-1]))
        # each row is judged against the watermark or its own partition's, the larger
        return np.maximum(marks, run - self._max_delay)

    def state_signature(self) -> str:
        return f"FrameTimestamps(column={self.column!r}, max_delay={self.max_delay})"


@DataFrame.register_api(attribute_name="timestamps")
def timestamps(
    sdf: DataFrame,
    column: Hashable,
    max_delay: object = 0,
    idle_timeout: object = None,
    max_future: object = None,
    **kwargs: object,
) -> TimedDataFrame:
    """Event times from ``column``: then ``.tumbling_window(...)``, ``.hopping_window(...)``
    or ``.session_window(...)`` and an aggregation (see the module docs).

    ``sdf.timestamps(column, max_delay=..., idle_timeout=...)``: ``max_delay``
    (seconds or ``"5s"``) bounds how far out of order rows may come;
    ``idle_timeout`` leaves a quiet input partition out of the watermark;
    ``max_future`` (seconds or ``"1h"``) sends rows whose time is further
    ahead of the wall clock through ``on_error`` (without it, the first such
    row is warned about); ``name=`` and ``on_error=`` as for every node.  Registered on
    ``DataFrame`` by this module (``import rivermark.dataframe`` imports it).
    """
    for option in ("partition", "partitions"):
        if option in kwargs:
            raise ConfigurationError(
                f"timestamps: {option}= is for streams of records; a DataFrame batch's "
                "partition is its Kafka partition (from its metadata), else the one input"
            )
    columns = list(sdf.example.columns)
    if column not in columns:
        raise ConfigurationError(
            f"timestamps: {column!r} is not a column of the DataFrame (columns: {columns!r}); "
            "pass the label of the column that holds each row's event time"
        )
    problem = _dtype_problem(sdf.example[column].dtype)
    if problem is not None:
        raise ConfigurationError(f"timestamps: column {column!r} {problem}")
    node = FrameTimestamps(
        sdf.local_stream, column, max_delay, idle_timeout, max_future=max_future, **kwargs
    )
    return TimedDataFrame(node, sdf.example, column)


class TimedDataFrame(DataFrame):
    """A streaming DataFrame whose rows have event times (``sdf.timestamps(column, ...)``).

    Element-wise operations give ordinary DataFrames; the windows below are
    available right here, as record windows follow ``timestamps`` directly.
    """

    def __init__(self, stream: FrameTimestamps, example: pd.DataFrame, column: Hashable) -> None:
        DataFrame.__init__(self, stream, example=example)
        self.time_column = column

    @property
    def watermark(self) -> float:
        """The watermark now (epoch seconds; ``-inf`` before the first row)."""
        return float(self.stream.watermark)  # type: ignore[attr-defined]

    def end_of_input(self) -> Results:
        """The input is complete: every window is emitted (a job calls this itself)."""
        return self.stream.end_of_input()  # type: ignore[attr-defined, no-any-return]

    def tumbling_window(
        self, size: object, grace: object = 0, offset: float = 0.0, emit: str = "final"
    ) -> EventWindows:
        """Windows ``[start, start + size)`` side by side; each row is in one.

        ``emit="updates"`` also passes on, after each batch, the windows it
        changed as they are then (column ``final`` False; True when closed).
        """
        kind = "tumbling_window"
        seconds = parse_interval(size, kind, "size")
        spec = WindowSpec(
            kind,
            seconds,
            seconds,
            _offset(kind, offset),
            0.0,
            _grace(kind, grace),
            emits_updates(kind, emit),
        )
        return EventWindows(self, spec)

    def hopping_window(
        self,
        size: object,
        step: object,
        grace: object = 0,
        offset: float = 0.0,
        emit: str = "final",
    ) -> EventWindows:
        """Windows of ``size`` seconds starting every ``step`` (``step <= size``)."""
        kind = "hopping_window"
        width = parse_interval(size, kind, "size")
        every = parse_interval(step, kind, "step")
        if every > width:
            raise ConfigurationError(
                f"hopping_window: step ({every}) is larger than size ({width}): rows between "
                "windows would belong to none; pass step <= size"
            )
        spec = WindowSpec(
            kind,
            width,
            every,
            _offset(kind, offset),
            0.0,
            _grace(kind, grace),
            emits_updates(kind, emit),
        )
        return EventWindows(self, spec)

    def session_window(self, gap: object, grace: object = 0, emit: str = "final") -> EventWindows:
        """Sessions: the rows of a key less than ``gap`` seconds apart share a window."""
        kind = "session_window"
        spec = WindowSpec(
            kind,
            gap=parse_interval(gap, kind, "gap"),
            grace=_grace(kind, grace),
            updates=emits_updates(kind, emit),
        )
        return EventWindows(self, spec)


def _grace(kind: str, grace: object) -> float:
    return _delay(grace, kind, "grace")


def _offset(kind: str, offset: object) -> float:
    if (
        isinstance(offset, bool)
        or not isinstance(offset, (int, float))
        or not math.isfinite(offset)
    ):
        raise ConfigurationError(
            f"{kind}: offset must be a number of seconds, got {offset!r}; pass e.g. offset=0"
        )
    return float(offset)


class EventWindows:
    """The windows of a :class:`TimedDataFrame` before their aggregation.

    ``groupby(...)`` keys them, ``[...]`` or an attribute selects the value
    columns (by default every column but the time and the keys), and an
    aggregation (``count``, ``size``, ``sum``, ``mean``, ``min``, ``max``,
    ``agg(func)``) builds the node; ``name=`` names it (as every stateful
    node, so that a changed pipeline still finds its state).
    """

    def __init__(
        self,
        timed: TimedDataFrame,
        spec: WindowSpec,
        by: Sequence[Hashable] = (),
        columns: Sequence[Hashable] | None = None,
    ) -> None:
        self.timed = timed
        self.spec = spec
        self.by = tuple(by)
        self.columns = None if columns is None else tuple(columns)

    def _labels(self) -> list[Hashable]:
        return list(self.timed.example.columns)

    def _reserved(self) -> tuple[str, ...]:
        """The result's own columns, which no key or value column may be named."""
        return ("start", "end", "final") if self.spec.updates else ("start", "end")

    def groupby(self, by: Hashable | list[Hashable]) -> EventWindows:
        """One window per key: a column label, or a list of them."""
        keys = list(by) if isinstance(by, (list, tuple)) else [by]
        for k in keys:
            if k not in self._labels() or isinstance(k, Stream):
                raise ConfigurationError(
                    f"{self.spec.describe()}.groupby: {k!r} is not a column of the DataFrame "
                    f"(columns: {self._labels()!r}); group by column labels"
                )
        return EventWindows(self.timed, self.spec, keys, self.columns)

    def __getitem__(self, key: Hashable | list[Hashable]) -> EventWindows:
        cols = list(key) if isinstance(key, list) else [key]
        for c in cols:
            if c not in self._labels():
                raise ConfigurationError(
                    f"{self.spec.describe()}: {c!r} is not a column of the DataFrame (columns: "
                    f"{self._labels()!r})"
                )
        return EventWindows(self.timed, self.spec, self.by, cols)

    def __getattr__(self, key: str) -> EventWindows:
        if key.startswith("_") or key in ("timed", "spec", "by", "columns"):
            raise AttributeError(key)
        if key in self.timed.example.columns:
            return self[key]
        raise AttributeError(f"EventWindows has no attribute or column {key!r}")

    def count(self, name: str | None = None) -> WindowedDataFrame:
        """Per window, the number of non-missing values of each column."""
        return self._aggregate("count", name)

    def size(self, name: str | None = None) -> WindowedDataFrame:
        """Per window, the number of rows (column ``size``)."""
        return self._aggregate("size", name)

    def sum(self, name: str | None = None) -> WindowedDataFrame:
        """Per window, the sum of each column (missing values skipped)."""
        return self._aggregate("sum", name)

    def mean(self, name: str | None = None) -> WindowedDataFrame:
        """Per window, the mean of each column (missing values skipped)."""
        return self._aggregate("mean", name)

    def min(self, name: str | None = None) -> WindowedDataFrame:
        """Per window, the minimum of each column (missing values skipped)."""
        return self._aggregate("min", name)

    def max(self, name: str | None = None) -> WindowedDataFrame:
        """Per window, the maximum of each column (missing values skipped)."""
        return self._aggregate("max", name)

    def agg(
        self, how: str | Callable[[pd.Series], object], name: str | None = None
    ) -> WindowedDataFrame:
        """Per window, ``how`` of each column: a built-in name, or ``func(series) -> value``.

        A function gets the window's values of one column in arrival order
        and runs when the window closes; its partial is the values
        themselves (checkpoint state: keep them plain numbers and strings).
        """
        if isinstance(how, str) and how in BUILT_IN:
            return self._aggregate(how, name)
        if not callable(how):
            raise ConfigurationError(
                f"{self.spec.describe()}.agg: expected one of {', '.join(map(repr, BUILT_IN))} "
                f"or a function of a pandas Series, got {how!r}"
            )
        return self._aggregate(how, name)

    aggregate = agg

    def _describe(self, how: str | Callable[[pd.Series], object]) -> str:
        head = f"timestamps({self.timed.time_column!r}).{self.spec.describe()}"
        keys = f".groupby({list(self.by)!r})" if self.by else ""
        sel = "" if self.columns is None else f"[{list(self.columns)!r}]"
        if isinstance(how, str):
            return f"{head}{keys}{sel}.{how}()"
        # optional: a callable object or a functools.partial has no __qualname__
        return f"{head}{keys}{sel}.agg({getattr(how, '__qualname__', 'func')})"

    def _value_columns(self, how: str | Callable[[pd.Series], object]) -> list[Hashable]:
        if how == "size":
            return []
        if self.columns is not None:
            cols = list(self.columns)
        else:
            cols = [c for c in self._labels() if c != self.timed.time_column and c not in self.by]
        op = self._describe(how)
        for c in cols:
            if c in self.by:
                raise ConfigurationError(f"{op}: column {c!r} is a key; select value columns")
            if c in self._reserved():
                raise ConfigurationError(
                    f"{op}: column {c!r} would clash with the window's {c}; rename it first"
                )
            dtype = self.timed.example[c].dtype
            if how in ("sum", "mean", "min", "max") and not is_numeric_dtype(dtype):
                raise ConfigurationError(
                    f"{op}: column {c!r} is not numeric ({dtype}); select numeric columns, e.g. "
                    f"windows[[...]].{how}(), or use agg(func)"
                )
        if not cols:
            raise ConfigurationError(f"{op}: there is no column to aggregate; select one")
        return cols

    def _aggregate(
        self, how: str | Callable[[pd.Series], object], name: str | None
    ) -> WindowedDataFrame:
        ex = self.timed.example
        for b in self.by:
            if b in self._reserved():
                raise ConfigurationError(
                    f"{self._describe(how)}: key column {b!r} would clash with the window's {b}; "
                    "rename it first"
                )
        cols = self._value_columns(how)
        outputs = ["size"] if how == "size" else cols
        time_dtype = ex[self.timed.time_column].dtype
        if not isinstance(time_dtype, pd.DatetimeTZDtype):
            time_dtype = None
        result_example = _result_example(ex, self.by, cols, how, time_dtype, self.spec.updates)
        kwargs = {} if name is None else {"name": name}
        node = FrameWindow(
            self.timed.stream,
            self.spec,
            self.by,
            cols,
            how,
            ex,
            outputs,
            result_example,
            time_dtype=time_dtype,
            op=self._describe(how),
            **kwargs,
        )
        return WindowedDataFrame(node, result_example)


def _result_example(
    ex: pd.DataFrame,
    by: Sequence[Hashable],
    cols: list[Hashable],
    how: str | Callable[[pd.Series], object],
    time_dtype: Dtype | None,
    updates: bool,
) -> pd.DataFrame:
    bound = np.dtype(float) if time_dtype is None else time_dtype
    data: dict[Hashable, pd.Series] = {
        "start": pd.Series([], dtype=bound),
        "end": pd.Series([], dtype=bound),
    }
    for b in by:
        data[b] = pd.Series([], dtype=ex[b].dtype)
    if how == "size":
        data["size"] = pd.Series([], dtype="int64")
    for c in cols:
        data[c] = pd.Series([], dtype=_value_dtype(ex[c].dtype, how))
    if updates:
        data["final"] = pd.Series([], dtype=bool)
    return pd.DataFrame(data)


def _value_dtype(dtype: Dtype, how: str | Callable[[pd.Series], object]) -> Dtype:
    if how == "count":
        return np.dtype("int64")
    if how == "mean":
        return np.dtype(float)
    if how == "sum":
        # optional: an extension dtype need not have a kind
        return np.dtype(float) if getattr(dtype, "kind", "f") == "f" else np.dtype("int64")
    if how in ("min", "max"):
        return dtype
    return np.dtype(object)


class WindowedDataFrame(DataFrame):
    """The closed windows of an event-time aggregation; ``.late`` holds the late rows."""

    def __init__(self, node: FrameWindow, example: pd.DataFrame) -> None:
        DataFrame.__init__(self, node, example=example)
        #: the node that keeps the windows
        self.window_node = node
        self._late_frame: DataFrame | None = None

    @property
    def late(self) -> DataFrame:
        """A streaming DataFrame of the rows that arrived after their window had closed."""
        if self._late_frame is None:
            node = self.window_node
            self._late_frame = DataFrame(node.late, example=node.input_example)
        return self._late_frame
