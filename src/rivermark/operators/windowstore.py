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
import heapq
import math
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import Any, Protocol

from rivermark.state import KeyedState, KeyedStore, as_keyed

__all__ = [
    "Closed",
    "OpenWindows",
    "exact_sign",
    "in_close_order",
    "slot",
]

#: a window that closed: ``(end, start, seq, key, acc)``, ``seq`` the order it opened in
Closed = tuple[float, float, int, Any, Any]


def in_close_order(closed: list[Closed]) -> None:
    """Order windows that close together by end, start, then key (in place).

    The order they opened in depends on how the input's partitions were
    interleaved; ordered by key, a live read and a backfill write the same
    bytes.  Keys that do not compare with each other (mixed types) are
    ordered by end, start and the order the windows opened (a sort that
    raised leaves its list partly sorted, so the fallback sorts again).
    """
    try:
        closed.sort(key=_end_start_key)
    except TypeError:
        closed.sort(key=_end_start_seq)


def _end_start_key(c: Closed) -> tuple[float, float, object]:
    return (c[0], c[1], c[3])


def _end_start_seq(c: Closed) -> tuple[float, float, int]:
    return (c[0], c[1], c[2])


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
        else:
            self.open[(k, start)] = (end, cur[1], acc)

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
            in_close_order(closed)
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
