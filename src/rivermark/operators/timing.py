"""Time-based and flow-control operators: delay, rate_limit, timed windows, buffer, latest.

Every node here holds records beyond the synchronous ``update`` call, so each
one retains the records' references when it parks them and releases them
exactly once: after the record (or the window it joined) was emitted and the
downstream work finished, or when the record is dropped (a duplicate in
``timed_window_unique``, a superseded value in ``latest``).

Parked records are checkpoint state (their values only; after a restore they
come back without metadata).  Work that is being emitted right now counts in
``in_flight``, which a checkpoint barrier waits to reach zero.

Work started in the background (a delayed emit, a window flush) has no caller
to raise into: an error downstream of it is logged and the node goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, ClassVar, Unpack

from rivermark.core import runtime
from rivermark.core.node import NodeOptions, Stream, check_positive_int, identity
from rivermark.core.refs import Metadata, merge_metadata, release_refs
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.execution import delivery

logger = logging.getLogger(__name__)

__all__ = ["Delay", "RateLimit", "TimedWindow", "TimedWindowUnique", "Buffer", "Latest"]

Results = list[Awaitable[object]] | None


class _Background(Stream):
    """Shared helpers: run a callable on the node's loop, keep and log background tasks."""

    _is_async = True

    def _init_background(self) -> None:
        self.in_flight = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._worker: asyncio.Task[Any] | None = None

    def _has_work(self) -> bool:
        """Whether records wait for :meth:`_work` (a node with a worker says when)."""
        return False

    async def _work(self) -> None:
        """Work off the records that wait; one such task runs at a time (:meth:`_ensure_worker`)."""

    def _ensure_worker(self) -> None:
        """Start :meth:`_work` if records wait and no worker runs."""
        if self._has_work() and (self._worker is None or self._worker.done()):
            self._worker = self._spawn(self._work())

    def records_held(self) -> int | None:
        return self.in_flight

    def emits_later(self) -> bool:
        return self.in_flight > 0

    def _on_loop(self, fn: Callable[[], object]) -> None:
        loop = self.loop
        if runtime.in_loop_thread(loop):
            fn()
        else:
            loop.call_soon_threadsafe(fn)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._fail(exc)

    async def _emit_and_finish(self, x: Any, metadata: Metadata | None) -> bool:
        """Emit ``x``, await downstream, release ``metadata``; counts as in-flight work.

        Returns False when the emit raised: the node has failed (:meth:`_fail`)
        and the record stays in flight and incomplete; the caller stops.
        """
        self.in_flight += 1
        try:
            results = self._emit(x, metadata)
            if results:
                await runtime.gather_results(results)
        except Exception as e:
            self._fail(e)
            return False
        self.in_flight -= 1
        release_refs(metadata)
        return True


@Stream.register_api(attribute_name="delay")
class Delay(_Background):
    """Pass on every record ``interval`` after it arrived (seconds or e.g. ``"20ms"``).

    Records keep their order.  The upstream is not held up; pending records
    are checkpoint state (with the time they still had to wait).

    >>> from rivermark.testing import wait_for
    >>> s = Stream()
    >>> L = s.delay("10ms").sink_to_list()
    >>> s.emit(1); s.emit(2)
    >>> wait_for(lambda: len(L) == 2); L
    [1, 2]
    """

    _graphviz_shape: ClassVar[str] = "octagon"

    def __init__(self, upstream: Stream, interval: object, **kwargs: Unpack[NodeOptions]) -> None:
        self.interval = parse_interval(interval, "delay")
        self._pending: deque[tuple[float, Any, Metadata | None]] = deque()
        self._init_background()
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        self._raise_if_failed()
        self._retain_refs(metadata)
        self._pending.append((self.loop.time() + self.interval, x, metadata))
        self._ensure_worker()
        return None

    def _has_work(self) -> bool:
        return bool(self._pending)

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            due, x, metadata = self._pending[0]
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            self._pending.popleft()
            if not await self._emit_and_finish(x, metadata):
                return

    def emits_later(self) -> bool:
        return bool(self._pending) or self.in_flight > 0

    def get_state(self) -> object:
        now = self.loop.time()
        return {"pending": [(max(0.0, due - now), x) for due, x, _ in self._pending]}

    def set_state(self, state: Any) -> None:
        now = self.loop.time()
        self._pending = deque((now + wait, x, None) for wait, x in state["pending"])
        self._on_loop(self._ensure_worker)

    def state_signature(self) -> str:
        return f"Delay(interval={self.interval})"


