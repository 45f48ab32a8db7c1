"""``Stream.emit`` outside the generated code: the event loop, ``asynchronous=True``, deferred delivery.

A synchronous graph's ``emit`` is its generated function (:mod:`.plan`
installs it on the node).  This module is every other case: a graph with
asynchronous nodes runs the emit on its event loop (in the calling thread
when that is the loop's thread, else handed over to it and waited for), a
node created with ``asynchronous=True`` or a call with
``asynchronous=True`` returns an awaitable, and an emit waits for records
that nodes below pass on later (Dask's ``gather``, ``latest``:
:mod:`.delivery`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from rivermark.execution import delivery, loops
from rivermark.execution.node import Metadata, Node
from rivermark.execution.plan import plan_of

__all__ = ["emit"]


def emit(node: Node, x: Any, asynchronous: bool, metadata: Metadata | None) -> Any:
    """The body of :meth:`rivermark.core.node.Stream.emit` (see there)."""
    plan = plan_of(node)
    if node.asynchronous:
        asynchronous = True
    loop = plan.loop_below(node)
    if loop is None:
        results = node._emit(x, metadata)
        if not asynchronous:
            return None
        # a synchronous node may still hand back awaitables when the caller
        # runs on a loop (zip's backpressure on a full buffer): await them
        return loops.gather_results(results) if results else _done()
    deferred = plan.deferred(node)
    if loops.in_loop_thread(loop):
        return _emit_on_loop(node, x, asynchronous, metadata, deferred)
    coro = (
        _emit_and_deliver(node, x, metadata, deferred)
        if deferred
        else _emit_and_wait(node, x, metadata)
    )
    fut = asyncio.run_coroutine_threadsafe(coro, loop)
    if asynchronous:
        return asyncio.wrap_future(fut)
    return fut.result()


def _emit_on_loop(
    node: Node,
    x: Any,
    asynchronous: bool,
    metadata: Metadata | None,
    deferred: tuple[delivery.DeferredDelivery, ...],
) -> Any:
    """An emit called on the graph's own event loop thread."""
    if deferred and asynchronous:
        # as streamz: the awaitable also covers what Dask's gather passes on later
        before = delivery.counts(deferred)
        results = node._emit(x, metadata)
        waits = delivery.waits(deferred, before)
        return loops.gather_results([*(results or ()), *waits])
    results = node._emit(x, metadata)
    if asynchronous:
        return loops.gather_results(results)
    return results


async def _emit_and_wait(node: Node, x: Any, metadata: Metadata | None) -> None:
    await loops.gather_results(node._emit(x, metadata))


async def _emit_and_deliver(
    node: Node,
    x: Any,
    metadata: Metadata | None,
    deferred: tuple[delivery.DeferredDelivery, ...],
) -> None:
    """Emit, then wait for the records ``deferred`` nodes accepted to be passed on."""
    before = delivery.counts(deferred)
    results = node._emit(x, metadata)
    waits: list[Awaitable[object]] = [*(results or ()), *delivery.waits(deferred, before)]
    await loops.gather_results(waits)


async def _done() -> None:
    return None
