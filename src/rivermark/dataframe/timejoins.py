"""Joins of streaming DataFrames by event time: ``merge_asof`` and ``join_interval``.

Both sides are streaming DataFrames with event times
(``sdf.timestamps(column, ...)``); the joins are the record joins of
:mod:`rivermark.operators.timejoins` and :mod:`rivermark.operators.intervaljoin`
applied to rows, computed per batch with pandas (``merge_asof``, ``merge``):

* ``left.merge_asof(right, by=..., tolerance=None, how="left")``: each left
  row with the latest right row of its key at or before its time (the right
  side is the table's changes, each row a version); a left row waits until
  the right side's watermark is past its time, as ``join_asof`` does;
* ``left.join_interval(right, by=..., lower=0, upper=0, how="inner")``: the
  pairs of rows of one key with ``l.time + lower <= r.time <= l.time + upper``.

A row whose time is below its own side's watermark (judged as windows judge
rows) is late: it goes to ``.late`` and joins nothing.  What is joined is
what the record joins give over the same rows (rows in time order per
emitted batch); the held rows are checkpoint state (DataFrames, written as
data).  See ``docs/joins.md``.

>>> import pandas as pd
>>> from rivermark import Stream
>>> from rivermark.dataframe import DataFrame
>>> quotes, trades = Stream(), Stream()
>>> ex_q = pd.DataFrame({"ts": [0.0], "sym": ["a"], "bid": [0.0]}).iloc[:0]
>>> ex_t = pd.DataFrame({"ts": [0.0], "sym": ["a"], "qty": [0]}).iloc[:0]
>>> q = DataFrame(quotes, example=ex_q).timestamps("ts")
>>> t = DataFrame(trades, example=ex_t).timestamps("ts")
>>> out = t.merge_asof(q, by="sym").stream.sink_to_list()
>>> quotes.emit(pd.DataFrame({"ts": [1.0, 5.0], "sym": ["a", "a"], "bid": [10.0, 11.0]}))
>>> trades.emit(pd.DataFrame({"ts": [2.0, 6.0], "sym": ["a", "a"], "qty": [3, 4]}))
>>> out[0]  # the row at 6 waits for the quotes' watermark to pass 6
    ts sym  qty   bid
0  2.0   a    3  10.0
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from rivermark.core.figures import JoinFigures
from rivermark.core.node import Stream
from rivermark.core.refs import Metadata
from rivermark.dataframe.core import DataFrame
from rivermark.dataframe.eventtime import FrameTimestamps, TimedDataFrame
from rivermark.errors import ConfigurationError
from rivermark.operators.eventtime import LateRecords
from rivermark.operators.joinbase import HeldSides, LateSide, signed_interval
from rivermark.operators.timestamps import Results, _delay, _merge

__all__ = ["FrameAsofJoin", "FrameIntervalJoin", "merge_asof", "join_interval"]

#: the columns a join adds to the rows it holds (removed from what it emits)
_T, _SEQ, _HIT, _MATCHED = "__rm_time", "__rm_seq", "__rm_hit", "__rm_matched"


def _keys(
    kind: str, by: Hashable | list[Hashable] | None, left: TimedDataFrame, right: TimedDataFrame
) -> list[Hashable]:
    keys = [] if by is None else list(by) if isinstance(by, (list, tuple)) else [by]
    if not keys:
        raise ConfigurationError(f"{kind}: by= is required (a column label, or a list of them)")
    for side, sdf in (("left", left), ("right", right)):
        missing = [k for k in keys if k not in sdf.example.columns]
        if missing:
            raise ConfigurationError(
                f"{kind}: by={missing!r} is not a column of the {side} DataFrame (columns: "
                f"{list(sdf.example.columns)!r}); pass column labels both sides have"
            )
    return keys


def _timed(kind: str, sdf: object, side: str) -> TimedDataFrame:
    if not isinstance(sdf, TimedDataFrame):
        raise ConfigurationError(
            f"{kind}: the {side} DataFrame needs event times; pass sdf.timestamps(column, ...)"
        )
    return sdf


def _same_key_dtypes(
    left: pd.DataFrame, right: pd.DataFrame, by: list[Hashable]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``left`` and ``right`` with each key column of one dtype (``merge_asof`` needs it).

    Batches of one side may differ from the other's in how a key column is
    typed (an ``object`` example, ``str`` batches under pandas 3; ``int``
    and ``float``): a column whose dtypes differ is compared as Python
    objects on both sides, as the record joins compare keys.

    >>> a = pd.DataFrame({"k": pd.Series(["x"], dtype=object)})
    >>> b = pd.DataFrame({"k": pd.Series(["x"], dtype="string")})
    >>> [str(f["k"].dtype) for f in _same_key_dtypes(a, b, ["k"])]
    ['object', 'object']
    """
    differ = [k for k in by if left[k].dtype != right[k].dtype]
    if not differ:
        return left, right
    as_objects = {k: object for k in differ}
    return left.astype(as_objects), right.astype(as_objects)


