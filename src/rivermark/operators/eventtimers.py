"""Keyed state with event-time timers: ``timestamps(...).keyed_process(func, key, on_timer)``.

``func(ctx, x)`` runs for every record with a :class:`Context` for the
record's key: ``ctx.state`` (the key's value, ``None`` at first; assign a
new value, or ``None`` to forget the key), ``ctx.time`` and
``ctx.watermark``, ``ctx.set_timer(t)`` (call ``on_timer(ctx, t)`` once the
watermark reaches ``t``), ``ctx.emit(y)``.  What a call changes (state,
timers, results) takes effect only when it returns: a call that raises
goes through the node's error policy and leaves nothing behind.  The
per-key values and the pending timers are :class:`~rivermark.KeyedState`
entries (checkpointed as deltas); the end of a job's input fires every
pending timer.

>>> s = Stream()
>>> def count(ctx, x):
...     if ctx.state is None:
...         ctx.set_timer(ctx.time + 10)  # report 10 s after the key's first record
...     ctx.state = (ctx.state or 0) + 1
>>> def report(ctx, t):
...     ctx.emit((ctx.key, t, ctx.state))
...     ctx.state = None
>>> t = s.timestamps(lambda r: r[0])
>>> L = t.keyed_process(count, key=lambda r: r[1], on_timer=report).sink_to_list()
>>> for rec in [(0, "a"), (3, "a"), (5, "b"), (12, "a")]:
...     s.emit(rec)
>>> L
[('a', 10.0, 2)]
>>> _ = t.end_of_input(); L
[('a', 10.0, 2), ('b', 15.0, 1), ('a', 22.0, 1)]
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Callable, Hashable
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.operators.eventtime import EventWindow
from rivermark.operators.timestamps import Results, _merge, attach
from rivermark.state import KeyedState, KeyedStore, as_keyed

logger = logging.getLogger(__name__)

__all__ = ["Context", "KeyedProcess"]

_UNSET = object()


class Context:
    """What ``func`` and ``on_timer`` see and change for one key (see the module docs)."""

    __slots__ = ("key", "time", "watermark", "_state", "_new_state", "timers", "out")

    def __init__(self, key: Any, state: Any, time: float, watermark: float) -> None:
        self.key = key
        self.time = time
        self.watermark = watermark
        self._state = state
        self._new_state: Any = _UNSET
        #: event times of the timers set by this call
        self.timers: list[float] = []
        #: the records this call emits, in order
        self.out: list[Any] = []

    @property
    def state(self) -> Any:
        """The key's value (None if it has none); assign to change it, None to delete it."""
        return self._state if self._new_state is _UNSET else self._new_state

    @state.setter
    def state(self, value: object) -> None:
        self._new_state = value

    def set_timer(self, time: float) -> None:
        """Call ``on_timer(ctx, time)`` for this key once the watermark reaches ``time``."""
        if isinstance(time, bool) or not isinstance(time, (int, float)) or math.isnan(time):
            raise TypeError(f"set_timer: the time must be epoch seconds, got {time!r}")
        self.timers.append(float(time))

    def emit(self, value: object) -> None:
        """Pass ``value`` on when the call returns."""
        self.out.append(value)


@Stream.register_api(attribute_name="keyed_process")
class KeyedProcess(Stream):
    """Per-key state and event-time timers (see the module docs).

    Needs :meth:`Stream.timestamps` right above it.  ``key`` is a callable
    or an index/field for ``x[key]``; ``on_timer`` is required for timers
    to be set.  Timers fire in the order of their times (then the order they
    were set); a timer set for a time the watermark already passed fires
    at the next watermark step (so a timer set by ``on_timer`` at the end of
    the input stays pending: nothing moves the watermark after ``+inf``).
    """

    _graphviz_shape = "box3d"

    def __init__(
        self,
        upstream: Stream,
        func: Callable[[Context, Any], Any],
        key: Hashable | Callable[[Any], Any],
        on_timer: Callable[[Context, float], Any] | None = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        self.clock = attach(self, "keyed_process", upstream)
        check_callable("keyed_process", "func", func)
        if on_timer is not None:
            check_callable("keyed_process", "on_timer", on_timer)
        self.func = func
        self.on_timer = on_timer
        self.key = key
        self._key_of = EventWindow._key_function(key)  # noqa: SLF001 - the same key rule
        #: the value of each key
        self._values: KeyedStore = KeyedState()
        #: pending timers ``{(key, time): seq}``; a heap of ``(time, seq, key)`` orders them
        self._timers: KeyedStore = KeyedState()
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = 0
        Stream.__init__(self, upstream, **kwargs)
        self.clock._windows.append(self)  # noqa: SLF001 - the clock notifies its timers

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        clock = self.clock
        try:
            k = self._key_of(x) if self._key_of is not None else None
            ctx = Context(k, self._values.get(k), clock.current, clock.record_watermark)
            self.func(ctx, x)
            if ctx.timers and self.on_timer is None:
                raise TypeError("keyed_process: set_timer() needs on_timer=func(ctx, time)")
        except Exception as e:
            self._user_error(x, e, self.func)
            return None
        return self._apply(ctx)

    def _apply(self, ctx: Context) -> Results:
        """Make what a call changed take effect and pass its records on."""
        k = ctx.key
        if ctx._new_state is not _UNSET:  # noqa: SLF001 - the context of this node's call
            if ctx._new_state is None:  # noqa: SLF001
                self._values.pop(k, None)
            else:
                self._values[k] = ctx._new_state  # noqa: SLF001
        for t in ctx.timers:
            if (k, t) in self._timers:
                continue  # already pending: a timer fires once per key and time
            self._timers[(k, t)] = self._seq
            heapq.heappush(self._heap, (t, self._seq, k))
            self._seq += 1
            if t < self.clock.due:
                self.clock.due = t
        results: Results = None
        for y in ctx.out:
            results = _merge(results, self._emit(y, None))
        return results

    def close_until(self, watermark: float) -> Results:
        heap, timers = self._heap, self._timers
        assert self.on_timer is not None or not heap
        results: Results = None
        first_new = self._seq  # timers set by the calls below wait for the next step
        later = []
        while heap and heap[0][0] <= watermark:
            entry = heapq.heappop(heap)
            t, seq, k = entry
            if seq >= first_new:
                later.append(entry)
                continue
            del timers[(k, t)]
            ctx = Context(k, self._values.get(k), t, watermark)
            try:
                self.on_timer(ctx, t)  # type: ignore[misc]
            except Exception as e:
                self._user_error((k, t), e, self.on_timer)
                continue
            results = _merge(results, self._apply(ctx))
        for entry in later:
            heapq.heappush(heap, entry)
        return results

    def next_due(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def records_held(self) -> int | None:
        return len(self._timers)

    def get_state(self) -> object:
        return {"values": self._values, "timers": self._timers, "seq": self._seq}

    def set_state(self, state: Any) -> None:
        self._values = as_keyed(state["values"])
        self._timers = as_keyed(state["timers"])
        self._seq = int(state["seq"])
        self._heap = [(t, seq, k) for (k, t), seq in self._timers.items()]
        heapq.heapify(self._heap)
        self.clock.due = -math.inf

    def state_signature(self) -> str:
        # optional: a callable object has no __qualname__
        name = getattr(self.func, "__qualname__", repr(self.func))
        return f"KeyedProcess(func={name})"