@Stream.register_api(attribute_name="rate_limit")
class RateLimit(_Background):
    """Let at most one record through per ``interval``; the upstream waits meanwhile.

    A record held back completes only after it was emitted and the
    downstream work finished.  Held records count as in-flight work, so a
    checkpoint waits for them.

    >>> from rivermark.testing import wait_for
    >>> s = Stream()
    >>> L = s.rate_limit("5ms").sink_to_list()
    >>> for i in range(3):
    ...     s.emit(i)
    >>> L
    [0, 1, 2]
    """

    _graphviz_shape: ClassVar[str] = "octagon"

    def __init__(self, upstream: Stream, interval: object, **kwargs: Unpack[NodeOptions]) -> None:
        self.interval = parse_interval(interval, "rate_limit")
        self._next = 0.0
        self._init_background()
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        self._raise_if_failed()
        now = self.loop.time()
        slot = max(now, self._next)
        self._next = slot + self.interval
        if slot <= now:
            return self._emit(x, metadata)
        self._retain_refs(metadata)
        self.in_flight += 1
        return [self._spawn(self._later(slot - now, x, metadata))]

    async def _later(self, wait: float, x: Any, metadata: Metadata | None) -> None:
        try:
            await asyncio.sleep(wait)
        except BaseException:
            # cancelled (the loop is closing): the record was never emitted, so
            # it is not completed either
            self.in_flight -= 1
            raise
        self.in_flight -= 1  # _emit_and_finish counts it again while it emits
        if not await self._emit_and_finish(x, metadata):
            self._raise_if_failed()  # the upstream awaiting this record fails too

    def state_signature(self) -> str:
        return f"RateLimit(interval={self.interval})"


class _Ticker(_Background):
    """A node that flushes its buffer every ``interval`` seconds, empty or not (as streamz)."""

    def _start_ticker(self) -> None:
        self._ticker: asyncio.Task[Any] | None = None
        self._last: asyncio.Future[Any] | None = None
        self._on_loop(self._launch_ticker)

    def _launch_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = self._spawn(self._tick())
            # The ticker runs for the node's lifetime (as in streamz); on the shared
            # background loop it is still pending at interpreter exit, which is fine.
            # asyncio.Task has no public switch for its "destroyed but pending" log
            self._ticker._log_destroy_pending = False  # type: ignore[attr-defined]  # noqa: SLF001

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            value, metas = self._take()
            done = asyncio.get_running_loop().create_future()
            self._last = done
            try:
                ok = await self._emit_and_finish(value, merge_metadata(metas))
            finally:
                done.set_result(None)
            if not ok:
                return

    def _take(self) -> tuple[object, list[Metadata | None]]:
        raise NotImplementedError

    def _backpressure(self) -> Results:
        last = self._last
        if last is not None and not last.done():
            return [last]
        return None

    interval: float


@Stream.register_api(attribute_name="timed_window")
class TimedWindow(_Ticker):
    """Every ``interval``, emit a list of the records that arrived since the last emit.

    As in streamz an empty list is emitted when nothing arrived.  The records
    of the open window are checkpoint state.

    >>> from rivermark.testing import wait_for
    >>> s = Stream()
    >>> L = s.timed_window("500ms").sink_to_list()
    >>> s.emit(1); s.emit(2)
    >>> wait_for(lambda: [1, 2] in L)
    >>> [w for w in L if w]
    [[1, 2]]
    """

    _graphviz_shape: ClassVar[str] = "octagon"

    def __init__(self, upstream: Stream, interval: object, **kwargs: Unpack[NodeOptions]) -> None:
        self.interval = parse_interval(interval, "timed_window")
        self._buffer: list[Any] = []
        self._metadata_buffer: list[Metadata | None] = []
        self._init_background()
        Stream.__init__(self, upstream, **kwargs)
        self._start_ticker()

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        self._raise_if_failed()
        self._retain_refs(metadata)
        self._buffer.append(x)
        self._metadata_buffer.append(metadata)
        return self._backpressure()

    def _take(self) -> tuple[object, list[Metadata | None]]:
        window, self._buffer = self._buffer, []
        metas, self._metadata_buffer = self._metadata_buffer, []
        return window, metas

    def emits_later(self) -> bool:
        return bool(self._buffer) or self.in_flight > 0

    def get_state(self) -> object:
        return {"buffer": list(self._buffer)}

    def set_state(self, state: Any) -> None:
        self._buffer = list(state["buffer"])
        self._metadata_buffer = [None] * len(self._buffer)

    def state_signature(self) -> str:
        return f"TimedWindow(interval={self.interval})"


