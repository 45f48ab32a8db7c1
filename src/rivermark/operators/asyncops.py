"""Asynchronous operators: ``map_async``.

``map_async(func)`` runs a coroutine function on every record, with up to
``parallelism`` calls started behind the one whose result leaves next (as in
streamz), and emits the results in input order.  A
record completes only after its result was emitted and the downstream work
finished; a record whose call raised completes when the error policy has
dealt with it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rivermark.core import runtime
from rivermark.core.node import Stream, check_callable, check_positive_int
from rivermark.core.refs import Metadata, release_refs
from rivermark.errors import ConfigurationError, describe

logger = logging.getLogger(__name__)

__all__ = ["MapAsync"]


@Stream.register_api(attribute_name="map_async")
class MapAsync(Stream):
    """Apply the coroutine function ``func(x, *args, **kwargs)`` to every record.

    ``func`` is an ``async def`` function, a Tornado ``@gen.coroutine``, or
    any function returning an awaitable (as in streamz).  Results leave in
    the order the records arrived.  Up to ``parallelism`` calls run ahead of
    the one whose result leaves next, so up to ``parallelism + 1`` calls run
    at once (as in streamz, whose queue of ``parallelism`` calls sits behind
    the call it awaits); when that many are running the upstream waits
    (backpressure).  A failing call goes through the node's error
    policy; under ``"raise"`` (the default) the node fails for good (see
    ``Stream._fail``): the record stays incomplete, nothing is emitted past
    it and a running Job stops.  With ``stop_on_exception=True`` a failing
    call instead stops the sources upstream and is dropped (as in streamz;
    ``start()`` goes on after it).  Calls still running count as in-flight
    work, so a checkpoint waits for them; the node has no state of its own.

    >>> import asyncio
    >>> async def double(x):
    ...     await asyncio.sleep(0.001 * (3 - x))
    ...     return 2 * x
    >>> async def main():
    ...     s = Stream()
    ...     L = s.map_async(double, parallelism=3).sink_to_list()
    ...     for i in range(3):
    ...         await s.emit(i, asynchronous=True)
    ...     while len(L) < 3:
    ...         await asyncio.sleep(0.001)
    ...     return L
    >>> asyncio.run(main())
    [0, 2, 4]
    """

    _is_async = True
    _graphviz_shape: ClassVar[str] = "ellipse"
    str_list: ClassVar[list[str]] = ["func", "parallelism"]

    def __init__(
        self,
        upstream: Stream,
        func: Callable[..., Awaitable[object]],
        *args: Any,
        parallelism: int = 1,
        stop_on_exception: bool = False,
        **kwargs: Any,
    ) -> None:
        check_callable("map_async", "func", func)
        if isinstance(func, type) or inspect.isbuiltin(func):
            # these never return an awaitable; any other callable may (a Tornado
            # coroutine, a lambda returning a coroutine), which is checked per call
            raise ConfigurationError(
                f"map_async: func must be a coroutine function (async def), got {func!r}; "
                "for a plain function use .map(func)"
            )
        check_positive_int("map_async", "parallelism", parallelism)
        self.func = func
        self.parallelism = parallelism
        #: as in streamz: a failing call also stops the sources upstream
        #: (``start()`` them again to go on)
        self.stop_on_exception = bool(stop_on_exception)
        stream_name = kwargs.pop("stream_name", None)
        name = kwargs.pop("name", None)
        on_error = kwargs.pop("on_error", None)
        self.args = args
        self.kwargs = kwargs
        self.in_flight = 0
        # calls started, in input order: (task, record, metadata)
        self._running: deque[tuple[asyncio.Task[Any], Any, Metadata | None]] = deque()
        # records waiting for a free slot, with the future their upstream awaits
        self._waiting: deque[tuple[Any, Metadata | None, asyncio.Future[Any]]] = deque()
        self._worker: asyncio.Task[Any] | None = None
        Stream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    def records_held(self) -> int | None:
        return self.in_flight

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        self._raise_if_failed()
        self._retain_refs(metadata)
        self.in_flight += 1
        if self._has_slot() and not self._waiting:
            self._start_call(x, metadata)
            return None
        slot: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((x, metadata, slot))
        return [slot]

    def _has_slot(self) -> bool:
        """Whether a call may start: ``parallelism`` behind the one whose result leaves next."""
        return len(self._running) <= self.parallelism

    def _start_call(self, x: Any, metadata: Metadata | None) -> None:
        try:
            coro = self.func(x, *self.args, **self.kwargs)
        except Exception as e:
            coro = _raise(e)
        else:
            if not inspect.isawaitable(coro):
                coro = _raise(
                    TypeError(
                        f"{self.display_name()}: func returned {coro!r}, not an awaitable; "
                        "map_async needs a coroutine function (async def) or a function "
                        "returning an awaitable; for a plain function use .map(func)"
                    )
                )
        task = asyncio.ensure_future(coro)
        self._running.append((task, x, metadata))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._emit_in_order())

    async def _emit_in_order(self) -> None:
        while self._running:
            task, x, metadata = self._running[0]
            try:
                await self._pass_on_result(task, x, metadata)
            except Exception as e:  # a raise policy, or a failure downstream
                self._fail_in_order(e)
                return
            self._running.popleft()
            self.in_flight -= 1
            release_refs(metadata)
            while self._waiting and self._has_slot():
                wx, wmeta, slot = self._waiting.popleft()
                self._start_call(wx, wmeta)
                if not slot.done():
                    slot.set_result(None)

    async def _pass_on_result(self, task: Any, x: Any, metadata: Metadata | None) -> None:
        """Pass on the result of the call at the head (or apply the error policy to its failure)."""
        try:
            y = await task
        except Exception as e:
            if self.stop_on_exception:
                self._stop_on(x, e)
            else:
                self._user_error(x, e, self.func)  # returns if the policy drops it
            return
        results = self._emit(y, metadata)
        if results:
            await runtime.gather_results(results)

    def _fail_in_order(self, exc: Exception) -> None:
        """The node fails for good: the record at the head stays in flight and incomplete.

        No later result is emitted past it: their calls are cancelled and
        their records kept; senders waiting for a slot get the failure.
        """
        self._fail(exc)
        for other, _, _ in self._running:
            other.cancel()
        for _, _, slot in self._waiting:
            if not slot.done():
                slot.set_exception(self._failed_error())
                slot.exception()  # retrieved: an upstream may not await it

    def _stop_on(self, x: Any, exc: Exception) -> None:
        """``stop_on_exception=True``: stop the sources upstream and drop the record.

        The user asked for streamz's behaviour: the failure is logged, the
        sources stop, and ``start()`` goes on after the failed record.
        """
        self.stop()
        try:
            self._user_error(x, exc, self.func)
        except Exception as err:
            logger.error(
                "%s: %s -- the sources upstream were stopped (stop_on_exception=True); "
                "start() goes on after this record",
                self.display_name(),
                describe(err),
            )

    def state_signature(self) -> str:
        return f"MapAsync(parallelism={self.parallelism})"


async def _raise(e: Exception) -> object:
    raise e
