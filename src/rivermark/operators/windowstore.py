"""The open windows of an event-time window node, for records and DataFrame rows alike.

A window node (``tumbling_window``, ``hopping_window``, ``session_window``
over records, :mod:`rivermark.operators.eventtime`, or over the rows of
DataFrame batches, :mod:`rivermark.dataframe.eventwindows`) decides which
windows a record or a row belongs to and what it adds to them; this module
keeps the windows themselves:

- :class:`OpenWindows`: the open windows as a :class:`~rivermark.KeyedState`
  ``{(key, start): (end, seq, acc[, last])}`` (``seq`` numbers windows in
  the order they opened; a session also keeps its last time), a heap of
  ``(end, start, seq, key)`` that orders them for closing, and, for
  sessions, the starts of each key's sessions.  What it holds is plain
  values, so a checkpoint writes the windows changed since the previous one
  and nothing in it is a pickle;
- the exact arithmetic of windows: :func:`slot` (the window index of a
  time, exact at window edges: the windows every ``step`` seconds that hold
  ``ts`` are ``slot(ts, step, offset, size) + 1`` to ``slot(ts, step,
  offset)``, one when ``step == size``) and :func:`exact_sign` (the sign of
  an exact sum, for the sessions' "within gap" and "ripe" tests);
- :func:`in_close_order`: the order of windows that close together.

A tumbling window is a hopping window whose step is its size: one rule
places both.

>>> class Clock:
...     due = float("inf")
>>> w = OpenWindows(Clock(), grace=0.0)
>>> [slot(12.5, 5.0, 0.0, 10.0) + 1, slot(12.5, 5.0, 0.0)]
[1, 2]
>>> w.put("k", 5.0, 15.0, 1, None); w.put("k", 10.0, 20.0, 1, None)
>>> [(c[1], c[0], c[4]) for c in w.pop_due(15.0)]
[(5.0, 15.0, 1)]
>>> len(w)
1
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import math
import operator
from collections.abc import Callable, Hashable, Sequence
from fractions import Fraction
from itertools import compress, repeat
from typing import Any, Protocol

from rivermark.state import KeyedState, KeyedStore, as_keyed

_dict_set = dict.__setitem__

__all__ = [
    "BulkWindows",
    "Closed",
    "OpenWindows",
    "exact_sign",
    "in_close_order",
    "slot",
    "Span",
    "SlotSpans",
]

#: a window that closed: ``(end, start, seq, key, acc)``, ``seq`` the order it opened in
Closed = tuple[float, float, int, Any, Any]


def in_close_order(closed: list[Closed], ascending: bool = False) -> None:
    """Order windows that close together by end, start, then key (in place).

    The order they opened in depends on how the input's partitions were
    interleaved; ordered by key, a live read and a backfill write the same
    bytes.  Keys that do not compare with each other (mixed types) are
    ordered by end, start and the order the windows opened (a sort that
    raised leaves its list partly sorted, so the fallback sorts again).
    ``ascending``: ``closed`` is in ``(end, start, seq)`` order already (as
    :meth:`OpenWindows.pop_due` takes them from its heap).
    """
    by_key: Callable[[Closed], Any] = _end_start_key
    if ascending and closed[0][:2] == closed[-1][:2]:
        # all of one window: by key alone (two tuples equal up to their keys
        # compare as the keys do), without building a tuple per window
        by_key = _key
    try:
        closed.sort(key=by_key)
    except TypeError:
        closed.sort(key=_end_start_seq)


#: ``(end, start, key)`` and ``(end, start, seq)`` of a closed window (in C: no call per window)
_end_start_key = operator.itemgetter(0, 1, 3)
_end_start_seq = operator.itemgetter(0, 1, 2)
_key = operator.itemgetter(3)
_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_third = operator.itemgetter(2)


def slot(ts: float, width: float, offset: float, shift: float = 0.0) -> int:
    """``floor((ts - offset - shift) / width)`` computed exactly on the float values.

    Float division is exact enough far from a slot boundary; near one (where
    rounding could put ``ts`` in the neighbouring slot) the index is computed
    with fractions, so ``ts`` is in slot ``k`` exactly when
    ``offset + shift + k * width <= ts < offset + shift + (k + 1) * width``.
    """
    q = (ts - offset - shift) / width
    k = math.floor(q)
    tol = ((abs(ts) + abs(offset) + abs(shift)) / width + 1.0) * 1e-14
    if tol < q - k < 1.0 - tol:
        return k
    if ts.is_integer() and width.is_integer() and offset.is_integer() and shift.is_integer():
        # whole seconds (a time on a window's edge, most often): integers are exact
        return (int(ts) - int(offset) - int(shift)) // int(width)
    exact = (Fraction(ts) - Fraction(offset) - Fraction(shift)) / Fraction(width)
    return math.floor(exact)


#: two slots' exact bounds and the first one's index: ``(lo, mid, hi, j)``, a time
#: ``lo <= t < mid`` is in slot ``j``, ``mid <= t < hi`` in slot ``j + 1``
Span = tuple[float, float, float, int]

#: the span that no time is in, below every time (the first time builds one)
NO_SPAN: Span = (-math.inf, -math.inf, -math.inf, 0)


class SlotSpans:
    """The exact float bounds of two neighbouring slots, so that most times need no division.

    A window node asks :func:`slot` for the window of every record; the
    records of a stream fall mostly in the latest window and the one
    before (the disorder the watermark allows).  :meth:`span` returns,
    for a time ``ts`` in slot ``k``, the bounds of slots ``k - 1`` and
    ``k`` as floats that compare with a float time exactly as the exact
    bounds ``offset + shift + j * width`` do: ``lo`` is the smallest float
    at or above the exact start of slot ``k - 1``, and so on.  So
    ``lo <= t < mid`` holds exactly when ``slot(t, ...) == k - 1``.

    >>> spans = SlotSpans(10.0, 0.0)
    >>> spans.span(25.0)
    (10.0, 20.0, 30.0, 1)
    >>> lo, mid, hi, j = SlotSpans(0.1, 0.0).span(0.35)
    >>> [slot(t, 0.1, 0.0) for t in (lo, mid, hi)] == [j, j + 1, j + 2]
    True
    >>> [slot(math.nextafter(t, -1.0), 0.1, 0.0) for t in (lo, mid, hi)] == [j - 1, j, j + 1]
    True
    """

    __slots__ = ("width", "offset", "shift", "base", "step", "scale")

    def __init__(self, width: float, offset: float, shift: float = 0.0) -> None:
        self.width, self.offset, self.shift = width, offset, shift
        # every float is n / 2**e: the exact bounds are integers over one power of two
        ratios = [v.as_integer_ratio() for v in (float(offset), float(shift), float(width))]
        scale = max(d for _, d in ratios)
        (on, od), (sn, sd), (wn, wd) = ratios
        #: the start of slot j is (base + j * step) / scale, exactly
        self.base = on * (scale // od) + sn * (scale // sd)
        self.step = wn * (scale // wd)
        self.scale = scale

    def span(self, ts: float) -> Span:
        """The bounds of the slot of ``ts`` and the slot before (see the class docs)."""
        k = slot(ts, self.width, self.offset, self.shift)
        base, step, scale = self.base, self.step, self.scale
        try:
            lo, mid, hi = (_ceil_float(base + j * step, scale) for j in (k - 1, k, k + 1))
        except OverflowError:  # bounds beyond the floats: no span, slot() for every time
            return (math.inf, math.inf, math.inf, 0)
        return (lo, mid, hi, k - 1)


def _ceil_float(num: int, den: int) -> float:
    """The smallest float at or above ``num / den`` (``den > 0``)."""
    f = num / den  # int / int rounds correctly
    fn, fd = f.as_integer_ratio()
    if fn * den < num * fd:  # rounded down
        f = math.nextafter(f, math.inf)
    return f


def exact_sign(*terms: float) -> int:
    """The sign (-1, 0 or 1) of the exact sum of ``terms`` (floats, at most one infinite).

    :func:`math.fsum` rounds the exact sum correctly, and a correctly
    rounded sum of floats is zero, negative or positive exactly when the
    exact sum is.
    """
    total = math.fsum(terms)
    return (total > 0) - (total < 0)


class Clock(Protocol):
    """What a window's clock keeps for it: the watermark at which a window may close next."""

    due: float


