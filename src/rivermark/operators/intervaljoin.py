"""The interval join, stream to stream: pairs of one key close in event time.

See :class:`IntervalJoin` and ``docs/joins.md``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.core.refs import Metadata
from rivermark.errors import ConfigurationError
from rivermark.operators.joinbase import (
    TwoSides,
    attach_sides,
    func_name,
    refuse_one_node,
    signed_interval,
)
from rivermark.operators.timestamps import Results, Timestamps, _merge
from rivermark.state import KeyedState, KeyedStore, as_keyed

__all__ = ["IntervalJoin"]


@Stream.register_api(attribute_name="join_interval")
class IntervalJoin(TwoSides, Stream):
    """Pairs of records of two streams with the same key, close in event time.

    Emits ``(left, right)`` for every left record ``l`` and right record
    ``r`` with the same key and ``l.time + lower <= r.time <= l.time + upper``
    (seconds or duration strings; ``lower`` may be negative), when the second
    of the two arrives.  Both streams need :meth:`Stream.timestamps` right
    above the join.  ``how="left"`` also emits ``(left, None)`` for a left
    record that found no partner, once its interval has closed (the right
    side's watermark is past ``l.time + upper``).  A left record waits until
    the right side's watermark is past ``l.time + upper``, a right record
    until the left side's is past ``r.time - lower``; then they are dropped.
    A record below its own side's watermark is late: it goes to ``.late``
    and joins nothing, so the pairs are a function of the input alone.

    >>> a, b = Stream(), Stream()
    >>> j = a.timestamps(lambda r: r[0]).join_interval(
    ...     b.timestamps(lambda r: r[0]), key=1, lower=0, upper=5, how="left")
    >>> out = j.sink_to_list()
    >>> a.emit((10, "x")); a.emit((12, "y")); b.emit((13, "x")); b.emit((20, "z"))
    >>> out
    [((10, 'x'), (13, 'x')), ((12, 'y'), None)]
    """

    _graphviz_shape = "triangle"
    kind = "join_interval"

    def __init__(
        self,
        upstream: Stream,
        right: Stream,
        key: Hashable | Callable[[Any], Any] = None,
        lower: Any = 0,
        upper: Any = 0,
        how: str = "inner",
        right_key: Hashable | Callable[[Any], Any] = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        if how not in ("inner", "left"):
            raise ConfigurationError(f"join_interval: how must be 'inner' or 'left', got {how!r}")
        refuse_one_node(self.kind, upstream, right)
        self.left_clock, self.right_clock = attach_sides(self, self.kind, upstream, right)
        self.lower, self.upper = (
            signed_interval(lower, self.kind, "lower"),
            signed_interval(upper, self.kind, "upper"),
        )
        if self.lower > self.upper:
            raise ConfigurationError(
                f"join_interval: lower ({self.lower}) is above upper ({self.upper}): no pair "
                "could match; pass lower <= upper"
            )
        self.how = how
        self._set_keys(key, right_key)
        #: waiting records: left ``{seq: (time, key, record, matched)}``, right ``{seq: (time, key, record)}``
        self._lefts: KeyedStore = KeyedState()
        self._rights: KeyedStore = KeyedState()
        self._seq = 0
        self._index: tuple[dict[Any, set[int]], dict[Any, set[int]]] = ({}, {})
        self._heaps: tuple[list[tuple[float, int]], list[tuple[float, int]]] = ([], [])
        self._connect(upstream, right, **kwargs)  # the watermarks drop waiting records

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        found = self._side_key(x, who)
        if found is None:
            return None
        side, clock, k = found
        t = clock.current
        if t < clock.record_watermark:
            return self._send_late(x, metadata, t, side)
        seq = self._seq
        self._seq = seq + 1
        results: Results = None
        matched = False
        if side == 0:
            low, high = t + self.lower, t + self.upper
            for s in sorted(self._index[1].get(k, ()), key=self._right_order):
                rt, _, r = self._rights[s]
                if low <= rt <= high:
                    matched = True
                    results = _merge(results, self._emit((x, r), None))
            self._lefts[seq] = (t, k, x, matched)
            self._hold(0, k, seq, t + self.upper, self.right_clock)
        else:
            for s in sorted(self._index[0].get(k, ()), key=self._left_order):
                lt, _, left, was = self._lefts[s]
                if lt + self.lower <= t <= lt + self.upper:
                    if not was:
                        self._lefts[s] = (lt, k, left, True)
                    results = _merge(results, self._emit((left, x), None))
            self._rights[seq] = (t, k, x)
            self._hold(1, k, seq, t - self.lower, self.left_clock)
        return results

    def _left_order(self, seq: int) -> tuple[float, int]:
        return (self._lefts[seq][0], seq)

    def _right_order(self, seq: int) -> tuple[float, int]:
        return (self._rights[seq][0], seq)

    def _hold(self, side: int, k: Hashable, seq: int, until: float, clock: Timestamps) -> None:
        """Keep a record until ``clock``'s watermark is past ``until``."""
        self._index[side].setdefault(k, set()).add(seq)
        heapq.heappush(self._heaps[side], (until, seq))
        clock.wake_at(math.nextafter(until, math.inf))

    def close_until(self, watermark: float) -> Results:
        """A watermark moved: drop the records no record to come can pair with."""
        results: Results = None
        heap, index = self._heaps[0], self._index[0]
        right_mark = self.right_clock.watermark
        while heap and heap[0][0] < right_mark:
            _, seq = heapq.heappop(heap)
            _, k, x, matched = self._lefts.pop(seq)
            _unindex(index, k, seq)
            if not matched and self.how == "left":
                results = _merge(results, self._emit((x, None), None))
        heap, index = self._heaps[1], self._index[1]
        left_mark = self.left_clock.watermark
        while heap and heap[0][0] < left_mark:
            _, seq = heapq.heappop(heap)
            _, k, _ = self._rights.pop(seq)
            _unindex(index, k, seq)
        return results

    def next_due(self) -> float:
        dues = [math.nextafter(h[0][0], math.inf) for h in self._heaps if h]
        return min(dues, default=math.inf)

    def held_sides(self) -> tuple[int, int]:
        return len(self._lefts), len(self._rights)

    def get_state(self) -> object:
        return {
            "lefts": self._lefts,
            "rights": self._rights,
            "seq": self._seq,
            "counters": self._counters(),
        }

    def set_state(self, state: Any) -> None:
        self._lefts = as_keyed(state["lefts"])
        self._rights = as_keyed(state["rights"])
        self._seq = int(state["seq"])
        self._restore_counters(state)
        self._index = ({}, {})
        self._heaps = ([], [])
        for seq, (t, k, *_) in self._lefts.items():
            self._index[0].setdefault(k, set()).add(seq)
            self._heaps[0].append((t + self.upper, seq))
        for seq, (t, k, _) in self._rights.items():
            self._index[1].setdefault(k, set()).add(seq)
            self._heaps[1].append((t - self.lower, seq))
        for h in self._heaps:
            heapq.heapify(h)
        self.left_clock.recheck()
        self.right_clock.recheck()

    def state_signature(self) -> str:
        key = func_name(self.key) if callable(self.key) else repr(self.key)
        return f"IntervalJoin(key={key}, lower={self.lower}, upper={self.upper}, how={self.how})"


def _unindex(index: dict[object, set[int]], k: object, seq: int) -> None:
    seqs = index[k]
    seqs.discard(seq)
    if not seqs:
        del index[k]
