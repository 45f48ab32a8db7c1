"""Incremental aggregations and the stream nodes that run them.

An :class:`Aggregation` works on *partials*: ``partial(batch)`` summarises one
batch (e.g. its column sums), ``combine(acc, p)`` adds a partial to the running
accumulator, ``remove(acc, p)`` takes a partial out again and ``result(acc)``
turns the accumulator into what is emitted.  :class:`Aggregate` keeps, for a
window, a deque of ``(batch, partial)`` pairs: a new batch is added once, a
batch leaving the window is subtracted once (a batch that is only partly
evicted has just its evicted head summarised), so the work per batch is
proportional to the batch, not to the window.

The accumulator and the window's batches are the node's checkpointed state
(plain pandas objects, picklable), so a checkpointing job saves and restores
them with no user code.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from numbers import Number
from typing import Any

import numpy as np
import pandas as pd

from ..core.node import Stream
from ..core.refs import Metadata
from ..errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "Aggregation",
    "Sum",
    "Count",
    "Size",
    "Mean",
    "Var",
    "ValueCounts",
    "Full",
    "GroupbyAggregation",
    "Aggregate",
    "StreamzAggregate",
    "aggregate_node",
    "aggregate_example",
    "is_streamz_style",
    "Cumulative",
    "RollingAggregate",
    "EWMMean",
]


def aligned_add(a: Any, b: Any) -> Any:
    """Add two partials, aligning pandas objects on their index (missing = 0).

    Integer dtypes are kept (``Series.add(fill_value=0)`` would turn them into floats).

    >>> aligned_add(pd.Series([1, 2], index=["a", "b"]), pd.Series([5], index=["b"])).to_dict()
    {'a': 1, 'b': 7}
    """
    if a is None:
        return b
    if not isinstance(a, (pd.Series, pd.DataFrame)):
        return a + b
    if a.index.equals(b.index):
        return a + b
    idx = a.index.union(b.index)
    return a.reindex(idx, fill_value=0) + b.reindex(idx, fill_value=0)


def aligned_sub(a: Any, b: Any) -> Any:
    """Subtract partial ``b`` from ``a`` (``b``'s index is a subset of ``a``'s)."""
    if not isinstance(a, (pd.Series, pd.DataFrame)):
        return a - b
    if a.index.equals(b.index):
        return a - b
    return a - b.reindex(a.index, fill_value=0)


class Aggregation:
    """An incremental aggregation over batches (DataFrames or Series).

    Subclasses implement :meth:`partial` and :meth:`result`; the default
    :meth:`combine`/:meth:`remove` add and subtract partials component-wise
    (a partial is a tuple of numbers or pandas objects).

    A subclass may instead implement streamz's protocol: ``initial(batch)``
    (the first state), ``on_new(state, batch)`` and ``on_old(state, batch)``
    (each returning ``(new_state, result)``); ``aggregate()`` then runs it
    with :class:`StreamzAggregate`.

    >>> agg = Sum()
    >>> acc = agg.combine(None, agg.partial(pd.Series([1, 2])))
    >>> acc = agg.combine(acc, agg.partial(pd.Series([3])))
    >>> int(agg.result(agg.remove(acc, agg.partial(pd.Series([1])))))
    5
    """

    #: True when the result is the window's data itself (no partials)
    full = False

    def partial(self, batch: Any) -> Any:
        raise NotImplementedError

    def combine(self, acc: Any, p: Any) -> Any:
        if acc is None:
            return p
        return tuple(aligned_add(a, b) for a, b in zip(acc, p))

    def remove(self, acc: Any, p: Any) -> Any:
        return tuple(aligned_sub(a, b) for a, b in zip(acc, p))

    def result(self, acc: Any) -> Any:
        raise NotImplementedError

    def signature(self) -> str:
        return type(self).__name__

    def example_result(self, example: Any) -> Any:
        """What the aggregation emits for ``example`` (used to type the output)."""
        return self.result(self.combine(None, self.partial(example)))


def is_streamz_style(agg: Any) -> bool:
    """Whether ``agg`` implements streamz's ``initial``/``on_new``/``on_old`` instead of partials.

    >>> class Count(Aggregation):
    ...     def initial(self, new): return 0
    ...     def on_new(self, state, new): return state + len(new), state + len(new)
    ...     def on_old(self, state, old): return state - len(old), state - len(old)
    >>> is_streamz_style(Count()), is_streamz_style(Sum())
    (True, False)
    """
    return (
        getattr(type(agg), "partial", None) is Aggregation.partial
        and callable(getattr(agg, "on_new", None))
        and callable(getattr(agg, "initial", None))
    )


def aggregate_node(
    upstream: Stream,
    agg: Any,
    n: int | None = None,
    value: pd.Timedelta | None = None,
    with_state: bool = False,
    start: Any = None,
    example: Any = None,
) -> Stream:
    """The node running ``agg`` (either protocol) over ``upstream``, optionally windowed."""
    if is_streamz_style(agg):
        return StreamzAggregate(upstream, agg, n=n, value=value, with_state=with_state, start=start)
    if not isinstance(agg, Aggregation):
        raise ConfigurationError(
            f"aggregate: {agg!r} is not an Aggregation; subclass "
            "rivermark.dataframe.Aggregation and implement partial()/result(), or streamz's "
            "initial()/on_new()/on_old()"
        )
    return Aggregate(
        upstream, agg, n=n, value=value, with_state=with_state, start=start, example=example
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


class Sum(Aggregation):
    """Sum of each column (DataFrame) or of the values (Series).

    >>> Sum().example_result(pd.DataFrame({"a": [1, 2], "b": [3, 4]})).to_dict()
    {'a': 3, 'b': 7}
    """

    def partial(self, batch: Any) -> Any:
        return (batch.sum(),)

    def result(self, acc: Any) -> Any:
        return acc[0]


class Count(Aggregation):
    """Number of non-null values.

    >>> int(Count().example_result(pd.Series([1.0, None, 3.0])))
    2
    """

    def partial(self, batch: Any) -> Any:
        return (batch.count(),)

    def result(self, acc: Any) -> Any:
        return acc[0]


class Size(Aggregation):
    """Number of elements (``batch.size``: rows times columns for a DataFrame).

    >>> Size().example_result(pd.DataFrame({"a": [1, 2], "b": [3, 4]}))
    4
    """

    def partial(self, batch: Any) -> Any:
        return (int(batch.size),)

    def result(self, acc: Any) -> Any:
        return acc[0]


class Mean(Aggregation):
    """Mean of the non-null values.

    >>> agg = Mean()
    >>> acc = agg.combine(agg.partial(pd.Series([1.0, 2.0])), agg.partial(pd.Series([6.0])))
    >>> float(agg.result(acc))
    3.0
    """

    def partial(self, batch: Any) -> Any:
        return (batch.sum(), batch.count())

    def result(self, acc: Any) -> Any:
        total, n = acc
        if isinstance(n, Number):
            return total / n if n else math.nan
        return total / n


class Var(Aggregation):
    """Variance (``ddof`` as in pandas); ``sqrt=True`` gives the standard deviation.

    >>> float(Var().example_result(pd.Series([1.0, 2.0, 3.0])))
    1.0
    """

    def __init__(self, ddof: int = 1, sqrt: bool = False) -> None:
        self.ddof = ddof
        self.sqrt = sqrt

    def partial(self, batch: Any) -> Any:
        return (batch.sum(), (batch**2).sum(), batch.count())

    def result(self, acc: Any) -> Any:
        x, x2, n = acc
        denom = n - self.ddof
        if isinstance(denom, Number):
            if denom <= 0:  # type: ignore[operator]
                return math.nan
            out: Any = (x2 - x * x / n) / denom
            return math.sqrt(out) if self.sqrt and out >= 0 else out
        out = (x2 - x * x / n) / denom.where(denom > 0)
        out = out.clip(lower=0)
        return out**0.5 if self.sqrt else out

    def signature(self) -> str:
        return f"Var(ddof={self.ddof}, sqrt={self.sqrt})"


class ValueCounts(Aggregation):
    """How often each value occurs (a Series indexed by value; zero counts dropped).

    >>> agg = ValueCounts()
    >>> acc = agg.combine(None, agg.partial(pd.Series(["a", "b", "a"])))
    >>> agg.result(agg.remove(acc, agg.partial(pd.Series(["b"])))).to_dict()
    {'a': 2}
    """

    def partial(self, batch: Any) -> Any:
        return (batch.value_counts(sort=False),)

    def remove(self, acc: Any, p: Any) -> Any:
        out = aligned_sub(acc[0], p[0])
        return (out[out > 0],)

    def result(self, acc: Any) -> Any:
        return acc[0]


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


_GROUPBY_HOWS = ("sum", "count", "size", "mean", "var", "std")


class GroupbyAggregation(Aggregation):
    """Grouped aggregation: ``how`` in sum, count, size, mean, var, std.

    ``by`` names the grouping column(s) of the batch; ``selection`` the
    column(s) to aggregate (None: all other columns).  Each partial holds,
    per key, the group sizes (so keys whose rows have all left a window
    disappear from the result) and the sums needed by ``how``.

    >>> agg = GroupbyAggregation("sum", by="k", selection="v")
    >>> df = pd.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]})
    >>> agg.result(agg.combine(None, agg.partial(df))).to_dict()
    {'a': 4, 'b': 2}
    """

    def __init__(
        self,
        how: str,
        by: Any,
        selection: Any = None,
        ddof: int = 1,
        track_size: bool = False,
        index_name: Any = None,
        rename_index: bool = False,
    ) -> None:
        if how not in _GROUPBY_HOWS:
            raise ConfigurationError(
                f"groupby: unknown aggregation {how!r}; pass one of {', '.join(_GROUPBY_HOWS)}"
            )
        self.how = how
        self.by = by
        self.selection = selection
        self.ddof = ddof
        self.track_size = track_size
        #: when grouping by a Series, the name its index gets (else the key's own)
        self.index_name = index_name
        self._rename = rename_index

    def _grouped(self, batch: Any) -> Any:
        g = batch.groupby(self.by)
        if self.selection is not None:
            g = g[self.selection]
        return g

    def partial(self, batch: Any) -> Any:
        g = self._grouped(batch)
        how = self.how
        if how == "sum":
            parts: tuple[Any, ...] = (g.sum(),)
        elif how == "count":
            parts = (g.count(),)
        elif how == "size":
            parts = (g.size(),)
        elif how == "mean":
            parts = (g.sum(), g.count())
        else:
            if self.selection is not None:
                vals = batch[self.selection]
            else:
                vals = batch.drop(columns=_as_list(self.by))
            squares = (vals**2).groupby([batch[b] for b in _as_list(self.by)]).sum()
            parts = (g.sum(), squares, g.count())
        if self.track_size and how != "size":
            parts = (g.size(),) + parts  # reuses the grouping computed above
        return parts

    def combine(self, acc: Any, p: Any) -> Any:
        if acc is None:
            return KeyedAcc.from_partial(p)
        acc.add(p)
        return acc

    def remove(self, acc: Any, p: Any) -> Any:
        acc.sub(p)
        if self.track_size or self.how == "size":
            acc.drop_empty()
        return acc

    def result(self, acc: Any) -> Any:
        out = self._result(acc)
        if self._rename:
            out = out.rename_axis(self.index_name)
        return out

    def _result(self, acc: Any) -> Any:
        comps = acc.comps
        if self.track_size and self.how != "size":
            comps = comps[1:]
            meta = acc.meta[1:]
        else:
            meta = acc.meta
        how = self.how
        if how in ("sum", "count", "size"):
            return acc.wrap(comps[0].copy(), meta[0], keep_dtypes=True)
        if how == "mean":
            total, n = comps
            with np.errstate(divide="ignore", invalid="ignore"):
                return acc.wrap(total / n, meta[0])
        x, x2, n = comps
        denom = n - self.ddof
        with np.errstate(divide="ignore", invalid="ignore"):
            out = (x2 - x * x / n) / np.where(denom > 0, denom, np.nan)
        out = np.clip(out, 0, None)
        if how == "std":
            out = np.sqrt(out)
        return acc.wrap(out, meta[0])

    def signature(self) -> str:
        return f"Groupby({self.how}, by={self.by!r}, selection={self.selection!r})"


def _add_into(c: np.ndarray, pos: Any, v: np.ndarray) -> np.ndarray:
    if np.can_cast(v.dtype, c.dtype, casting="same_kind") and c.dtype.kind == v.dtype.kind:
        c[pos] += v
        return c
    out = c.astype(np.result_type(c.dtype, v.dtype))
    out[pos] += v
    return out


class KeyedAcc:
    """A grouped accumulator: the keys (a pandas Index) and one numpy array per component.

    Updated in place with numpy (pandas arithmetic costs more than the
    aggregation itself for small groups); the node copies it for snapshots.

    >>> acc = KeyedAcc.from_partial([pd.Series([1, 2], index=["a", "b"], name="v")])
    >>> acc.add([pd.Series([5], index=["c"], name="v")])
    >>> acc.wrap(acc.comps[0], acc.meta[0]).to_dict()
    {'a': 1, 'b': 2, 'c': 5}
    """

    def __init__(self, keys: pd.Index, comps: list[np.ndarray], meta: list[Any]) -> None:
        self.keys = keys
        self.comps = comps
        self.meta = meta

    @classmethod
    def from_partial(cls, p: Sequence[Any]) -> KeyedAcc:
        meta = [
            ("S", x.name, None) if isinstance(x, pd.Series) else ("D", x.columns, x.dtypes)
            for x in p
        ]
        return cls(p[0].index, [x.to_numpy().copy() for x in p], meta)

    def copy(self) -> KeyedAcc:
        return KeyedAcc(self.keys, [c.copy() for c in self.comps], self.meta)

    def _positions(self, idx: pd.Index) -> Any:
        if idx.equals(self.keys):
            return slice(None)
        pos = self.keys.get_indexer(idx)
        if (pos < 0).any():
            keys = self.keys.union(idx)
            old = keys.get_indexer(self.keys)
            grown = []
            for c in self.comps:
                g = np.zeros((len(keys),) + c.shape[1:], dtype=c.dtype)
                g[old] = c
                grown.append(g)
            self.keys, self.comps = keys, grown
            pos = keys.get_indexer(idx)
        return pos

    def add(self, p: Sequence[Any]) -> None:
        pos = self._positions(p[0].index)
        self.comps = [_add_into(c, pos, x.to_numpy()) for c, x in zip(self.comps, p)]

    def sub(self, p: Sequence[Any]) -> None:
        pos = self._positions(p[0].index)
        self.comps = [_add_into(c, pos, -x.to_numpy()) for c, x in zip(self.comps, p)]

    def drop_empty(self) -> None:
        sizes = self.comps[0]
        keep: Any = sizes > 0
        if keep.ndim > 1:
            keep = keep.any(axis=1)
        if not keep.all():
            self.keys = self.keys[keep]
            self.comps = [c[keep] for c in self.comps]

    def wrap(self, values: np.ndarray, meta: Any, keep_dtypes: bool = False) -> Any:
        kind, label, dtypes = meta
        if kind == "S":
            return pd.Series(values, index=self.keys, name=label)
        out = pd.DataFrame(values, index=self.keys, columns=label)
        # a mixed int/float frame went through one float array: give ints back
        return out.astype(dtypes) if keep_dtypes else out

    def __repr__(self) -> str:
        return f"<KeyedAcc keys={len(self.keys)} comps={len(self.comps)}>"


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _concat(frames: Sequence[Any], example: Any) -> Any:
    if not frames:
        return example.iloc[:0]
    if len(frames) == 1:
        return frames[0]
    return pd.concat(list(frames))


class Aggregate(Stream):
    """Run an :class:`Aggregation` over a stream of batches, optionally windowed.

    ``n`` keeps the last ``n`` rows, ``value`` (a ``pd.Timedelta``) the rows whose
    index lies within ``value`` of the newest index; with neither, everything
    seen so far is aggregated (nothing is stored but the accumulator).
    ``with_state=True`` emits ``(state, result)`` tuples; ``start`` is such a
    state to begin from (as streamz's ``with_state``/``start``).

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
        start: Any = None,
        example: Any = None,
        **kwargs: Any,
    ) -> None:
        self.agg = agg
        self.n = n
        self.value = value
        self.with_state = with_state
        self.example = example
        self.acc: Any = None
        self.parts: deque[tuple[Any, Any]] = deque()
        self.rows = 0
        Stream.__init__(self, upstream, **kwargs)
        if start is not None:
            self.set_state(start)

    @property
    def windowed(self) -> bool:
        return self.n is not None or self.value is not None

    # ---------------------------------------------------------------- state
    def get_state(self) -> Any:
        acc = self.acc.copy() if isinstance(self.acc, KeyedAcc) else self.acc
        return {"acc": acc, "parts": list(self.parts), "rows": self.rows}

    def set_state(self, state: Any) -> None:
        if state is None:
            self.acc, self.parts, self.rows = None, deque(), 0
            return
        if not isinstance(state, dict) or "acc" not in state:
            raise ConfigurationError(
                f"{self._display_name()}: start/state must be a state this node emitted "
                f"(with_state=True) or checkpointed, got {state!r}; pass start=None to begin empty"
            )
        acc = state["acc"]
        # never mutate the caller's object (a published ``start`` may be reused)
        self.acc = acc.copy() if isinstance(acc, KeyedAcc) else acc
        self.parts = deque(state.get("parts", ()))
        self.rows = int(state.get("rows", 0))

    def state_signature(self) -> str:
        return f"Aggregate({self.agg.signature()}, n={self.n}, value={self.value})"

    # ---------------------------------------------------------------- data flow
    def _evict_rows(self) -> None:
        agg = self.agg
        assert self.n is not None
        excess = self.rows - self.n
        while excess > 0 and self.parts:
            frame, p = self.parts[0]
            k = len(frame)
            if k <= excess:
                self.parts.popleft()
                self.acc = agg.remove(self.acc, p)
                self.rows -= k
                excess -= k
            else:
                self._cut_head(frame, excess)
                excess = 0

    def _cut_head(self, frame: Any, k: int) -> None:
        agg = self.agg
        head, rest = frame.iloc[:k], frame.iloc[k:]
        self.acc = agg.remove(self.acc, agg.partial(head))
        self.parts[0] = (rest, agg.partial(rest))
        self.rows -= k

    def _evict_time(self, newest: Any) -> None:
        assert self.value is not None
        cutoff = newest - self.value
        agg = self.agg
        while self.parts:
            frame, p = self.parts[0]
            index = frame.index
            if index.is_monotonic_increasing:
                k = int(index.searchsorted(cutoff, side="right"))
                if k == 0:
                    break
                if k >= len(frame):
                    self.parts.popleft()
                    self.acc = agg.remove(self.acc, p)
                    self.rows -= len(frame)
                    continue
                self._cut_head(frame, k)
                break
            mask = np.asarray(index <= cutoff)
            if not mask.any():
                break
            old, rest = frame[mask], frame[~mask]
            self.acc = agg.remove(self.acc, agg.partial(old))
            self.rows -= len(old)
            if len(rest):
                self.parts[0] = (rest, agg.partial(rest))
                break
            self.parts.popleft()

    def _step(self, x: Any) -> Any:
        agg = self.agg
        n = len(x)
        p = agg.partial(x)
        self.acc = agg.combine(self.acc, p)
        if (self.windowed or agg.full) and n:
            # an unwindowed full() (expanding().apply) must keep everything it has seen
            self.parts.append((x, p))
            self.rows += n
            if self.n is not None:
                self._evict_rows()
            elif self.value is not None:
                self._evict_time(x.index.max())
        if agg.full:
            return _concat([f for f, _ in self.parts], x)
        return agg.result(self.acc)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        try:
            result = self._step(x)
        except Exception as e:
            self._user_error(x, e, self.agg.partial)
            return None
        if self.with_state:
            return self._emit((self.get_state(), result), metadata)
        return self._emit(result, metadata)


