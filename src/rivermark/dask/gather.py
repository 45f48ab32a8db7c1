"""``DaskGather``: the futures of a scattered stream back as local values, in order."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from distributed.client import FutureCancelledError
from distributed.scheduler import KilledWorker

from rivermark.core import runtime
from rivermark.core.graph import ancestors
from rivermark.core.node import Stream, check_positive_int
from rivermark.core.refs import Metadata
from rivermark.dask.batches import _Part, _PartError
from rivermark.dask.client import _address, _check_client, _futures_in, _start_fetch
from rivermark.dask.errors import DaskConnectionError, DaskError, DaskWorkerLostError
from rivermark.dask.stream import DaskStream
from rivermark.execution import delivery

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    record: Any  # the user's record, or a _Part of an accumulate batch
    metadata: Metadata | None
    fetch: asyncio.Future[tuple[bool, Any]]  # (True, the value) or (False, the exception)


@DaskStream.register_api(attribute_name="gather")
class DaskGather(Stream):
    """Wait for the futures of a scattered stream and emit their values, in order.

    Up to ``max_inflight`` futures are outstanding at once; while the window
    is full, ``update`` returns an awaitable, so the source waits
    (backpressure).  Values are emitted in arrival order of the futures.
    A record is complete once its value has been emitted and the downstream
    work has finished.  ``await node.wait_drained()`` (or ``node.flush()``
    from another thread) waits until nothing is in flight and raises the
    node's failure, if any.

    A synchronous ``source.emit(x)`` (and an awaited
    ``source.emit(x, asynchronous=True)``) returns once the values of the
    futures it produced have been emitted here, as in streamz (the node is a
    :class:`~rivermark.execution.delivery.DeferredDelivery`); sources keep up to
    ``max_inflight`` futures outstanding.

    >>> s = Stream()
    >>> g = s.scatter().gather(max_inflight=4)
    >>> g.max_inflight, g.in_flight
    (4, 0)
    """

    _is_async = True
    _graphviz_fillcolor: ClassVar[str] = "lightblue"
    str_list: ClassVar[list[str]] = ["max_inflight"]

    def __init__(
        self,
        upstream: Stream,
        max_inflight: int = 32,
        stream_name: str | None = None,
        name: str | None = None,
        on_error: Any = None,
    ) -> None:
        check_positive_int("gather", "max_inflight", max_inflight)
        self.max_inflight = max_inflight
        self.in_flight = 0
        #: records accepted by ``update`` and passed on (or dropped) so far
        self._accepted = 0
        self._delivered = 0
        self._pending: deque[_Pending] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._progress = delivery.ProgressSignal()
        self.failure: BaseException | None = None
        Stream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    # ------------------------------------------------------------ data flow
    def update(
        self, x: object, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        if self.failure is not None:
            raise self.failure
        if runtime.current_loop() is None:
            # called outside any loop (a direct update() call): hop onto ours
            runtime.run_sync(self.loop, self._update_and_wait(x, metadata))
            return None
        part = type(x) is _Part
        futures = [] if part else _futures_in(x, [])
        if futures:
            # the futures know their client; a record without any passes through in order
            _check_client(self, futures[0].client)
        elif part:
            _check_client(self, cast(_Part, x).batch.node.client)
        self._retain_refs(metadata)
        self.in_flight += 1
        self._accepted += 1
        fetch: asyncio.Future[tuple[bool, Any]]
        try:
            if part:
                fetch = asyncio.ensure_future(cast(_Part, x).value())
            elif futures:
                fetch = _start_fetch(futures[0].client, x)
            else:
                fetch = asyncio.get_running_loop().create_future()
                fetch.set_result((True, x))
        except Exception as e:
            fetch = asyncio.get_running_loop().create_future()
            fetch.set_result((False, e))
        self._pending.append(_Pending(x, metadata, fetch))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        if len(self._pending) >= self.max_inflight:
            return [self._wait_room()]
        return None

    async def _update_and_wait(self, x: object, metadata: Metadata | None) -> None:
        await runtime.gather_results(self.update(x, None, metadata))

    def _notify(self) -> None:
        self._progress.notify()

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        await self._progress.wait_until(done, lambda: self.failure)

    async def _wait_room(self) -> None:
        await self._wait_for(lambda: len(self._pending) < self.max_inflight)

    def accepted_count(self) -> int:
        """Records accepted so far (:class:`~rivermark.execution.delivery.DeferredDelivery`)."""
        return self._accepted

    async def wait_delivered(self, count: int) -> None:
        """Wait until the first ``count`` accepted records were emitted (or dropped)."""
        await self._wait_for(lambda: self._delivered >= count)

    async def wait_drained(self) -> None:
        """Wait until nothing is in flight here or in the asynchronous nodes upstream.

        Upstream nodes (``buffer``, ``delay``, ...) count their held records in
        ``in_flight``; they are polled, this node is awaited.
        """
        while True:
            busy = [n for n in ancestors(self) if n.in_flight]
            if not busy:
                await self._wait_for(lambda: self.in_flight == 0)
                if not any(n.in_flight for n in ancestors(self)):
                    return
            else:
                if self.failure is not None:
                    raise self.failure
                await asyncio.sleep(0.001)

    def flush(self, timeout: float | None = None) -> None:
        """Block (from a thread other than the graph's loop) until drained."""
        runtime.run_sync(self.loop, self.wait_drained(), timeout)

    async def _drain(self) -> None:
        while self._pending and self.failure is None:
            p = self._pending[0]
            try:
                ok, value = await p.fetch
                if ok:
                    results = self._emit(value, p.metadata)
                    if results:
                        await runtime.gather_results(results)
                else:
                    self._fetch_failed(p, value)  # returns only if the record is dropped
            except BaseException as e:  # noqa: BLE001 - the node fails, the job stops
                self.failure = e
                logger.error("%s failed: %s", self.display_name(), e)
                self._notify()
                if not isinstance(e, Exception):
                    raise
                return
            self._pending.popleft()
            self.in_flight -= 1
            self._delivered += 1
            self._release_refs(p.metadata)
            self._notify()

    def _fetch_failed(self, p: _Pending, exc: BaseException) -> None:
        if isinstance(exc, _PartError):
            self._user_error(p.record, exc.error, p.record.batch.node.func)
            return
        if type(p.record) is _Part:
            if exc is p.record.batch.error:
                raise exc  # submitting the batch failed (e.g. the client closed): say so as is
            batch_future = p.record.batch.future
            futures = [batch_future] if batch_future is not None else []
        else:
            futures = _futures_in(p.record, [])
        client = futures[0].client if futures else None
        if isinstance(exc, KilledWorker):
            raise DaskWorkerLostError(
                f"{self.display_name()}: Dask gave up on a task after its workers died "
                f"repeatedly ({exc}); check the workers' memory and logs, or raise "
                f"distributed.scheduler.allowed-failures"
            ) from exc
        if isinstance(exc, DaskError):
            # raised by rivermark's own code on a worker (e.g. reading a Kafka
            # range): not the user's function, so no error policy drops it
            raise DaskError(
                f"{self.display_name()}: a task of {p.record!r} failed on a worker: {exc}"
            ) from exc
        erred = [f for f in futures if f.status == "error"]
        if erred and isinstance(exc, Exception):
            self._user_error(p.record, exc, _TaskName(erred[0].key))
            return
        # optional: only distributed's cancellation errors give a reason
        reason = getattr(exc, "reason", None)
        lost = (
            isinstance(exc, OSError)
            or reason == "scheduler-connection-lost"
            or (client is not None and client.status != "running")
        )
        if lost:
            raise DaskConnectionError(
                f"{self.display_name()}: lost the connection to the Dask scheduler at "
                f"{_address(client)!r} while waiting for {p.record!r} "
                f"({type(exc).__name__}: {exc}; reason {reason!r}); the job stops, its last "
                f"checkpoint is intact; restart it once the scheduler is reachable"
            ) from exc
        if isinstance(exc, FutureCancelledError):
            raise DaskError(
                f"{self.display_name()}: the Dask future of {p.record!r} was cancelled "
                f"(reason {reason!r}) while the scheduler at {_address(client)!r} is still "
                f"connected; something cancelled it (client.cancel, client.restart); the job "
                f"stops, its last checkpoint is intact; run it again to resume from there"
            ) from exc
        raise DaskError(
            f"{self.display_name()}: gathering {p.record!r} failed with "
            f"{type(exc).__name__}: {exc}; the job stops, its last checkpoint is intact"
        ) from exc

    def state_signature(self) -> str:
        return f"DaskGather(max_inflight={self.max_inflight})"


class _TaskName:
    """Names a Dask task in error messages (its key) where a function would be named."""

    def __init__(self, key: object) -> None:
        self.__qualname__ = f"task {key!r}"