class _FrameJoin(LateSide, Stream):
    """Two timed streaming DataFrames joined by event time (what both joins share).

    ``.late`` holds the late rows of either side, as DataFrames of the side's
    columns, counted per side as :class:`LateSide` counts records.
    """

    kind = "frame join"

    def __init__(
        self, left: TimedDataFrame, right: TimedDataFrame, by: list[Hashable], **kwargs: Any
    ) -> None:
        self.by = by
        self.left_clock: FrameTimestamps = left.stream  # type: ignore[assignment]
        self.right_clock: FrameTimestamps = right.stream  # type: ignore[assignment]
        self.left_time, self.right_time = left.time_column, right.time_column
        self._seq = 0
        self._late: LateRecords | None = None
        #: rows that arrived after their side's watermark had passed their time
        self.late_count = 0
        Stream.__init__(self, upstreams=[self.left_clock, self.right_clock], **kwargs)
        for clock in (self.left_clock, self.right_clock):
            clock.add_client(self)

    def update(
        self, x: pd.DataFrame, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        side = 0 if who is self.upstreams[0] else 1
        clock = self.left_clock if side == 0 else self.right_clock
        times = clock.times
        late = times < clock.row_watermarks
        results: Results = None
        if late.any():
            n_late = int(late.sum())
            self.late_count += n_late
            left, right = self.late_sides
            self.late_sides = (left + n_late, right) if side == 0 else (left, right + n_late)
            if self._late is not None:
                results = self._late.pass_late(x[late], metadata)
            x, times = x[~late], times[~late]
        n = len(x)
        rows = x.copy(deep=False)  # the batch's columns are not changed, only added to
        rows[_T] = times
        rows[_SEQ] = np.arange(self._seq, self._seq + n)
        self._seq += n
        results = _merge(results, self._take(side, rows))
        return _merge(results, self.close_until(clock.watermark))

    def _take(self, side: int, rows: pd.DataFrame) -> Results:
        raise NotImplementedError

    def result_example(self, left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
        """The columns and dtypes of what the join emits (its join of the sides' examples)."""
        raise NotImplementedError

    def close_until(self, watermark: float) -> Results:
        raise NotImplementedError

    def next_due(self) -> float:
        return float("inf")  # the join looks at every batch itself; the end of input calls it

    def _out(self, frame: pd.DataFrame) -> Results:
        if not len(frame):
            return None
        helpers = (_T, _SEQ, _HIT, _MATCHED)
        frame = frame[[c for c in frame.columns if c not in helpers]]
        frame.index = pd.RangeIndex(len(frame))
        return self._emit(frame, None)


class FrameAsofJoin(_FrameJoin):
    """``left.merge_asof(right, by=...)`` (see the module docs)."""

    kind = "merge_asof"

    def __init__(
        self,
        left: TimedDataFrame,
        right: TimedDataFrame,
        by: list[Hashable],
        tolerance: float | None,
        how: str,
        suffixes: tuple[str, str],
        **kwargs: object,
    ) -> None:
        self.tolerance, self.how, self.suffixes = tolerance, how, suffixes
        self.value_columns = [
            c for c in right.example.columns if c != right.time_column and c not in by
        ]
        #: the right rows not late: the versions (pruned by the left side's floor)
        self._versions = right.example.iloc[:0][[*by, *self.value_columns]].assign(
            **{_T: np.empty(0), _HIT: np.empty(0, dtype=bool)}
        )
        #: batches of versions not yet concatenated to ``_versions`` (in arrival order)
        self._new: list[pd.DataFrame] = []
        #: the versions in order of time (stable: arrival order within a time), when known
        self._sorted: pd.DataFrame | None = None
        #: left rows waiting for the right side's watermark
        self._waiting = left.example.iloc[:0].assign(
            **{_T: np.empty(0), _SEQ: np.empty(0, dtype=np.int64)}
        )
        self._held_new = 0
        self._pruned = 0
        #: left rows that waited for the right side's watermark, since the job first started
        self.waited = 0
        super().__init__(left, right, by, **kwargs)

    def _take(self, side: int, rows: pd.DataFrame) -> Results:
        if side == 1:
            rows[_HIT] = True
            self._new.append(rows[self._versions.columns])
            self._held_new += len(rows)
            self._sorted = None
            return None
        ready = rows[_T].to_numpy() < self.right_clock.watermark
        if not ready.all():
            wait = rows[~ready]
            self.waited += len(wait)
            self._waiting = pd.concat([self._waiting, wait])
        return self._out(self._join(rows[ready]))

    def close_until(self, watermark: float) -> Results:
        mark = self.right_clock.watermark
        waiting = self._waiting
        results: Results = None
        if len(waiting):
            ready = waiting[_T].to_numpy() < mark
            if ready.any():
                self._waiting = waiting[~ready]
                results = self._out(self._join(waiting[ready]))
        if len(self._versions) + self._held_new > 2 * self._pruned + 1024:
            self._prune()
        return results

    def _join(self, rows: pd.DataFrame) -> pd.DataFrame:
        if not len(rows):
            return rows
        # rows come in arrival order: a stable sort by time orders ties by arrival
        rows = rows.sort_values(_T, kind="mergesort")
        versions = self._sorted
        if versions is None:
            versions = self._sorted = self._all().sort_values(_T, kind="mergesort")
        rows, versions = _same_key_dtypes(rows, versions, self.by)
        merged = pd.merge_asof(
            rows,
            versions,
            on=_T,
            by=self.by,
            direction="backward",
            tolerance=self.tolerance,
            allow_exact_matches=True,
            suffixes=self.suffixes,
        )
        if self.how == "inner":
            merged = merged[merged[_HIT].notna()]
        return merged

    def result_example(self, left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
        lt = left.iloc[:0].assign(**{_T: np.empty(0), _SEQ: np.empty(0, dtype=np.int64)})
        rt = right.iloc[:0][[*self.by, *self.value_columns]].assign(
            **{_T: np.empty(0), _HIT: np.empty(0, dtype=bool)}
        )
        lt, rt = _same_key_dtypes(lt, rt, self.by)
        frame = pd.merge_asof(lt, rt, on=_T, by=self.by, suffixes=self.suffixes)
        return frame.drop(columns=[_T, _SEQ, _HIT])

    def floor(self) -> float:
        """The oldest time a left row still to be joined may have."""
        low = self.left_clock.watermark
        if len(self._waiting):
            low = min(low, float(self._waiting[_T].min()))
        return low

    def _all(self) -> pd.DataFrame:
        """Every version held, in arrival order (the new batches concatenated once)."""
        if self._new:
            parts = [self._versions, *self._new] if len(self._versions) else self._new
            self._versions = pd.concat(parts) if len(parts) > 1 else parts[0]
            self._new, self._held_new = [], 0
        return self._versions

    def _prune(self) -> None:
        """Keep per key the versions from the newest at or before the floor on."""
        versions, floor = self._all(), self.floor()
        old = versions[_T].to_numpy() <= floor
        if old.any():
            kept = versions[old].sort_values(_T, kind="mergesort")
            kept = kept.drop_duplicates(subset=self.by, keep="last")
            versions = pd.concat([kept, versions[~old]])
            self._sorted = None
        self._versions = versions
        self._pruned = len(versions)

    @property
    def waiting(self) -> int:
        """How many left rows wait for the right side's watermark."""
        return len(self._waiting)

    def records_held(self) -> int | None:
        return len(self._waiting) + len(self._versions) + self._held_new

    def join_figures(self) -> JoinFigures:
        waiting = self._waiting  # one frame, however the join replaces it meanwhile
        return JoinFigures(
            buffered={"left": len(waiting), "right": len(self._versions) + self._held_new},
            late=self._late_figures(),
            waited=self.waited,
            oldest_waiting=float(waiting[_T].min()) if len(waiting) else None,
        )

    def _counters(self) -> dict[str, object]:
        return {**super()._counters(), "waited": self.waited}

    def get_state(self) -> dict[str, object]:
        return {
            "versions": self._all(),
            "waiting": self._waiting,
            "seq": self._seq,
            "counters": self._counters(),
        }

    def set_state(self, state: Mapping[str, object]) -> None:
        self._versions, self._waiting = state["versions"], state["waiting"]
        self._new, self._held_new, self._sorted = [], 0, None
        self._seq = int(cast(int, state["seq"]))
        self._pruned = len(self._versions)
        self._restore_counters(state)
        counters = cast(Mapping[str, int], state.get("counters", {}))
        self.waited = int(counters.get("waited", 0))

    def state_signature(self) -> str:
        return f"FrameAsofJoin(by={self.by!r}, tolerance={self.tolerance}, how={self.how})"


class FrameIntervalJoin(HeldSides, _FrameJoin):
    """``left.join_interval(right, by=..., lower=..., upper=...)`` (see the module docs)."""

    kind = "join_interval"

    def __init__(
        self,
        left: TimedDataFrame,
        right: TimedDataFrame,
        by: list[Hashable],
        lower: float,
        upper: float,
        how: str,
        suffixes: tuple[str, str],
        **kwargs: object,
    ) -> None:
        self.lower, self.upper, self.how, self.suffixes = lower, upper, how, suffixes
        extra = {_T: np.empty(0), _SEQ: np.empty(0, dtype=np.int64)}
        self._lefts = left.example.iloc[:0].assign(**extra, **{_MATCHED: np.empty(0, bool)})
        self._rights = right.example.iloc[:0].assign(**extra)
        super().__init__(left, right, by, **kwargs)

    def _pairs(self, lefts: pd.DataFrame, rights: pd.DataFrame) -> pd.DataFrame:
        pairs = lefts.merge(rights, on=self.by, suffixes=self.suffixes)
        lt, rt = pairs[_T + self.suffixes[0]], pairs[_T + self.suffixes[1]]
        pairs = pairs[(lt + self.lower <= rt) & (rt <= lt + self.upper)]
        return pairs.sort_values(
            [_SEQ + self.suffixes[0], _SEQ + self.suffixes[1]], kind="mergesort"
        )

    def _take(self, side: int, rows: pd.DataFrame) -> Results:
        if side == 0:
            pairs = self._pairs(rows, self._rights)
            hit = rows[_SEQ].isin(pairs[_SEQ + self.suffixes[0]])
            self._lefts = pd.concat([self._lefts, rows.assign(**{_MATCHED: hit.to_numpy()})])
        else:
            pairs = self._pairs(self._lefts.drop(columns=[_MATCHED]), rows)
            if len(pairs):
                hit = self._lefts[_SEQ].isin(pairs[_SEQ + self.suffixes[0]])
                self._lefts[_MATCHED] = self._lefts[_MATCHED].to_numpy() | hit.to_numpy()
            self._rights = pd.concat([self._rights, rows])
        return self._out(self._strip(pairs))

    def result_example(self, left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
        extra = {_T: np.empty(0), _SEQ: np.empty(0, dtype=np.int64)}
        lt, rt = left.iloc[:0].assign(**extra), right.iloc[:0].assign(**extra)
        return self._strip(lt.merge(rt, on=self.by, suffixes=self.suffixes))

    def _strip(self, frame: pd.DataFrame) -> pd.DataFrame:
        helpers = [c + s for c in (_T, _SEQ) for s in self.suffixes]
        return frame.drop(columns=[c for c in helpers if c in frame])

    def close_until(self, watermark: float) -> Results:
        """Drop the rows no row to come can pair with; emit the unmatched left rows."""
        lefts, rights = self._lefts, self._rights
        gone = lefts[_T].to_numpy() + self.upper < self.right_clock.watermark
        results: Results = None
        if gone.any():
            self._lefts = lefts[~gone]
            alone = lefts[gone & ~lefts[_MATCHED].to_numpy()]
            if self.how == "left" and len(alone):
                empty = self._rights.iloc[:0]
                frame = alone.drop(columns=[_MATCHED]).merge(
                    empty, on=self.by, how="left", suffixes=self.suffixes
                )
                results = self._out(self._strip(frame))
        dropped = rights[_T].to_numpy() - self.lower < self.left_clock.watermark
        if dropped.any():
            self._rights = rights[~dropped]
        return results

    def held_sides(self) -> tuple[int, int]:
        return len(self._lefts), len(self._rights)

    def get_state(self) -> dict[str, object]:
        return {
            "lefts": self._lefts,
            "rights": self._rights,
            "seq": self._seq,
            "counters": self._counters(),
        }

    def set_state(self, state: Mapping[str, object]) -> None:
        self._lefts, self._rights = state["lefts"], state["rights"]
        self._seq = int(cast(int, state["seq"]))
        self._restore_counters(state)

    def state_signature(self) -> str:
        return (
            f"FrameIntervalJoin(by={self.by!r}, lower={self.lower}, upper={self.upper}, "
            f"how={self.how})"
        )


def _suffixes(kind: str, suffixes: Sequence[str]) -> tuple[str, str]:
    if len(suffixes) != 2 or suffixes[0] == suffixes[1]:
        raise ConfigurationError(
            f"{kind}: suffixes must be two different strings, got {suffixes!r}"
        )
    return (str(suffixes[0]), str(suffixes[1]))


@DataFrame.register_api(attribute_name="merge_asof")
def merge_asof(
    sdf: DataFrame,
    right: DataFrame,
    on: Hashable | None = None,
    by: Hashable | list[Hashable] | None = None,
    direction: str = "backward",
    tolerance: object = None,
    how: str = "left",
    suffixes: Sequence[str] = ("_x", "_y"),
    **kwargs: object,
) -> DataFrame:
    """Join each row with the latest row of ``right`` of its key at or before its time.

    Both DataFrames need event times (``sdf.timestamps(column, ...)``);
    ``on`` (optional) names the time column, which must be the one each side
    was given.  ``by``: the key column(s).  ``direction``: ``"backward"``
    only.  ``tolerance`` (seconds or a duration string): a version older
    than that is not used.  ``how="left"`` (pandas' answer: missing values
    where nothing matched) or ``"inner"`` (such rows left out).  The right
    side's time column is not in the result; its other columns are, with
    ``suffixes`` on clashes.  A left row waits until the right side's
    watermark is past its time.
    """
    kind = "merge_asof"
    left, right_t = _timed(kind, sdf, "left"), _timed(kind, right, "right")
    if direction != "backward":
        raise ConfigurationError(
            f"{kind}: direction must be 'backward' (the latest version at or before a row's "
            f"time; a later one would make the join wait on the future), got {direction!r}"
        )
    if on is not None and (on != left.time_column or on != right_t.time_column):
        raise ConfigurationError(
            f"{kind}: on={on!r} must be the event-time column of both sides (left "
            f"{left.time_column!r}, right {right_t.time_column!r}); give each side "
            "timestamps(column) and leave on= out"
        )
    if how not in ("left", "inner"):
        raise ConfigurationError(f"{kind}: how must be 'left' or 'inner', got {how!r}")
    keys = _keys(kind, by, left, right_t)
    tol = None if tolerance is None else _delay(tolerance, kind, "tolerance")
    node = FrameAsofJoin(left, right_t, keys, tol, how, _suffixes(kind, suffixes), **kwargs)
    return DataFrame(node, example=node.result_example(left.example, right_t.example))


@DataFrame.register_api(attribute_name="join_interval")
def join_interval(
    sdf: DataFrame,
    right: DataFrame,
    by: Hashable | list[Hashable] | None = None,
    lower: object = 0,
    upper: object = 0,
    how: str = "inner",
    suffixes: Sequence[str] = ("_x", "_y"),
    **kwargs: object,
) -> DataFrame:
    """Pairs of rows of one key with ``l.time + lower <= r.time <= l.time + upper``.

    As the record ``join_interval``: ``lower`` and ``upper`` in seconds or
    duration strings (``lower`` may be negative), ``how="left"`` also emits a
    left row that found no partner (missing values on the right) once its
    interval has closed.  Columns of both sides, ``suffixes`` on clashes.
    """
    kind = "join_interval"
    left, right_t = _timed(kind, sdf, "left"), _timed(kind, right, "right")
    if how not in ("left", "inner"):
        raise ConfigurationError(f"{kind}: how must be 'inner' or 'left', got {how!r}")
    if left.stream is right_t.stream:
        raise ConfigurationError(
            f"{kind}: the left and right DataFrames are the same; join two, each with "
            "its own timestamps(column)"
        )
    low, high = signed_interval(lower, kind, "lower"), signed_interval(upper, kind, "upper")
    if low > high:
        raise ConfigurationError(
            f"{kind}: lower ({low}) is above upper ({high}): no pair could match; pass "
            "lower <= upper"
        )
    keys = _keys(kind, by, left, right_t)
    node = FrameIntervalJoin(
        left, right_t, keys, low, high, how, _suffixes(kind, suffixes), **kwargs
    )
    return DataFrame(node, example=node.result_example(left.example, right_t.example))