class StreamzAggregate(Stream):
    """Run an aggregation written for streamz (``initial``/``on_new``/``on_old``).

    Without a window ``on_old`` is never called.  With ``n`` (rows) or
    ``value`` (a ``pd.Timedelta`` of index) the batches in the window are
    kept; after ``on_new(state, batch)`` every part that left the window is
    passed to ``on_old``, as streamz does, and the last result is emitted.
    The aggregation's state and the window's batches are the checkpoint
    state; ``with_state=True`` emits ``(state, result)`` and ``start`` is such
    a state.

    >>> class Total(Aggregation):
    ...     def initial(self, new): return 0
    ...     def on_new(self, state, new): return state + new.sum(), state + new.sum()
    ...     def on_old(self, state, old): return state - old.sum(), state - old.sum()
    >>> s = Stream()
    >>> L = StreamzAggregate(s, Total(), n=2).sink_to_list()
    >>> s.emit(pd.Series([1, 2])); s.emit(pd.Series([3]))
    >>> [int(v) for v in L]
    [3, 5]
    """

    _graphviz_shape = "box"

    def __init__(
        self,
        upstream: Stream,
        agg: Any,
        n: int | None = None,
        value: pd.Timedelta | None = None,
        with_state: bool = False,
        start: Any = None,
        **kwargs: Any,
    ) -> None:
        self.agg = agg
        self.n = n
        self.value = value
        self.with_state = with_state
        self.state: Any = None
        self.started = False
        self.frames: deque[Any] = deque()
        Stream.__init__(self, upstream, **kwargs)
        if start is not None:
            self.set_state(start)

    def get_state(self) -> Any:
        return {"state": self.state, "started": self.started, "frames": list(self.frames)}

    def set_state(self, state: Any) -> None:
        if not isinstance(state, dict) or "state" not in state:
            raise ConfigurationError(
                f"{self._display_name()}: start/state must be a state this node emitted "
                f"(with_state=True) or checkpointed, got {state!r}; pass start=None to begin empty"
            )
        self.state = state["state"]
        self.started = bool(state.get("started", True))
        self.frames = deque(state.get("frames", ()))

    def state_signature(self) -> str:
        return f"StreamzAggregate({type(self.agg).__name__}, n={self.n}, value={self.value})"

    def _leaving(self) -> list[Any]:
        """Remove and return the parts of the kept batches that left the window."""
        frames, old = self.frames, []
        if self.n is not None:
            excess = sum(len(f) for f in frames) - self.n
            while excess > 0 and frames:
                head = frames[0]
                if len(head) <= excess:
                    old.append(frames.popleft())
                    excess -= len(head)
                else:
                    old.append(head.iloc[:excess])
                    frames[0] = head.iloc[excess:]
                    excess = 0
        elif self.value is not None and frames:
            cutoff = max(f.index.max() for f in frames) - self.value
            while frames:
                head = frames[0]
                mask = np.asarray(head.index <= cutoff)
                if not mask.any():
                    break
                old.append(head[mask])
                if mask.all():
                    frames.popleft()
                else:
                    frames[0] = head[~mask]
                    break
        return old

    def _step(self, x: Any) -> Any:
        agg = self.agg
        if not self.started:
            self.state = agg.initial(x)
            self.started = True
        self.state, result = agg.on_new(self.state, x)
        if self.n is not None or self.value is not None:
            if len(x):
                self.frames.append(x)
            for old in self._leaving():
                if len(old):
                    self.state, result = agg.on_old(self.state, old)
        return result

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        try:
            result = self._step(x)
        except Exception as e:
            self._user_error(x, e, self.agg.on_new)
            return None
        if self.with_state:
            return self._emit((self.get_state(), result), metadata)
        return self._emit(result, metadata)


