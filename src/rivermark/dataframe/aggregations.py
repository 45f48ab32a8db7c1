"""Incremental aggregations and the stream nodes that run them.

An :class:`Aggregation` (the contract, in :mod:`rivermark.dataframe.base`;
grouped aggregations in :mod:`rivermark.dataframe.grouped`) works on *partials*: ``partial(batch)`` summarises one
batch (e.g. its column sums, or its count, mean and sum of squared
deviations), ``combine(acc, p)`` adds a partial to a running accumulator,
``merge(a, b)`` joins two accumulators of disjoint rows (``a`` the older) and
``result(acc)`` turns an accumulator into what is emitted.  Nothing is ever
subtracted, so no result drifts.

Without a window, :class:`Aggregate` keeps one accumulator.  A window keeps
its batches with their partials and answers with two stacks: the older
batches' suffix accumulators (built once, when the older stack runs empty)
and the running accumulator of the newer ones; a batch that leaves pops one
suffix, a batch only partly evicted has its remaining rows summarised again.
Each batch costs a constant number of merges however long the window, and
the result equals the aggregation of exactly the window's rows.

The window's batches (and, without a window, the accumulator) are the node's
checkpointed state (plain pandas objects, picklable), so a checkpointing job
saves and restores them with no user code.  A running grouped accumulator is
checkpointed per key instead, as a :class:`~rivermark.KeyedState` of its
partials (:mod:`rivermark.dataframe.keyed`): a checkpoint writes the keys
changed since the previous one.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from numbers import Number
from typing import Any

import numpy as np
import pandas as pd

from rivermark.core.node import Stream
from rivermark.dataframe.base import Aggregation
from rivermark.dataframe.grouped import GroupbyAggregation
from rivermark.dataframe.keyed import KeyedLayout, KeyedPartials, parts_of, restore_acc
from rivermark.dataframe.partials import (
    KeyedAcc,
    Moments,
    aligned_add,
    aligned_sub,
    merge_moments,
    moments_of,
    moments_result,
    nan_extreme,
    ordered_union_add,
)
from rivermark.dataframe.running import (
    ConformingNode,
    Cumulative,
    EWMMean,
    OpName,
    RollingAggregate,
    check_time_index,
)
from rivermark.dataframe.schema import Dtype, DtypePlan, conform_deferring
from rivermark.dataframe.streamz_aggregate import StreamzAggregate
from rivermark.errors import ConfigurationError
from rivermark.state import as_keyed

logger = logging.getLogger(__name__)

__all__ = [
    "Aggregation",
    "Sum",
    "Count",
    "Size",
    "Mean",
    "Var",
    "Min",
    "Max",
    "ValueCounts",
    "Full",
    "GroupbyAggregation",
    "KeyedAcc",
    "Aggregate",
    "StreamzAggregate",
    "aggregate_node",
    "aggregate_example",
    "is_streamz_style",
    "Cumulative",
    "RollingAggregate",
    "EWMMean",
    "aligned_add",
    "aligned_sub",
]


def is_streamz_style(agg: object) -> bool:
    """Whether ``agg`` implements streamz's ``initial``/``on_new``/``on_old`` instead of partials.

    >>> class Count(_OneValue):
    ...     def initial(self, new): return 0
    ...     def on_new(self, state, new): return state + len(new), state + len(new)
    ...     def on_old(self, state, old): return state - len(old), state - len(old)
    >>> is_streamz_style(Count()), is_streamz_style(Sum())
    (True, False)
    """
    return (
        # optional: the question is whether a user's aggregation object has these
        getattr(type(agg), "partial", None) is Aggregation.partial
        and callable(getattr(agg, "on_new", None))
        and callable(getattr(agg, "initial", None))
    )


def aggregate_node(
    upstream: Stream,
    agg: object,
    n: int | None = None,
    value: pd.Timedelta | None = None,
    with_state: bool = False,
    start: object = None,
    example: pd.DataFrame | pd.Series | None = None,
    op: str | None = None,
) -> Stream:
    """The node running ``agg`` (either protocol) over ``upstream``, optionally windowed.

    ``op`` is the user-facing name of the operation (e.g. ``window(n=3).sum()``).
    """
    if is_streamz_style(agg):
        return StreamzAggregate(upstream, agg, n=n, value=value, with_state=with_state, start=start)
    if not isinstance(agg, Aggregation):
        raise ConfigurationError(
            f"aggregate: {agg!r} is not an Aggregation; subclass "
            "rivermark.dataframe.Aggregation and implement partial()/result(), or streamz's "
            "initial()/on_new()/on_old()"
        )
    return Aggregate(
        upstream, agg, n=n, value=value, with_state=with_state, start=start, example=example, op=op
    )


def aggregate_example(agg: Any, example: Any) -> Any:
    """What ``agg`` emits for the (empty) ``example`` batch, to type the output."""
    if is_streamz_style(agg):
        try:
            # an empty example makes e.g. a mean divide by zero: no warning for that
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return agg.on_new(agg.initial(example), example)[1]
        except Exception as e:  # the aggregation may not accept an empty batch
            logger.debug("aggregate: no example result from %r: %r", agg, e)
            return example
    if agg.full:
        return example
    return agg.example_result(example)


class _OneValue(Aggregation):
    """An aggregation whose accumulator is one running value (sum, count, size)."""

    def from_streamz_start(self, start: Any) -> Any:
        # streamz starts the running value at ``start``
        return None if isinstance(start, (dict, tuple, list)) else (start,)

    def result(self, acc: Any) -> Any:
        return acc[0]


class Sum(_OneValue):
    """Sum of each column (DataFrame) or of the values (Series).

    >>> Sum().example_result(pd.DataFrame({"a": [1, 2], "b": [3, 4]})).to_dict()
    {'a': 3, 'b': 7}
    """

    def partial(self, batch: Any) -> Any:
        return (batch.sum(),)


class Count(_OneValue):
    """Number of non-null values.

    >>> int(Count().example_result(pd.Series([1.0, None, 3.0])))
    2
    """

    def partial(self, batch: Any) -> Any:
        return (batch.count(),)


class Size(_OneValue):
    """Number of elements (``batch.size``: rows times columns for a DataFrame).

    >>> Size().example_result(pd.DataFrame({"a": [1, 2], "b": [3, 4]}))
    4
    """

    def partial(self, batch: Any) -> Any:
        return (int(batch.size),)


class Mean(Aggregation):
    """Mean of the non-null values.

    >>> agg = Mean()
    >>> acc = agg.combine(agg.partial(pd.Series([1.0, 2.0])), agg.partial(pd.Series([6.0])))
    >>> float(agg.result(acc))
    3.0
    """

    def partial(self, batch: Any) -> Any:
        return (batch.sum(), batch.count())

    def from_streamz_start(self, start: Any) -> Any:
        # streamz's mean state is ``(sum, count)``
        if isinstance(start, tuple) and len(start) == 2:
            return tuple(start)
        return None

    def result(self, acc: Any) -> Any:
        total, n = acc
        if isinstance(n, Number):
            return total / n if n else math.nan
        with np.errstate(all="ignore"):
            return total / n.where(n > 0)


class Var(Aggregation):
    """Variance (``ddof`` as in pandas); ``sqrt=True`` gives the standard deviation.

    The accumulator is the :class:`~rivermark.dataframe.partials.Moments`
    (count, mean, sum of squared deviations) in float64, merged pairwise.

    >>> agg = Var()
    >>> acc = agg.combine(None, agg.partial(pd.Series([1e9 + 0.1, 1e9 + 0.2])))
    >>> round(float(agg.result(agg.combine(acc, agg.partial(pd.Series([1e9 + 0.3]))))), 6)
    0.01
    """

    def __init__(self, ddof: int = 1, sqrt: bool = False) -> None:
        self.ddof = ddof
        self.sqrt = sqrt

    def partial(self, batch: Any) -> Any:
        return moments_of(batch)

    def combine(self, acc: Any, p: Any) -> Any:
        return p if acc is None else merge_moments(acc, p)

    def restore(self, acc: Any) -> Any:
        if acc is None or isinstance(acc, Moments):
            return acc
        # the layout before moments: (sum, sum of squares, count)
        x, x2, n = acc
        with np.errstate(all="ignore"):
            mean = x / n
            m2 = x2 - x * mean
        if isinstance(n, pd.Series):
            return Moments(n, mean.where(n > 0, 0.0), m2.where(n > 0, 0.0).clip(lower=0))
        return Moments(int(n), float(mean) if n else 0.0, max(float(m2), 0.0) if n else 0.0)

    def result(self, acc: Any) -> Any:
        return moments_result(acc, self.ddof, self.sqrt)

    def signature(self) -> str:
        return f"Var(ddof={self.ddof}, sqrt={self.sqrt})"


def _common(a: Any, b: Any) -> Any:
    """The dtype to give back when two partials share it (else let pandas infer)."""
    return a if a == b else None


def _extreme(a: Any, b: Any, op: Callable[[Any, Any], Any]) -> Any:
    if isinstance(a, pd.Series):
        if not a.index.equals(b.index):
            return pd.concat([a, b], axis=1).agg(op.__name__[:3], axis=1)
        values = nan_extreme(a.to_numpy(), b.to_numpy(), op)
        return pd.Series(values, index=a.index, name=a.name, dtype=_common(a.dtype, b.dtype))
    if a != a:  # missing
        return b
    if b != b:
        return a
    # plain comparison: works for strings and timestamps as well as numbers
    return min(a, b) if op is np.minimum else max(a, b)


class Min(Aggregation):
    """Minimum of the non-null values (of each column for a DataFrame).

    >>> agg = Min()
    >>> float(agg.result(agg.combine(agg.partial(pd.Series([2.0, None])), agg.partial(pd.Series([1.5])))))
    1.5
    """

    _op: Callable[[Any, Any], Any] = staticmethod(np.minimum)
    _how = "min"

    def partial(self, batch: Any) -> Any:
        return (getattr(batch, self._how)(),)

    def combine(self, acc: Any, p: Any) -> Any:
        return p if acc is None else (_extreme(acc[0], p[0], self._op),)

    def result(self, acc: Any) -> Any:
        return acc[0]


class Max(Min):
    """Maximum of the non-null values (of each column for a DataFrame).

    >>> agg = Max()
    >>> float(agg.result(agg.combine(agg.partial(pd.Series([2.0, None])), agg.partial(pd.Series([1.5])))))
    2.0
    """

    _op = staticmethod(np.maximum)
    _how = "max"


class ValueCounts(Aggregation):
    """How often each value occurs, in pandas' order: most frequent first, ties first-seen.

    >>> agg = ValueCounts()
    >>> acc = agg.combine(None, agg.partial(pd.Series(["a", "b", "b"])))
    >>> agg.result(agg.combine(acc, agg.partial(pd.Series(["c", "a"])))).to_dict()
    {'a': 2, 'b': 2, 'c': 1}
    """

    def partial(self, batch: Any) -> Any:
        return (batch.value_counts(sort=False),)

    def combine(self, acc: Any, p: Any) -> Any:
        return p if acc is None else (ordered_union_add(acc[0], p[0]),)

    def remove(self, acc: Any, p: Any) -> Any:
        out = aligned_sub(acc[0], p[0])
        return (out[out > 0],)

    def result(self, acc: Any) -> Any:
        return acc[0].sort_values(ascending=False, kind="stable")


class Full(Aggregation):
    """The window's data itself, concatenated (what ``window(...).full()`` emits).

    >>> s = Stream()
    >>> L = Aggregate(s, Full(), n=3).sink_to_list()
    >>> s.emit(pd.Series([1, 2])); s.emit(pd.Series([3, 4], index=[2, 3]))
    >>> L[-1].tolist()
    [2, 3, 4]
    """

    full = True

    def partial(self, batch: Any) -> Any:
        return None

    def combine(self, acc: Any, p: Any) -> Any:
        return None

    def remove(self, acc: Any, p: Any) -> Any:
        return None

    def result(self, acc: Any) -> Any:  # pragma: no cover - the node concatenates
        raise NotImplementedError


def _concat(frames: Sequence[Any], example: Any) -> Any:
    if not frames:
        return example.iloc[:0]
    if len(frames) == 1:
        return frames[0]
    return pd.concat(list(frames))


class Aggregate(ConformingNode):
    """Run an :class:`Aggregation` over a stream of batches, optionally windowed.

    ``n`` keeps the last ``n`` rows, ``value`` (a ``pd.Timedelta``) the rows whose
    index lies within ``value`` of the newest batch's newest index; with
    neither, everything seen so far is aggregated (nothing is stored but the
    accumulator).  ``with_state=True`` emits ``(state, result)`` tuples;
    ``start`` is such a state to begin from (as streamz's
    ``with_state``/``start``).  ``example`` is the batches' schema (every
    batch is matched to it, see :mod:`rivermark.dataframe.schema`) and ``op``
    the operation's user-facing name, reported in errors.

    >>> s = Stream()
    >>> L = Aggregate(s, Sum(), n=3).sink_to_list()
    >>> s.emit(pd.Series([1, 2])); s.emit(pd.Series([3, 4]))
    >>> [int(v) for v in L]
    [3, 9]
    """

    _graphviz_shape = "box"

    def __init__(
        self,
        upstream: Stream,
        agg: Aggregation,
        n: int | None = None,
        value: pd.Timedelta | None = None,
        with_state: bool = False,
        start: object = None,
        example: pd.DataFrame | pd.Series | None = None,
        op: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.agg = agg
        self.n = n
        self.value = value
        self.with_state = with_state
        self.example = example
        self.op = OpName(op or agg.signature())
        #: without a window: the running accumulator; with one: the newer batches'
        self.acc: Any = None
        #: the window's batches with their partials, oldest first
        self.parts: deque[tuple[Any, Any]] = deque()
        #: accumulators of the oldest ``len(front)`` parts: ``front[-1]`` covers all
        #: of them, ``front[-2]`` all but the oldest, ...
        self.front: list[Any] = []
        self.rows = 0
        #: running per-key partials: a KeyedState of them for incremental checkpoints
        self._book = KeyedPartials() if agg.keyed and not self.windowed else None
        #: columns a running aggregation takes unconverted (a window keeps converted batches)
        self._plan = (
            DtypePlan(agg.deferrable(example.columns))
            if isinstance(example, pd.DataFrame) and not self.windowed and not agg.full
            else None
        )
        Stream.__init__(self, upstream, **kwargs)
        if start is not None:
            acc = None if self.windowed else agg.from_streamz_start(start)
            if acc is not None:
                self.acc = acc
            else:
                self.set_state(start)

    @property
    def windowed(self) -> bool:
        return self.n is not None or self.value is not None

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, object]:
        book = self._book
        if book is None:
            return self._plain_state()
        # the live KeyedState of the per-key partials (the checkpoint takes its
        # changed keys at the barrier) beside their layout
        acc = self.acc
        state = {"acc": None if acc is None else book.layout(acc), "partials": book.sync(acc)}
        return {**state, "parts": list(self.parts), "rows": self.rows, "schema": self.schema}

    def _plain_state(self) -> dict[str, object]:
        # a window is its batches: the accumulators are rebuilt from them on restore
        acc = None if self.windowed or self.acc is None else self.agg.copy(self.acc)
        return {"acc": acc, "parts": list(self.parts), "rows": self.rows, "schema": self.schema}

    def _state_for_output(self) -> dict[str, object]:
        # ``with_state=True``: a copy in the form ``start=`` takes
        return self._plain_state()

    def set_state(self, state: object) -> None:
        self.front = []
        if state is None:
            self.acc, self.parts, self.rows = None, deque(), 0
            self._book = None if self._book is None else KeyedPartials()
            return
        if not isinstance(state, dict) or "acc" not in state:
            raise ConfigurationError(
                f"{self.display_name()}: start/state must be a state this node emitted "
                f"(with_state=True) or checkpointed, got {state!r}; pass start=None to begin empty"
            )
        agg = self.agg
        frames = [f for f, _ in state.get("parts", ())]
        self.rows = int(state.get("rows", 0))
        # older checkpoints have no schema: the kept batches tell it
        self.schema = state.get("schema")
        if self.schema is None and frames:
            f = frames[0]
            self.schema = f.dtypes if isinstance(f, pd.DataFrame) else f.dtype
        if self.windowed and not agg.full:
            # partials are recomputed (their layout may have changed since the checkpoint)
            self.parts = deque((f, agg.partial(f)) for f in frames)
            self.acc = None
            self._flip()
            return
        self.parts = deque((f, None) for f in frames)
        if "partials" in state:
            self._restore_keyed(state["acc"], state["partials"])
            return
        acc = agg.restore(state["acc"])
        # never mutate the caller's object (a published ``start`` may be reused)
        self.acc = None if acc is None else agg.copy(acc)
        if self._book is not None:
            # the older form (the whole accumulator): the next checkpoint writes every key
            self._book = KeyedPartials()
            if self.acc is not None:
                self._book.note(self.acc.keys)

    def state_from_pandas(self, value: Any) -> Any:
        """The state of a running groupby aggregation from its pandas form.

        The form is what ``rivermark.checkpoint.read()`` gives for the node
        (``keyed.parts_frame``): the value it emits, or, for a mean, variance
        or standard deviation, its running parts by key.  Its batch schema is
        fixed again by the next batch.
        """
        agg = self.agg
        if self._book is None or not isinstance(agg, GroupbyAggregation):
            raise ConfigurationError(
                f"{self.display_name()} {self.op.__qualname__}: only a running groupby "
                "aggregation's state has a pandas form; give this node's state as "
                "read(..., as_pandas=False) gives it"
            )
        try:
            parts = parts_of(value, agg.layout, agg.one_column)
            acc = KeyedAcc.from_partial([x.copy() for x in parts], agg.layout)
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigurationError(
                f"{self.display_name()} {self.op.__qualname__}: its state's pandas form is {e}, "
                f"as read() gives it; got {type(value).__name__}"
            ) from None
        book = KeyedPartials()
        book.note(acc.keys)
        partials = book.sync(acc)
        return {
            "acc": book.layout(acc),
            "partials": partials,
            "parts": [],
            "rows": 0,
            "schema": None,
        }

    def _restore_keyed(self, layout: KeyedLayout | None, partials: Any) -> None:
        """Adopt the per-key partials restored from a delta chain (the chain goes on)."""
        self.acc = None if layout is None else restore_acc(layout, partials)
        self._book = KeyedPartials(as_keyed(partials))

    def state_signature(self) -> str:
        return f"Aggregate({self.agg.signature()}, n={self.n}, value={self.value})"

    # ---------------------------------------------------------------- the two stacks
    def _flip(self) -> None:
        """Move every kept batch to the older stack (its suffix accumulators)."""
        agg = self.agg
        front: list[Any] = []
        for _, p in reversed(self.parts):
            lifted = agg.combine(None, p)
            front.append(lifted if not front else agg.merge(lifted, front[-1]))
        self.front = front
        self.acc = None

    def _pop_oldest(self) -> tuple[Any, Any]:
        if not self.front:
            self._flip()
        self.front.pop()
        frame, p = self.parts.popleft()
        self.rows -= len(frame)
        return frame, p

    def _keep_rest(self, rest: Any) -> None:
        """Replace the oldest batch by its rows ``rest`` still in the window."""
        if not self.front:
            self._flip()
        agg = self.agg
        p = agg.partial(rest)
        self.rows -= len(self.parts[0][0]) - len(rest)
        self.parts[0] = (rest, p)
        self.front.pop()
        lifted = agg.combine(None, p)
        self.front.append(lifted if not self.front else agg.merge(lifted, self.front[-1]))

    def _window_acc(self) -> Any:
        if self.front and self.acc is not None:
            return self.agg.merge(self.front[-1], self.acc)
        return self.front[-1] if self.front else self.acc

    # ---------------------------------------------------------------- eviction
    def _evict_rows(self) -> None:
        assert self.n is not None
        while self.rows > self.n and self.parts:
            excess = self.rows - self.n
            frame = self.parts[0][0]
            if len(frame) <= excess:
                self._pop_oldest()
            else:
                self._keep_rest(frame.iloc[excess:])

    def _evict_time(self, newest: pd.Timestamp) -> None:
        assert self.value is not None
        cutoff = newest - self.value  # the caller checked the index type
        while self.parts:
            frame = self.parts[0][0]
            index = frame.index
            if index.is_monotonic_increasing:
                k = int(index.searchsorted(cutoff, side="right"))
                if k == 0:
                    break
                if k >= len(frame):
                    self._pop_oldest()
                    continue
                self._keep_rest(frame.iloc[k:])
                break
            mask = np.asarray(index <= cutoff)
            if not mask.any():
                break
            if mask.all():
                self._pop_oldest()
                continue
            self._keep_rest(frame[~mask])
            break

    def _evict_full(self, x: pd.DataFrame | pd.Series) -> None:
        """A ``full()`` window keeps frames only (no partials)."""
        parts = self.parts
        if self.n is not None:
            excess = self.rows - self.n
            while excess > 0 and parts:
                frame = parts[0][0]
                if len(frame) <= excess:
                    parts.popleft()
                    self.rows -= len(frame)
                    excess -= len(frame)
                else:
                    parts[0] = (frame.iloc[excess:], None)
                    self.rows -= excess
                    excess = 0
        elif self.value is not None:
            cutoff = self._newest(x) - self.value
            while parts:
                frame = parts[0][0]
                mask = np.asarray(frame.index <= cutoff)
                if not mask.any():
                    break
                self.rows -= int(mask.sum())
                if mask.all():
                    parts.popleft()
                    continue
                parts[0] = (frame[~mask], None)
                break

    def _newest(self, x: pd.DataFrame | pd.Series) -> pd.Timestamp:
        """The newest index of batch ``x`` (a time window needs a datetime index)."""
        check_time_index(x, f"{self.display_name()} {self.op.__qualname__}")
        return x.index.max()

    # ---------------------------------------------------------------- data flow
    def _conform_deferring(
        self, x: pd.DataFrame | pd.Series
    ) -> tuple[pd.DataFrame | pd.Series, dict[Hashable, Dtype]]:
        """``x`` matched to the schema, but for the columns the partial converts (with their dtypes)."""
        if self._plan is None:
            return self._conform(x), {}
        x, self.schema, deferred = conform_deferring(
            x, self.example, self.schema, self._where, self._plan
        )
        return x, deferred

    def _step(self, x: pd.DataFrame | pd.Series) -> object:
        x, deferred = self._conform_deferring(x)
        agg = self.agg
        n = len(x)
        if agg.full:
            if n:
                # an unwindowed full() (expanding().apply) keeps everything it has seen
                self.parts.append((x, None))
                self.rows += n
                self._evict_full(x)
            return _concat([f for f, _ in self.parts], x)
        if n:
            p = agg.partial(x)
            if deferred:
                p = agg.converted(p, deferred, self.acc)
            self.acc = agg.combine(self.acc, p)
            if self._book is not None:
                self._book.note(p[0].index, len(self.acc.keys))
            if self.windowed:
                self.parts.append((x, p))
                self.rows += n
                if self.n is not None:
                    self._evict_rows()
                else:
                    self._evict_time(self._newest(x))
        acc = self._window_acc() if self.windowed else self.acc
        if acc is None:  # nothing seen (or left in the window): pandas' result on no rows
            return agg.example_result(x.iloc[:0])
        return agg.result(acc)


AggregationFactory = Callable[[], Aggregation]
KeyLike = Hashable
