"""The window join (co-group): both streams' records of a key in one event-time window.

``left.timestamps(...).join_window(right.timestamps(...), key, size=...)``
collects, per key and window, the records of each side, and when the window
closes emits a :class:`~rivermark.operators.eventtime.WindowResult` whose
value is ``func(lefts, rights)`` (default: the pair of tuples).  The windows
are those of ``tumbling_window`` (``size``), ``hopping_window`` (``size``
and ``step``) and ``session_window`` (``gap``, a session spanning both
sides' records), assigned by the same functions (:mod:`.windowstore`).

**Determinism.** A record is late when its own side's watermark has passed
its window (as a window judges it: ``end + grace <= watermark`` for fixed
windows, ``time + grace < watermark`` for sessions); it goes to ``.late``
and is in no window.  A window closes when *both* sides' watermarks have
passed its end plus ``grace``; by then no record of either side that is not
late can still belong to it, so every window holds the records that are not
late, whatever the interleaving.  The open windows are checkpoint state.
See ``docs/joins.md``.

>>> from rivermark import Stream
>>> a, b = Stream(), Stream()
>>> j = a.timestamps(lambda r: r[0]).join_window(
...     b.timestamps(lambda r: r[0]), key=1, size=10,
...     func=lambda ls, rs: (len(ls), len(rs)))
>>> out = j.sink_to_list()
>>> a.emit((1, "x")); a.emit((4, "x")); b.emit((8, "x")); b.emit((3, "y"))
>>> a.emit((12, "x")); out  # the right side's watermark (8) holds window [0, 10)
[]
>>> b.emit((15, "z")); out
[WindowResult(start=0.0, end=10.0, key='x', value=(2, 1), final=True)]
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.operators.eventtime import WindowResult
from rivermark.operators.joinbase import TwoSides, attach_sides, func_name, refuse_one_node
from rivermark.operators.timestamps import Results, _delay, _merge
from rivermark.operators.windowstore import Closed, exact_sign, in_close_order, slot
from rivermark.state import KeyedState, KeyedStore, as_keyed

__all__ = ["WindowJoin"]

#: a held record: ``(side, time, seq, record)``, side 0 left, 1 right
Entry = tuple[int, float, int, Any]

_HOWS = ("inner", "left", "right", "outer")


def _pair(
    lefts: list[object], rights: list[object]
) -> tuple[tuple[object, ...], tuple[object, ...]]:
    return tuple(lefts), tuple(rights)


@Stream.register_api(attribute_name="join_window")
class WindowJoin(TwoSides, Stream):
    """Co-group two streams by key and event-time window.

    Per key and window, when the window closes (both sides' watermarks past
    its end plus ``grace``), emits ``WindowResult(start, end, key,
    func(lefts, rights))``: the window's left and right records, each list
    in order of time (ties in arrival order); ``func`` defaults to the pair
    of tuples.  Windows: ``size`` alone (tumbling), ``size`` and ``step``
    (hopping), or ``gap`` (sessions over both sides' records); ``offset``
    shifts fixed windows.  ``how`` keeps windows with records on both sides
    (``"inner"``, default), on the left (``"left"``), on the right
    (``"right"``) or on either (``"outer"``).  ``right_key`` (default
    ``key``) keys the right side.  Both streams need
    :meth:`Stream.timestamps` right above the join.  A record late on its
    own side goes to ``.late``.
    """

    _graphviz_shape = "box3d"
    kind = "join_window"

    def __init__(
        self,
        upstream: Stream,
        right: Stream,
        key: Hashable | Callable[[Any], Any] = None,
        size: Any = None,
        step: Any = None,
        gap: Any = None,
        func: Callable[[list[Any], list[Any]], Any] | None = None,
        how: str = "inner",
        grace: Any = 0,
        offset: float = 0.0,
        right_key: Hashable | Callable[[Any], Any] = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        kind = self.kind
        if how not in _HOWS:
            raise ConfigurationError(
                f"{kind}: how must be one of {', '.join(map(repr, _HOWS))}, got {how!r}"
            )
        refuse_one_node(kind, upstream, right)
        if (gap is None) == (size is None):
            raise ConfigurationError(
                f"{kind}: pass size= (tumbling; with step=, hopping) or gap= (sessions), "
                "one of the two"
            )
        self.left_clock, self.right_clock = attach_sides(self, kind, upstream, right)
        if func is not None:
            check_callable(kind, "func", func)
        self.func: Callable[[list[Any], list[Any]], Any] = func or _pair
        self.gap = None if gap is None else parse_interval(gap, kind, "gap")
        self.size = 0.0 if size is None else parse_interval(size, kind, "size")
        self.step = self.size if step is None else parse_interval(step, kind, "step")
        if self.gap is None and self.step > self.size:
            raise ConfigurationError(
                f"{kind}: step ({self.step}) is larger than size ({self.size}): records "
                "between windows would belong to none; pass step <= size"
            )
        self.offset = float(offset)
        self.grace = _delay(grace, kind, "grace")
        self.how = how
        self._set_keys(key, right_key)
        #: fixed windows ``{(key, start): [(end, wseq), entry, ...]}``; sessions
        #: ``{key: [entry, ...]}`` (the records of the key's open sessions)
        self._open: KeyedStore = KeyedState(freeze=list)
        self._seq = 0
        #: what may close: ``(due, n, start, key)``, ``n`` unique (sessions: start is nan)
        self._heap: list[tuple[float, int, float, Any]] = []
        self._pushes = itertools.count()
        #: records held per side (plain counts: the metrics read them from their own thread)
        self._held = [0, 0]
        self._connect(upstream, right, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        found = self._side_key(x, who)
        if found is None:
            return None
        side, clock, k = found
        t, judge = clock.current, clock.record_watermark
        seq = self._seq
        self._seq = seq + 1
        entry: Entry = (side, t, seq, x)
        if self.gap is not None:
            if exact_sign(t, self.grace, -judge) < 0:  # t + grace < watermark, exactly
                return self._send_late(x, metadata, t, side)
            self._hold(k, k, entry)
            self._due(t + self.gap + self.grace, math.nan, k)
            return None
        late = False
        step, offset = self.step, self.offset
        last = slot(t, step, offset)  # the record's latest window, then the earlier ones
        first = last if step == self.size else slot(t, step, offset, self.size) + 1
        for j in range(first, last + 1):
            start = offset + j * step
            end = start + self.size
            if end + self.grace <= judge:
                late = True
                continue
            if self._hold((k, start), (end, seq), entry):
                self._due(end + self.grace, start, k)
        return self._send_late(x, metadata, t, side) if late else None

    def _hold(self, place: object, header: object, entry: Entry) -> bool:
        """Add ``entry`` to the records of ``place`` (a window, or a key's sessions);
        whether it is new."""
        open_ = self._open
        held = open_.get(place)
        new = held is None
        if held is None:
            held = open_[place] = [] if self.gap is not None else [header]
        held.append(entry)
        open_.touched(place)
        self._held[entry[0]] += 1
        return new

    def _due(self, due: float, start: float, k: Hashable) -> None:
        heapq.heappush(self._heap, (due, next(self._pushes), start, k))
        for clock in (self.left_clock, self.right_clock):
            clock.wake_at(due)

    def close_until(self, watermark: float) -> Results:
        """A watermark moved: emit the windows both sides' watermarks have passed."""
        mark = min(self.left_clock.watermark, self.right_clock.watermark)
        heap = self._heap
        ready: list[Closed] = []
        while heap and heap[0][0] <= mark:
            _, _, start, k = heapq.heappop(heap)
            if self.gap is None:
                held = self._open.pop((k, start), None)
                if held is not None:
                    entries = held[1:]
                    self._release(entries)
                    ready.append((float(held[0][0]), start, int(held[0][1]), k, entries))
            else:
                ready.extend(self._sessions_closed(k, mark))
        if not ready:
            return None
        if len(ready) > 1:
            in_close_order(ready)
        results: Results = None
        for end, start, _, k, entries in ready:
            result = self._result(k, start, end, entries)
            if result is not None:
                results = _merge(results, self._emit(result, None))
        return results

    def _sessions_closed(self, k: Hashable, mark: float) -> list[Closed]:
        """The sessions of ``k`` that closed at ``mark`` (the rest stay held)."""
        held = self._open.get(k)
        if not held:
            return []
        assert self.gap is not None
        gap, grace = self.gap, self.grace
        entries = sorted(held, key=_time_seq)
        closed: list[Closed] = []
        first = 0
        for i in range(1, len(entries) + 1):
            # a session ends where the next record is gap or more after the last one
            if i < len(entries) and exact_sign(entries[i][1], -entries[i - 1][1], -gap) < 0:
                continue
            last = entries[i - 1][1]
            if exact_sign(last, gap, grace, -mark) > 0:  # last + gap + grace > mark: still open
                break
            session = entries[first:i]
            start = session[0][1]
            closed.append((last + gap, start, min(e[2] for e in session), k, session))
            first = i
        if not closed:
            return []
        rest = entries[first:]
        self._release(entries[:first])
        if rest:
            self._open[k] = rest
            end_of_first = rest[0][1]
            for j in range(1, len(rest)):
                if exact_sign(rest[j][1], -rest[j - 1][1], -gap) >= 0:
                    break
                end_of_first = rest[j][1]
            self._due(end_of_first + gap + grace, math.nan, k)
        else:
            del self._open[k]
        return closed

    def _release(self, entries: Sequence[Entry]) -> None:
        """``entries`` are no longer held."""
        rights = sum(e[0] for e in entries)
        self._held[0] -= len(entries) - rights
        self._held[1] -= rights

    def _result(
        self, k: Any, start: float, end: float, entries: Sequence[Any]
    ) -> WindowResult | None:
        ordered = sorted(entries, key=_time_seq)
        lefts = [e[3] for e in ordered if e[0] == 0]
        rights = [e[3] for e in ordered if e[0] == 1]
        how = self.how
        if (how == "inner" and not (lefts and rights)) or (
            (how == "left" and not lefts) or (how == "right" and not rights)
        ):
            return None
        try:
            value = self.func(lefts, rights)
        except Exception as e:
            self._user_error((k, start, end), e, self.func)
            return None
        return WindowResult(start, end, k, value)

    def next_due(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    @property
    def open_windows(self) -> int:
        """Windows (per key) open now; sessions: keys with records held."""
        return len(self._open)

    def held_sides(self) -> tuple[int, int]:
        left, right = self._held
        return left, right

    def get_state(self) -> object:
        return {"open": self._open, "seq": self._seq, "counters": self._counters()}

    def set_state(self, state: Any) -> None:
        self._open = as_keyed(state["open"], freeze=list)
        self._seq = int(state["seq"])
        self._restore_counters(state)
        heap: list[tuple[float, int, float, Any]] = []
        held = [0, 0]
        for place, entries in self._open.items():
            if self.gap is None:
                k, start = place
                heap.append((entries[0][0] + self.grace, next(self._pushes), start, k))
                records = entries[1:]
            else:
                # every record may end a session: the close finds which did
                due = self.gap + self.grace
                heap.extend((e[1] + due, next(self._pushes), math.nan, place) for e in entries)
                records = entries
            for e in records:
                held[e[0]] += 1
        heapq.heapify(heap)
        self._heap, self._held = heap, held
        self.left_clock.recheck()
        self.right_clock.recheck()

    def state_signature(self) -> str:
        key = func_name(self.key) if callable(self.key) else repr(self.key)
        windows = (
            f"gap={self.gap}"
            if self.gap is not None
            else f"size={self.size}, step={self.step}, offset={self.offset}"
        )
        return (
            f"WindowJoin(key={key}, {windows}, grace={self.grace}, how={self.how}, "
            f"func={func_name(self.func)})"
        )


def _time_seq(entry: Any) -> tuple[float, int]:
    return (entry[1], entry[2])