class Cumulative(Stream):
    """Cumulative ``op`` (cumsum, cumprod, cummin, cummax) across batches.

    Each batch is emitted with its cumulative values; the state is the last row.

    >>> s = Stream()
    >>> L = Cumulative(s, "cumsum").sink_to_list()
    >>> s.emit(pd.Series([1, 2])); s.emit(pd.Series([3]))
    >>> pd.concat(L).tolist()
    [1, 3, 6]
    """

    _OPS = ("cumsum", "cumprod", "cummin", "cummax")

    def __init__(self, upstream: Stream, op: str, **kwargs: Any) -> None:
        if op not in self._OPS:
            raise ConfigurationError(
                f"Cumulative: op must be one of {self._OPS}, got {op!r}; pass e.g. op='cumsum'"
            )
        self.op = op
        self.last: Any = None
        Stream.__init__(self, upstream, **kwargs)

    _state_attrs = ("last",)

    def state_signature(self) -> str:
        return f"Cumulative({self.op})"

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        try:
            if self.last is None or not len(self.last):
                out = getattr(x, self.op)()
            else:
                out = getattr(pd.concat([self.last, x]), self.op)().iloc[1:]
            if len(out):
                self.last = out.iloc[-1:]
        except Exception as e:
            self._user_error(x, e, self.op)
            return None
        return self._emit(out, metadata)


