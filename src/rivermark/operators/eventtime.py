"""Event time: the tumbling, hopping and session windows below ``timestamps``.

``stream.timestamps(func, max_delay=..., idle_timeout=...)``
(:mod:`rivermark.operators.timestamps`) reads each record's event time
(epoch seconds, see :mod:`.watermarks`) and keeps the watermark of its
input.  The windows below it (``tumbling_window``,
``hopping_window``, ``session_window``) group records by that time, keyed or
not, and emit a :class:`WindowResult` per window once the watermark has
passed the window's end plus its ``grace``.  Records that arrive after their
window closed go to the window's ``late`` stream.  The open windows (one
:class:`~rivermark.KeyedState` entry per key and window) and the watermark
are checkpoint state, so a resumed job emits exactly the windows an
uninterrupted run emits.  At the end of a job's input the watermark becomes
``+inf`` and every open window is emitted.  See ``docs/event-time.md``.

>>> s = Stream()
>>> t = s.timestamps(lambda r: r[0])
>>> w = t.tumbling_window(10, agg="sum", value=lambda r: r[1])
>>> L = w.sink_to_list()
>>> for rec in [(1, 5), (4, 1), (12, 7), (25, 1)]:
...     s.emit(rec)
>>> L
[WindowResult(start=0.0, end=10.0, key=None, value=6, final=True), WindowResult(start=10.0, end=20.0, key=None, value=7, final=True)]
>>> t.end_of_input(); L[-1]
WindowResult(start=20.0, end=30.0, key=None, value=1, final=True)
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, Unpack

from rivermark.core.node import Fixed, NodeOptions, Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.execution.steps import step as per_record
from rivermark.operators.aggregations import Aggregation, aggregation
from rivermark.operators.timestamps import Results, Timestamps, _delay, _fname, _merge, attach
from rivermark.operators.windowstore import (
    NO_SPAN,
    BulkWindows,
    OpenWindows,
    SlotSpans,
    exact_sign,
    slot,
)
from rivermark.state import KeyedState
from rivermark.statedata import register_state_class

logger = logging.getLogger(__name__)

_dict_set = dict.__setitem__

__all__ = [
    "Timestamps",
    "WindowResult",
    "TumblingWindow",
    "HoppingWindow",
    "SessionWindow",
    "LateRecords",
]


class WindowResult(NamedTuple):
    """One window's result: ``[start, end)`` in epoch seconds, the key (None unkeyed), the value.

    ``final`` is False for the intermediate results of ``emit="updates"``.
    """

    start: float
    end: float
    key: Any
    value: Any
    final: bool = True


def emits_updates(kind: str, emit: object) -> bool:
    """Whether ``emit`` (a window's ``emit=``) asks for updates; refused unless a mode."""
    if emit not in ("final", "updates"):
        raise ConfigurationError(
            f"{kind}: emit must be 'final' (one result per window when it closes) or "
            f"'updates' (also a result after every record), got {emit!r}"
        )
    return bool(emit == "updates")


def key_function(key: Any) -> Callable[[Any], Any] | None:
    """The key of a record: ``key`` itself when callable, else ``x[key]`` (None: no key)."""
    if key is None or callable(key):
        return key  # type: ignore[no-any-return]
    return operator.itemgetter(key)


class LateRecords(Stream):
    """The records a window received after it had closed (``window.late``).

    Each late record is passed on unchanged, with its metadata; sink it or
    send it to a dead-letter output.  The window's results do not come here.
    """

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        return None  # the window's own results: only late records are passed on

    def pass_late(self, x: Any, metadata: Metadata | None) -> Results:
        return self._emit(x, metadata)


class EventWindow(Stream):
    """What the event-time windows share: configuration, the open windows, closing, state.

    The open windows are an :class:`~.windowstore.OpenWindows` (the same
    store the DataFrame windows keep): ``{(key, start): (end, seq, acc,
    ...)}``, ordered for closing by a heap of sessions or, for fixed
    windows, a :class:`~.windowstore.BulkWindows` bucket of keys per window
    span.  Subclasses assign a record to windows (their ``update`` step).
    """

    _graphviz_shape = "box3d"
    kind = "window"
    #: the session gap (None: fixed windows)
    gap: float | None = None
    #: fixed when the node is created: the open windows are placed by them
    grace = Fixed()
    emit_mode = Fixed()
    #: fixed too, so that a generated graph's code holds them, not a lookup per record
    #: (the store's ``open`` mapping is not: a restore replaces it)
    clock = Fixed()
    agg = Fixed()
    store = Fixed()
    key_of = Fixed()

    def __init__(
        self,
        upstream: Stream,
        key: Hashable | Callable[[Any], Any] | None = None,
        agg: str | Aggregation | None = None,
        value: Callable[[Any], Any] | None = None,
        reduce: Callable[[Any, Any], Any] | None = None,
        fold: Callable[[Any, Any], Any] | None = None,
        start: Any = None,
        merge: Callable[[Any, Any], Any] | None = None,
        grace: Any = 0,
        emit: str = "final",
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        kind = self.kind
        self._clock = attach(self, kind, upstream)
        emits_updates(kind, emit)
        if value is not None:
            check_callable(kind, "value", value)
        self.key = key
        self._key_of = self._key_function(key)
        self.value = value
        self._agg = aggregation(kind, agg, reduce, fold, start, merge)
        self._grace = _delay(grace, kind, "grace")
        self._emit_mode = emit
        #: the open windows
        # fixed windows close a span's windows together (BulkWindows: a bucket of keys
        # per window span, not a heap entry per window); sessions need the heap
        self._store: OpenWindows = (
            OpenWindows(self._clock, self._grace, self.gap)
            if self.gap is not None
            else BulkWindows(self._clock, self._grace)
        )
        self._late: LateRecords | None = None
        #: records that arrived after (one of) their window(s) had closed
        self.late_count = 0
        Stream.__init__(self, upstream, **kwargs)
        self._clock._windows.append(self)  # noqa: SLF001 - the clock notifies its windows

    @property
    def open_windows(self) -> int:
        """How many windows (per key) are open now (read by the metrics, from any thread)."""
        return len(self._store)

    @property
    def late(self) -> LateRecords:
        """The stream of records that arrived after their window had closed."""
        if self._late is None:
            self._late = LateRecords(self, stream_name=f"{self.kind}.late")
        return self._late

    @staticmethod
    def _key_function(key: object) -> Callable[[object], object] | None:
        return key_function(key)

    def _updated(
        self, x: Any, metadata: Metadata | None, changed: Sequence[WindowResult], late: bool
    ) -> Results:
        """Pass on the updated results of ``emit="updates"``; send a late record to ``.late``."""
        results: Results = None
        for w in changed:
            results = _merge(results, self._emit(w, None))
        if late:
            self.late_count += 1
            if self._late is not None:
                results = _merge(results, self._late.pass_late(x, metadata))
            elif self.late_count == 1:
                clock = self._clock
                logger.warning(
                    "%s: a record arrived after its window closed (time %s, watermark %s); "
                    "such records are counted in late_count; sink %s.late to keep them",
                    self.display_name(),
                    clock.current,
                    clock.record_watermark,
                    self.kind,
                )
        return results

    def next_due(self) -> float:
        """The watermark at which this node's next window may close (+inf: none open)."""
        return self._store.next_due()

    def close_until(self, watermark: float) -> Results:
        """Emit every window whose end plus grace is at or below ``watermark``."""
        result = self._agg.result
        results: Results = None
        for end, start, _, k, acc in self._store.pop_due(watermark):
            window = _new_result((start, end, k, result(acc), True))  # WindowResult(...)
            results = _merge(results, self._emit(window, None))
        return results

    def records_held(self) -> int | None:
        return len(self._store)

    def get_state(self) -> object:
        # the live container: the checkpoint takes its changed windows at the barrier
        return self._store.get_state()

    def set_state(self, state: Any) -> None:
        self._store.set_state(state)

    def _config(self) -> str:
        return (
            f"key={_fname(self.key) if callable(self.key) else repr(self.key)}, "
            f"agg={self._agg.name}, grace={self.grace}, emit={self.emit_mode}"
        )


class _FixedWindows(EventWindow):
    """Windows of a fixed ``size`` starting every ``step`` seconds (from ``offset``).

    A tumbling window is one whose step is its size: each record is in one
    window.  The windows of the last two records' times are remembered
    with their exact bounds (:class:`~.windowstore.SlotSpans`): a record in
    one of them is placed by two comparisons instead of :func:`slot`.
    """

    size = Fixed()
    #: the seconds between window starts (``size`` for tumbling windows)
    step = Fixed()
    offset = Fixed()

    def __init__(
        self,
        upstream: Stream,
        size: float,
        every: float,
        offset: Any,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        self._size = size
        self._step = every
        self._offset = float(offset)
        #: the latest windows (by ``step``) that records fell in, and their earliest
        #: (a hopping window's record is in several): see SlotSpans
        self._last_spans = SlotSpans(every, self._offset)
        self._first_spans = SlotSpans(every, self._offset, size)
        self._last_span = self._first_span = NO_SPAN
        super().__init__(upstream, **kwargs)

    def _last_slot(self, ts: float) -> int:
        """``slot(ts, step, offset)`` for a time outside the span; a later time moves it there."""
        if ts >= self._last_span[2]:
            span = self._last_span = self._last_spans.span(ts)
            return span[3] + 1
        return slot(ts, self._step, self._offset)

    def _first_slot(self, ts: float) -> int:
        """``slot(ts, step, offset, size) + 1``: a hopping window's record's earliest window."""
        lo, mid, hi, j = self._first_span
        if mid <= ts < hi:
            return j + 2
        if lo <= ts < mid:
            return j + 1
        if ts >= hi:
            span = self._first_span = self._first_spans.span(ts)
            return span[3] + 2
        return slot(ts, self._step, self._offset, self._size) + 1

    @per_record
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        # one name per statement: a generated graph's code holds the fixed ones as values
        clock = self._clock
        agg = self._agg
        key_of = self._key_of
        value_of = self.value
        size = self._size
        every = self._step
        offset = self._offset
        try:
            k = None if key_of is None else key_of(x)
            v = x if value_of is None else value_of(x)
            ts = clock.current
            # the record's latest window: slot(ts, every, offset), most often found
            # in the span of the windows that the last records fell in
            lo, mid, hi, j = self._last_span
            last = j + 1 if mid <= ts < hi else (j if lo <= ts < mid else self._last_slot(ts))
        except Exception as e:
            self._user_error(x, e, agg.name)
            return None
        # its earliest window: the latest (tumbling), else by the same rule (a time
        # that _last_slot took raises nothing here)
        if every != size:
            first = self._first_slot(ts)
            if first != last:
                return self._add_windows(x, metadata, k, v, first, last)
        # A record in one window (every record of a tumbling window): the loop of
        # _add_windows run once, written out.  Measured on bench_eventtime.py --cpu
        # (500k records, tumbling count), the loop for every record cost 1.68-2.31 s
        # of CPU against 1.31-1.50 s this way: 30-50 % more per record.
        start = offset + last * every
        end = start + size
        if end + self._grace <= clock.record_watermark:  # its window has closed
            return self._updated(x, metadata, (), True)
        store = self._store
        open_ = store.open
        try:
            wkey = (k, start)
            cur = open_.get(wkey)
            acc = agg.create(v) if cur is None else agg.add(cur[2], v)
        except Exception as e:  # an unhashable key, the aggregation raised
            self._user_error(x, e, agg.name)
            return None
        if cur is None:
            store.open_window(k, start, end, acc)
        elif type(open_) is KeyedState:
            # a key it holds, through its recorder (KeyedState.record), not its
            # __setitem__: that call cost about 0.13 us of the 2.4 us a record took
            # (bench_eventtime.py --cpu)
            window = (end, cur[1], acc)
            record = open_.record
            if record is not None:
                record(wkey, window)
            _dict_set(open_, wkey, window)
        else:  # a store of its own (RocksDB)
            open_[wkey] = (end, cur[1], acc)
        if self._emit_mode == "updates":
            update = WindowResult(start, end, k, agg.result(acc), False)
            return self._updated(x, metadata, (update,), False)
        return None

    def _add_windows(
        self, x: Any, metadata: Metadata | None, k: Any, v: Any, first: int, last: int
    ) -> Results:
        """Put value ``v`` of key ``k`` in windows ``first`` to ``last`` (indexes by ``step``).

        Every window's new value is computed before any is stored, so that
        what the aggregation raises leaves the windows as they were.
        """
        agg, store, clock = self._agg, self._store, self._clock
        size, every, offset, grace = self._size, self._step, self._offset, self._grace
        watermark = clock.record_watermark
        get = store.open.get
        late = False
        new = []
        try:
            for j in range(first, last + 1):  # earliest window first
                start = offset + j * every
                end = start + size
                if end + grace <= watermark:  # this window has closed
                    late = True
                    continue
                cur = get((k, start))
                new.append((start, end, agg.create(v) if cur is None else agg.add(cur[2], v), cur))
        except Exception as e:  # an unhashable key, the aggregation raised
            self._user_error(x, e, agg.name)
            return None
        changed = []
        for start, end, acc, cur in new:
            store.put(k, start, end, acc, cur)
            if self._emit_mode == "updates":
                changed.append(WindowResult(start, end, k, agg.result(acc), False))
        if changed or late:  # updated results to pass on (emit="updates"), or a late record
            return self._updated(x, metadata, changed, late)
        return None


@Stream.register_api(attribute_name="tumbling_window")
class TumblingWindow(_FixedWindows):
    """Event-time windows ``[start, start + size)`` side by side; each record is in one.

    Needs :meth:`Stream.timestamps` right above it.  ``key`` (a callable,
    or an index/field for ``x[key]``) keeps separate windows per key.  What
    is computed per window: ``agg`` (``"count"``, ``"sum"``, ``"mean"``,
    ``"min"``, ``"max"``, ``"collect"``; the default), ``reduce=func``
    (``func(acc, x)``, the first record as start) or ``fold=func`` with
    ``start=``; ``value=func`` picks what is aggregated (default the
    record).  A window closes when the watermark reaches ``end + grace``
    and is emitted as a :class:`WindowResult`; with ``emit="updates"`` a
    non-final result also follows every record.  A record whose window has
    closed goes to ``.late``.  ``offset`` shifts the window boundaries.

    >>> s = Stream()
    >>> w = s.timestamps(lambda r: r).tumbling_window(5, agg="count")
    >>> L = w.sink_to_list()
    >>> for t in [1, 2, 6, 11]:
    ...     s.emit(t)
    >>> [(r.start, r.value) for r in L]
    [(0.0, 2), (5.0, 1)]
    """

    kind = "tumbling_window"

    def __init__(
        self, upstream: Stream, size: Any, offset: float = 0.0, **kwargs: Unpack[NodeOptions]
    ) -> None:
        size = parse_interval(size, self.kind, "size")
        super().__init__(upstream, size, size, offset, **kwargs)

    def state_signature(self) -> str:
        return f"TumblingWindow(size={self.size}, offset={self.offset}, {self._config()})"


@Stream.register_api(attribute_name="hopping_window")
class HoppingWindow(_FixedWindows):
    """Event-time windows of ``size`` seconds starting every ``step``; a record is in ``size/step``.

    Everything else as :class:`TumblingWindow` (a record late for one of
    its windows still counts in those that are open, and goes to ``.late``).

    >>> s = Stream()
    >>> w = s.timestamps(lambda r: r).hopping_window(10, 5, agg="count")
    >>> L = w.sink_to_list()
    >>> for t in [1, 6, 12]:
    ...     s.emit(t)
    >>> t = w.upstream.end_of_input()
    >>> [(r.start, r.end, r.value) for r in L]
    [(-5.0, 5.0, 1), (0.0, 10.0, 2), (5.0, 15.0, 2), (10.0, 20.0, 1)]
    """

    kind = "hopping_window"

    def __init__(
        self,
        upstream: Stream,
        size: Any,
        step: Any,
        offset: float = 0.0,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        size = parse_interval(size, self.kind, "size")
        every = parse_interval(step, self.kind, "step")
        if every > size:
            raise ConfigurationError(
                f"hopping_window: step ({every}) is larger than size ({size}): records "
                "between windows would belong to none; pass step <= size"
            )
        super().__init__(upstream, size, every, offset, **kwargs)

    def state_signature(self) -> str:
        return (
            f"HoppingWindow(size={self.size}, step={self.step}, offset={self.offset}, "
            f"{self._config()})"
        )


@Stream.register_api(attribute_name="session_window")
class SessionWindow(EventWindow):
    """Event-time sessions: records of a key less than ``gap`` apart share a window.

    A session is ``[first time, last time + gap)``; a record that falls
    within ``gap`` of two sessions merges them (``agg``'s merge; with
    ``reduce=func``, ``func`` also merges two sessions' values; ``fold``
    needs ``merge=``).  It closes when the watermark reaches its end plus
    ``grace``.  A record is late, and goes to ``.late``, when its time is
    below ``watermark - grace`` (it might belong to a session already
    emitted).  Everything else as :class:`TumblingWindow`.

    >>> s = Stream()
    >>> w = s.timestamps(lambda r: r, max_delay=15).session_window(5, agg="collect")
    >>> L = w.sink_to_list()
    >>> for t in [1, 3, 20, 7]:
    ...     s.emit(t)
    >>> t = w.upstream.end_of_input()
    >>> [(r.start, r.end, r.value) for r in L]
    [(1.0, 12.0, (1, 3, 7)), (20.0, 25.0, (20,))]
    """

    kind = "session_window"

    def __init__(self, upstream: Stream, gap: Any, **kwargs: Unpack[NodeOptions]) -> None:
        self.gap = parse_interval(gap, self.kind, "gap")
        super().__init__(upstream, **kwargs)
        if self._agg.merge is None:
            raise ConfigurationError(
                "session_window: fold= needs merge=func(acc1, acc2) to join two sessions "
                "that a record connects; pass merge=, or use reduce= or agg="
            )

    @per_record
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        clock = self._clock
        key_of, value_of = self._key_of, self.value
        try:
            k = None if key_of is None else key_of(x)
            v = x if value_of is None else value_of(x)
            changed, late = self._add(k, v, clock.current, clock.record_watermark)
        except Exception as e:
            self._user_error(x, e, self._agg.name)
            return None
        if changed or late:  # updated results to pass on (emit="updates"), or a late record
            return self._updated(x, metadata, changed, late)
        return None

    def _add(
        self, k: object, v: object, ts: float, watermark: float
    ) -> tuple[Sequence[WindowResult], bool]:
        """Put value ``v`` of key ``k`` at time ``ts`` in its session.

        Returns the updated session (for ``emit="updates"``) and whether the
        record was late.  Raises what the aggregation raises, before
        changing anything.
        """
        gap = self.gap
        assert gap is not None  # a session window's gap
        if exact_sign(ts, self._grace, -watermark) < 0:  # ts + grace < watermark, exactly
            return [], True
        agg, store = self._agg, self._store
        open_ = store.open
        merge = agg.merge
        assert merge is not None
        start, end, last = ts, ts + gap, ts
        pieces = [(ts, agg.create(v))]
        merged = []
        for s in store.session_starts(k):
            e, _, a, s_last = open_[(k, s)]
            # within gap of the session [s, s_last]: s - ts < gap and ts - s_last < gap, exactly
            if exact_sign(s, -ts, -gap) < 0 and exact_sign(ts, -s_last, -gap) < 0:
                pieces.append((s, a))
                start, end, last = min(start, s), max(end, e), max(last, s_last)
                merged.append(s)
        pieces.sort(key=lambda p: p[0])  # stable: a record at a session's start goes first
        acc = pieces[0][1]
        for _, a in pieces[1:]:
            acc = merge(acc, a)
        store.join_sessions(k, merged, start, end, acc, last)
        if self._emit_mode == "updates":
            return [WindowResult(start, end, k, agg.result(acc), False)], False
        return [], False

    def state_signature(self) -> str:
        return f"SessionWindow(gap={self.gap}, {self._config()})"


#: ``WindowResult(*fields)`` without the Python call that a named tuple's ``__new__`` is
_new_result = functools.partial(tuple.__new__, WindowResult)

# a node's state holds the results it has not passed on yet: checkpoints write them as data
register_state_class(WindowResult, ("start", "end", "key", "value", "final"))
