"""Nodes that pass a record on after their ``update`` returned, and emits that wait for them.

streamz's ``emit`` awaits what the downstream ``update`` calls return; its
Dask ``gather`` returns the wait for the gathered value to be passed on, so
``source.emit(x)`` returns once the result has reached the sinks.
rivermark's ``gather`` keeps several futures in flight instead (that is where
the parallelism comes from), and answers the same question through this
contract, as ``latest`` does (it passes records on from its own task, a
superseded one counting as passed on): a node that implements :class:`DeferredDelivery` counts the records
it has accepted, and can wait until the first ``n`` of them have been passed
on.  A synchronous ``emit`` (and an awaited ``emit(x, asynchronous=True)``)
on a graph with such nodes below waits for the records it handed them; a
graph without them is not affected (``Stream.emit`` finds none once per
graph shape), and sources, which await backpressure only, are not affected
either.

Only the records that reach the node while the emit runs are waited for: a
record held on the way (in a ``buffer``, a ``delay``) is not, as in streamz.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from rivermark.execution.node import walk_from

__all__ = ["DeferredDelivery", "ProgressSignal", "deferred_nodes", "counts", "waits"]


@runtime_checkable
class DeferredDelivery(Protocol):
    """A node whose ``update`` may return before the record was passed on.

    Records are passed on in the order they were accepted.
    """

    def accepted_count(self) -> int:
        """How many records ``update`` has accepted so far."""

    async def wait_delivered(self, count: int) -> None:
        """Wait until the first ``count`` accepted records have been passed on.

        A record dropped by the node's error policy counts as passed on; a
        failure of the node is raised.
        """


class ProgressSignal:
    """What a :class:`DeferredDelivery` node's waiters sleep on until its counts move.

    The node calls :meth:`notify` whenever a count changes (or it failed);
    :meth:`wait_until` wakes on each and checks its condition, raising the
    node's failure.  The event is made on first use, on the loop that waits.

    >>> import asyncio
    >>> signal, box = ProgressSignal(), []
    >>> async def main():
    ...     waiter = asyncio.ensure_future(signal.wait_until(lambda: box, lambda: None))
    ...     await asyncio.sleep(0)
    ...     box.append(1); signal.notify()
    ...     await waiter
    >>> asyncio.run(main())
    """

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def notify(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait_until(
        self, done: Callable[[], bool], failure: Callable[[], BaseException | None]
    ) -> None:
        """Wait until ``done()``; raise ``failure()`` whenever it is set."""
        while not done():
            exc = failure()
            if exc is not None:
                raise exc
            if self._event is None:
                self._event = asyncio.Event()
            self._event.clear()
            await self._event.wait()
        exc = failure()
        if exc is not None:
            raise exc


def deferred_nodes(downstreams: Iterable[Any]) -> tuple[DeferredDelivery, ...]:
    """The :class:`DeferredDelivery` nodes at or below ``downstreams`` (a graph walk)."""
    nodes = walk_from(downstreams, lambda n: n.downstreams)
    return tuple(n for n in nodes if isinstance(n, DeferredDelivery))


def counts(nodes: tuple[DeferredDelivery, ...]) -> list[int]:
    """Each node's accepted count now."""
    return [n.accepted_count() for n in nodes]


def waits(nodes: tuple[DeferredDelivery, ...], before: list[int]) -> list[Awaitable[None]]:
    """Waits for the records the nodes accepted since ``before`` (from :func:`counts`)."""
    out: list[Awaitable[None]] = []
    for node, b in zip(nodes, before):
        now = node.accepted_count()
        if now > b:
            out.append(node.wait_delivered(now))
    return out