class OpenWindows:
    """The open windows of one node, ordered for closing; sessions indexed by key.

    ``clock.due`` is lowered to a new window's ``end + grace`` when it opens
    (the clock then knows to close it); ``gap`` is the session gap (None:
    fixed windows).  See the module docs.
    """

    __slots__ = ("clock", "grace", "gap", "open", "seq", "heap", "sessions")

    def __init__(self, clock: Clock, grace: float, gap: float | None = None) -> None:
        self.clock = clock
        self.grace = grace
        self.gap = gap
        #: ``{(key, start): (end, seq, acc[, last])}``
        self.open: KeyedStore = KeyedState()
        #: the number of the next window to open
        self.seq = 0
        #: ``(end, start, seq, key)`` per window (and stale ones of merged sessions)
        self.heap: list[tuple[float, float, int, Any]] = []
        #: per key, the starts of its open sessions, in order (derived from ``open``)
        self.sessions: dict[Any, list[float]] = {}

    def __len__(self) -> int:
        return len(self.open)

    # ------------------------------------------------------------------ windows in
    def open_window(self, k: object, start: float, end: float, acc: object, *extra: object) -> None:
        """Open window ``(k, start)`` ending at ``end`` with ``acc`` (a session's ``last`` after)."""
        seq = self.seq
        self.open[(k, start)] = (end, seq, acc, *extra)
        self.seq = seq + 1
        heapq.heappush(self.heap, (end, start, seq, k))
        due = end + self.grace
        clock = self.clock
        if due < clock.due:
            clock.due = due

    def put(self, k: Any, start: float, end: float, acc: Any, cur: Any) -> None:
        """Set fixed window ``(k, start)``'s ``acc``; ``cur`` is what it held (None: not open)."""
        if cur is None:
            self.open_window(k, start, end, acc)
            return
        open_, window = self.open, (end, cur[1], acc)
        if type(open_) is KeyedState:  # a key it holds, through its recorder: a call less
            record = open_.record
            if record is not None:
                record((k, start), window)
            _dict_set(open_, (k, start), window)
        else:
            open_[(k, start)] = window

    def lookup(self, ids: list[tuple[Any, float]]) -> list[Any]:
        """What each window ``(key, start)`` of ``ids`` holds (None: not open)."""
        return list(map(self.open.get, ids))

    def update_fixed(self, ids: list[tuple[Any, float]], curs: list[Any], accs: list[Any]) -> None:
        """Set the ``acc`` of each open fixed window of ``ids`` (``curs``: what they held)."""
        self.open.update(zip(ids, zip(map(_first, curs), map(_second, curs), accs)))

    def session_starts(self, k: Hashable) -> list[float]:
        """The starts of key ``k``'s open sessions, in order (do not change the list)."""
        return self.sessions.get(k, [])

    def join_sessions(
        self, k: object, merged: Sequence[float], start: float, end: float, acc: object, last: float
    ) -> None:
        """Replace key ``k``'s sessions starting at ``merged`` by one ``[start, end)``."""
        sessions = self.sessions
        starts = sessions.get(k)
        if starts is None:
            sessions[k] = [start]
        else:
            if merged:
                open_ = self.open
                gone = set(merged)
                for s in gone:
                    del open_[(k, s)]
                starts = sessions[k] = [s for s in starts if s not in gone]
            bisect.insort(starts, start)
        self.open_window(k, start, end, acc, last)

    # ------------------------------------------------------------------ windows out
    def next_due(self) -> float:
        """The watermark at which the next window may close (+inf: none open)."""
        heap = self.heap
        return heap[0][0] + self.grace if heap else math.inf

    def pop_due(self, watermark: float) -> list[Closed]:
        """Remove and return every window whose end plus grace is at or below ``watermark``.

        In close order (:func:`in_close_order`).  A session closes when no
        record that is not late (``time + grace >= watermark``) can join it
        any more: ``last + gap + grace <= watermark``, exactly.
        """
        heap, open_, grace, gap = self.heap, self.open, self.grace, self.gap
        closed: list[Closed] = []
        while heap and heap[0][0] + grace <= watermark:
            end, start, seq, k = heap[0]
            cur = open_.get((k, start))
            if cur is None or cur[0] != end or cur[1] != seq:
                heapq.heappop(heap)
                continue  # a session that grew or merged: its newer entry decides
            if gap is not None:
                if exact_sign(cur[3], gap, grace, -watermark) > 0:
                    break  # rounding in end + grace: the exact rule says not yet
                starts = self.sessions[k]
                starts.remove(start)
                if not starts:
                    del self.sessions[k]
            heapq.heappop(heap)
            del open_[(k, start)]
            closed.append((end, start, seq, k, cur[2]))
        if len(closed) > 1:
            in_close_order(closed, ascending=True)
        return closed

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, object]:
        """The open windows (the live container: a checkpoint takes its changes at the
        barrier) and the next window's number."""
        return {"open": self.open, "seq": self.seq}

    def set_state(self, state: Any) -> None:
        """Restore what :meth:`get_state` returned; rebuild the heap and the sessions."""
        open_ = self.open = as_keyed(state["open"])
        self.seq = int(state["seq"])
        self.heap = [(v[0], start, v[1], k) for (k, start), v in open_.items()]
        heapq.heapify(self.heap)
        sessions: dict[Any, list[float]] = {}
        gap = self.gap
        if gap is not None:
            for (k, s), v in list(open_.items()):
                if len(v) == 3:  # written before sessions kept their last time: end - gap
                    open_[(k, s)] = (*v, v[0] - gap)
                sessions.setdefault(k, []).append(s)
            for starts in sessions.values():
                starts.sort()
        self.sessions = sessions
        self.clock.due = -math.inf  # the next record looks which windows are due


