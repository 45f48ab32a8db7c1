"""Waiting for what a graph hands back: the running loop, and the awaitables of an update.

The data flow's part of the event loop; which loop a graph runs on, the
shared background loop and how synchronous code waits for it are
:mod:`rivermark.core.runtime`'s (which offers these functions too).

>>> import asyncio
>>> current_loop() is None
True
>>> asyncio.run(gather_results(None))
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

__all__ = ["current_loop", "in_loop_thread", "gather_results"]


def current_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def in_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the calling thread is the one running ``loop``."""
    return current_loop() is loop


async def gather_results(results: list[Awaitable[Any]] | None) -> None:
    """Await every awaitable in an ``update``/``_emit`` result list.

    Awaitables may themselves produce further result lists (a node that emits
    after awaiting); those are awaited too, so the caller has backpressure on
    the whole downstream subgraph.
    """
    while results:
        pending = results
        results = []
        for r in await asyncio.gather(*pending):
            if r:
                results.extend(r)
