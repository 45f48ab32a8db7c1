"""Shared helpers for source tests."""

from __future__ import annotations

from typing import Any

from rivermark.core import runtime
from rivermark.testing import wait_for


def stop_and_wait(source: Any, timeout: float = 30) -> None:
    """Stop ``source`` and block until its run() has returned."""
    source.stop()
    wait_for(lambda: source.finished, timeout=timeout)


def leftover_tasks() -> list[str]:
    """Qualified names of the coroutines still pending on the background loop (but the probe)."""
    import asyncio

    async def probe() -> list[str]:
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        return sorted(getattr(t.get_coro(), "__qualname__", "?") for t in tasks)

    return runtime.run_sync(runtime.background_loop(), probe(), timeout=30)