class RollingAggregate(Stream):
    """pandas ``rolling(window).op()`` across batch boundaries.

    Only the rows a later batch still needs are kept (the last ``window - 1``
    rows, or those within ``window`` of the newest index); each batch is emitted
    with its rolling values.

    >>> s = Stream()
    >>> L = RollingAggregate(s, 2, "sum").sink_to_list()
    >>> s.emit(pd.Series([1.0, 2.0])); s.emit(pd.Series([3.0], index=[2]))
    >>> pd.concat(L).tolist()
    [1.0, 3.0, 5.0]
    """

    def __init__(
        self,
        upstream: Stream,
        window: Any,
        op: str,
        min_periods: int | None = 1,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        with_state: bool = False,
        start: Any = None,
        **node_kwargs: Any,
    ) -> None:
        self.window = window
        self.op = op
        self.min_periods = min_periods
        self.args = args
        self.op_kwargs = kwargs or {}
        self.with_state = with_state
        self.tail: Any = start if start is not None and start != () else None
        Stream.__init__(self, upstream, **node_kwargs)

    _state_attrs = ("tail",)

    def state_signature(self) -> str:
        return f"RollingAggregate(window={self.window!r}, op={self.op}, min_periods={self.min_periods})"

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        try:
            tail = self.tail
            full = x if tail is None or not len(tail) else pd.concat([tail, x])
            r = full.rolling(self.window, min_periods=self.min_periods)
            fn = getattr(r, self.op)
            out = fn(*self.args, **self.op_kwargs).iloc[len(full) - len(x) :]
            if isinstance(self.window, int):
                self.tail = full.iloc[-(self.window - 1) :] if self.window > 1 else None
            elif len(full):
                cutoff = full.index.max() - pd.Timedelta(self.window)
                self.tail = full[full.index > cutoff]
        except Exception as e:
            self._user_error(x, e, self.op)
            return None
        if self.with_state:
            return self._emit((self.tail, out), metadata)
        return self._emit(out, metadata)