@Stream.register_api(attribute_name="timed_window_unique")
class TimedWindowUnique(_Ticker):
    """Every ``interval``, emit a tuple of the records with distinct keys seen since the last emit.

    ``key`` is a callable (``key(x)``) or an item to look up (``x[key]``);
    ``keep="first"`` keeps the first record of a key, ``keep="last"`` the
    latest one (placed where it arrived).  A record that is dropped as a
    duplicate completes at once.

    >>> from rivermark.testing import wait_for
    >>> s = Stream()
    >>> L = s.timed_window_unique("500ms", key=len, keep="last").sink_to_list()
    >>> for word in ["a", "b", "cc", "d"]:
    ...     s.emit(word)
    >>> wait_for(lambda: any(L))
    >>> [w for w in L if w]
    [('cc', 'd')]
    """

    _graphviz_shape: ClassVar[str] = "octagon"

    def __init__(
        self,
        upstream: Stream,
        interval: Any,
        key: Hashable | Callable[[Any], Hashable] = identity,
        keep: str = "first",
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        self.interval = parse_interval(interval, "timed_window_unique")
        if keep not in ("first", "last"):
            raise ConfigurationError(
                f"timed_window_unique: keep must be 'first' or 'last', got {keep!r}; "
                "pass keep='first' or keep='last'"
            )
        self.key = key
        self.keep = keep
        self._buffer: dict[Hashable, tuple[Any, Metadata | None]] = {}
        self._init_background()
        Stream.__init__(self, upstream, **kwargs)
        self._start_ticker()

    def _get_key(self, x: Any) -> Hashable:
        if callable(self.key):
            return self.key(x)
        return x[self.key]  # type: ignore[no-any-return]

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        self._raise_if_failed()
        try:
            k = self._get_key(x)
            hash(k)
        except Exception as e:
            self._user_error(x, e, self.key)
            return None
        if k in self._buffer:
            if self.keep == "first":
                return self._backpressure()
            _, old = self._buffer.pop(k)
            release_refs(old)
        self._retain_refs(metadata)
        self._buffer[k] = (x, metadata)
        return self._backpressure()

    def _take(self) -> tuple[object, list[Metadata | None]]:
        items, self._buffer = self._buffer, {}
        return tuple(x for x, _ in items.values()), [m for _, m in items.values()]

    def emits_later(self) -> bool:
        return bool(self._buffer) or self.in_flight > 0

    def get_state(self) -> object:
        return {"buffer": [x for x, _ in self._buffer.values()]}

    def set_state(self, state: Any) -> None:
        self._buffer = {self._get_key(x): (x, None) for x in state["buffer"]}

    def state_signature(self) -> str:
        return f"TimedWindowUnique(interval={self.interval}, keep={self.keep!r})"


@Stream.register_api(attribute_name="buffer")
class Buffer(_Background):
    """Hold up to ``n`` records between upstream and downstream.

    The upstream goes on while the buffer has room and waits when it is full
    (backpressure); the downstream receives records in order, one at a time.
    Buffered records are checkpoint state.

    >>> from rivermark.testing import wait_for
    >>> s = Stream()
    >>> L = s.buffer(10).sink_to_list()
    >>> for i in range(3):
    ...     s.emit(i)
    >>> wait_for(lambda: len(L) == 3); L
    [0, 1, 2]
    """

    _graphviz_shape: ClassVar[str] = "diamond"
    str_list: ClassVar[list[str]] = ["n"]

    def __init__(self, upstream: Stream, n: int, **kwargs: Unpack[NodeOptions]) -> None:
        check_positive_int("buffer", "n", n)
        self.n = n
        self._items: deque[tuple[Any, Metadata | None]] = deque()
        self._waiting: deque[tuple[Any, Metadata | None, asyncio.Future[Any]]] = deque()
        self._init_background()
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        self._raise_if_failed()
        self._retain_refs(metadata)
        if len(self._items) < self.n and not self._waiting:
            self._items.append((x, metadata))
            self._ensure_worker()
            return None
        room: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((x, metadata, room))
        self._ensure_worker()
        return [room]

    def _has_work(self) -> bool:
        return bool(self._items)

    def _refill(self) -> None:
        while self._waiting and len(self._items) < self.n:
            x, metadata, room = self._waiting.popleft()
            self._items.append((x, metadata))
            if not room.done():
                room.set_result(None)

    async def _work(self) -> None:
        while self._items:
            x, metadata = self._items.popleft()
            self._refill()
            if not await self._emit_and_finish(x, metadata):
                return
            await asyncio.sleep(0)

    def emits_later(self) -> bool:
        return bool(self._items or self._waiting) or self.in_flight > 0

    def get_state(self) -> object:
        return {"items": [x for x, _ in self._items] + [x for x, _, _ in self._waiting]}

    def set_state(self, state: Any) -> None:
        self._items = deque((x, None) for x in state["items"])
        self._on_loop(self._ensure_worker)

    def state_signature(self) -> str:
        return f"Buffer(n={self.n})"


@Stream.register_api(attribute_name="latest")
class Latest(_Background):
    """Pass on the newest record when the event loop and downstream get to it.

    A record is passed on from the node's own task, at the next turn of the
    event loop (as in streamz), never inside the upstream's call; records
    that arrive before then, or while downstream is still busy with the
    previous one, replace the one kept: a superseded record is dropped and
    completes at once.  The upstream never waits.  The kept record is
    checkpoint state (and a job's end waits for it to be passed on).  A
    synchronous ``emit`` (and an awaited ``emit(x, asynchronous=True)``)
    returns once its record was passed on or superseded (the node is a
    :class:`~rivermark.execution.delivery.DeferredDelivery`), so records emitted
    one at a time from synchronous code all pass.

    >>> s = Stream()
    >>> L = s.latest().sink_to_list()
    >>> s.emit(1); s.emit(2); L
    [1, 2]
    """

    _graphviz_shape: ClassVar[str] = "octagon"

    def __init__(self, upstream: Stream, **kwargs: Unpack[NodeOptions]) -> None:
        self._next: list[Any] = []
        self._next_metadata: Metadata | None = None
        self._busy = False
        #: records accepted so far, and how many of them were passed on or dropped
        self._accepted = 0
        self._delivered = 0
        self._progress = delivery.ProgressSignal()
        self._init_background()
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        self._raise_if_failed()
        self._accepted += 1
        release_refs(self._next_metadata)  # a superseded record completes at once
        self._retain_refs(metadata)
        self._next = [x]
        self._next_metadata = metadata
        if not self._busy:
            self._busy = True
            self._spawn(self._drain())
        return None

    async def _drain(self) -> None:
        try:
            while self._next:
                (x,), self._next = self._next, []
                metadata, self._next_metadata = self._next_metadata, None
                seq = self._accepted
                self._set_delivered(seq - 1)  # the ones before it were dropped
                if not await self._emit_and_finish(x, metadata):
                    self._notify()  # waiters see the failure
                    return
                self._set_delivered(seq)
        finally:
            self._busy = False

    def _set_delivered(self, count: int) -> None:
        if count > self._delivered:
            self._delivered = count
            self._notify()

    def _notify(self) -> None:
        self._progress.notify()

    def accepted_count(self) -> int:
        """Records accepted so far (:class:`~rivermark.execution.delivery.DeferredDelivery`)."""
        return self._accepted

    async def wait_delivered(self, count: int) -> None:
        """Wait until the first ``count`` accepted records were passed on or dropped."""
        await self._progress.wait_until(lambda: self._delivered >= count, lambda: self.failure)

    def _resume_pending(self) -> None:
        if self._next and not self._busy:
            self._busy = True
            self._spawn(self._drain())

    def emits_later(self) -> bool:
        return bool(self._next) or self.in_flight > 0

    def get_state(self) -> object:
        return {"next": list(self._next)}

    def set_state(self, state: Any) -> None:
        self._next = list(state["next"])
        self._next_metadata = None
        self._on_loop(self._resume_pending)

    def state_signature(self) -> str:
        return "Latest()"