class BulkWindows(OpenWindows):
    """Fixed windows opened and closed many at a time: a DataFrame batch's.

    The same open windows as :class:`OpenWindows` (``open``, its state and
    checkpoints are the same), ordered for closing per window span, not per
    window: for each ``(end, start)`` the keys of its open windows in the
    order they opened, and a heap of the spans.  A batch opens its windows
    with :meth:`open_fixed` (one ``dict.update``, one list per span) and the
    windows of a span close together (:meth:`pop_due`), with no Python step
    per window beyond the ``dict``'s own.
    """

    __slots__ = ("buckets", "spans")

    def __init__(self, clock: Clock, grace: float) -> None:
        super().__init__(clock, grace, None)
        #: per ``(end, start)``: the keys of its open windows, in the order they opened
        self.buckets: dict[tuple[float, float], list[Any]] = {}
        #: the ``(end, start)`` of every bucket, a heap
        self.spans: list[tuple[float, float]] = []

    def open_window(self, k: object, start: float, end: float, acc: object, *extra: object) -> None:
        """Open one fixed window (a record's): :meth:`open_fixed` of one, without its lists.

        A span that has a bucket already is in ``spans``, so the clock's
        ``due`` is at or below its end plus grace: only a new span may lower it.
        """
        seq = self.seq
        wkey = (k, start)
        open_ = self.open
        window = (end, seq, acc)
        if type(open_) is KeyedState:  # through its recorder: a Python call less
            record = open_.record
            if record is not None:
                record(wkey, window)
            _dict_set(open_, wkey, window)
        else:
            open_[wkey] = window
        self.seq = seq + 1
        span = (end, start)
        bucket = self.buckets.get(span)
        if bucket is not None:
            bucket.append(k)
            return
        self.buckets[span] = [k]
        heapq.heappush(self.spans, span)
        due = end + self.grace
        clock = self.clock
        if due < clock.due:
            clock.due = due

    def open_fixed(self, ids: list[tuple[Any, float]], ends: list[float], accs: list[Any]) -> None:
        """Open fixed windows ``ids`` (none open now) ending at ``ends``, in that order."""
        if not ids:
            return
        seq = self.seq
        self.seq = seq + len(ids)
        self.open.update(zip(ids, zip(ends, range(seq, self.seq), accs)))
        starts = list(map(_second, ids))
        buckets, spans = self.buckets, self.spans
        if starts[0] == starts[-1] and min(starts) == max(starts):
            by_start = [(0, list(map(_first, ids)))]  # one span, most often
        else:  # a few spans (a hopping window's, or disorder across a window's end)
            by_start = [
                (starts.index(s), list(compress(map(_first, ids), map(s.__eq__, starts))))
                for s in sorted(set(starts))
            ]
        for first, keys in by_start:
            span = (ends[first], starts[first])
            bucket = buckets.get(span)
            if bucket is None:
                buckets[span] = keys
                heapq.heappush(spans, span)
            else:
                bucket.extend(keys)
        due = min(ends) + self.grace
        clock = self.clock
        if due < clock.due:
            clock.due = due

    def next_due(self) -> float:
        spans = self.spans
        return spans[0][0] + self.grace if spans else math.inf

    def pop_due(self, watermark: float) -> list[Closed]:
        """Remove and return every window whose end plus grace is at or below ``watermark``,
        in close order (:func:`in_close_order`), a span at a time."""
        spans, buckets, grace, open_ = self.spans, self.buckets, self.grace, self.open
        due: list[tuple[float, float, list[Any]]] = []
        while spans and spans[0][0] + grace <= watermark:
            end, start = heapq.heappop(spans)
            due.append((end, start, buckets.pop((end, start))))
        if not due:
            return []
        # the spans come off the heap in (end, start) order: the windows of each are
        # ordered by key (unique within a span), or, when some keys do not compare,
        # every span's in the order they opened (its bucket's order), as in_close_order
        with contextlib.suppress(TypeError):
            due = [
                (end, start, sorted(keys)) if len(keys) > 1 else (end, start, keys)
                for end, start, keys in due
            ]
        closed: list[Closed] = []
        plain = open_ if type(open_) is KeyedState else None
        for end, start, keys in due:
            ids = list(zip(keys, repeat(start)))
            curs = plain.pop_many(ids) if plain is not None else [open_.pop(i) for i in ids]
            closed.extend(
                zip(repeat(end), repeat(start), map(_second, curs), keys, map(_third, curs))
            )
        return closed

    def set_state(self, state: Any) -> None:
        super().set_state(state)
        self.heap = []
        buckets: dict[tuple[float, float], list[Any]] = {}
        for (k, start), v in sorted(self.open.items(), key=_seq_of):
            buckets.setdefault((v[0], start), []).append(k)
        self.buckets = buckets
        self.spans = list(buckets)
        heapq.heapify(self.spans)


def _seq_of(item: tuple[tuple[Any, float], tuple[Any, ...]]) -> int:
    """The number of a window ``((key, start), (end, seq, acc))`` in the order windows opened."""
    return int(item[1][1])