class EWMMean(Stream):
    """Exponentially weighted mean (pandas ``ewm(alpha=...).mean()``, ``adjust=True``).

    Emits, after each batch, the mean at the batch's newest row, as streamz
    does: a one-row DataFrame (a one-element Series for a Series), labelled
    with that row's index; an empty batch gives an empty result.  The state
    is the weighted sum and the sum of weights, updated with one vectorised
    step per batch.  Missing values are not supported.

    >>> s = Stream()
    >>> L = EWMMean(s, alpha=0.5).sink_to_list()
    >>> s.emit(pd.Series([1.0, 2.0])); s.emit(pd.Series([3.0], index=[2]))
    >>> L[-1].round(6).to_dict() == pd.Series([1.0, 2.0, 3.0]).ewm(alpha=0.5).mean().round(6)[2:].to_dict()
    True
    """

    def __init__(
        self,
        upstream: Stream,
        alpha: float,
        with_state: bool = False,
        start: Any = None,
        **kwargs: Any,
    ) -> None:
        if not 0 < alpha <= 1:
            raise ConfigurationError(
                f"ewm: alpha must be in (0, 1], got {alpha!r}; pass com=, span=, halflife= or alpha="
            )
        self.alpha = alpha
        self.with_state = with_state
        self.num: Any = None
        self.den = 0.0
        Stream.__init__(self, upstream, **kwargs)
        if start is not None:
            self.set_state(start)

    _state_attrs = ("num", "den")

    def state_signature(self) -> str:
        return f"EWMMean(alpha={self.alpha})"

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        try:
            n = len(x)
            decay = 1.0 - self.alpha
            w = decay ** np.arange(n - 1, -1, -1, dtype=float)
            vals = x.to_numpy(dtype=float)
            batch_num = w @ vals if vals.ndim == 1 else w @ vals
            carry = decay**n
            num = batch_num if self.num is None else self.num * carry + batch_num
            den = self.den * carry + float(w.sum())
            self.num, self.den = num, den
            mean = num / den if den else num * math.nan
            rows = x.index[-1:]
            if isinstance(x, pd.DataFrame):
                values = np.reshape(np.asarray(mean, dtype=float), (1, -1))[: len(rows)]
                result: Any = pd.DataFrame(values, index=rows, columns=x.columns)
            else:
                result = pd.Series([float(mean)] * len(rows), index=rows, name=x.name, dtype=float)
        except Exception as e:
            self._user_error(x, e, "ewm.mean")
            return None
        if self.with_state:
            return self._emit((self.get_state(), result), metadata)
        return self._emit(result, metadata)


AggregationFactory = Callable[[], Aggregation]
KeyLike = Hashable
