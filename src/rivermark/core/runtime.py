"""The asyncio runtime: which event loop a graph runs on, and how sync code waits.

A graph made only of synchronous nodes never touches an event loop: ``emit``
calls straight through.  As soon as a graph holds an asynchronous node (a
timer, a rate limit, an asynchronous map or sink, a source), it needs a loop:

* the loop passed explicitly (``loop=``), else
* the loop running in the calling thread when the node is created (Jupyter,
  an ``async def main()``), else
* one shared background loop running in a daemon thread, started on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import TypeVar

from rivermark.execution.loops import current_loop as current_loop
from rivermark.execution.loops import gather_results as gather_results
from rivermark.execution.loops import in_loop_thread as in_loop_thread

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "background_loop",
    "current_loop",
    "in_loop_thread",
    "run_sync",
    "gather_results",
    "stop_background_loop",
]

#: how often the main thread, waiting in :func:`run_sync`, runs pending signal handlers
_SIGNAL_POLL = 0.1

_lock = threading.Lock()
_bg_loop: asyncio.AbstractEventLoop | None = None
_bg_thread: threading.Thread | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """Return the shared background loop, starting its daemon thread if needed."""
    global _bg_loop, _bg_thread
    with _lock:
        if (
            _bg_loop is not None
            and not _bg_loop.is_closed()
            and _bg_thread is not None
            and _bg_thread.is_alive()
        ):
            return _bg_loop
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            loop.run_forever()

        thread = threading.Thread(target=run, name="rivermark-loop", daemon=True)
        thread.start()
        started.wait()
        _bg_loop, _bg_thread = loop, thread
        logger.debug("started background event loop thread %s", thread.name)
        return loop


def stop_background_loop() -> None:
    """Stop the shared background loop (called at interpreter exit)."""
    global _bg_loop, _bg_thread
    with _lock:
        loop, thread = _bg_loop, _bg_thread
        _bg_loop, _bg_thread = None, None
    if loop is None or loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=5)
    if thread is None or not thread.is_alive():
        # closed here, not by the loop's finaliser during interpreter teardown,
        # when its self-pipe may already be gone (an "Invalid file descriptor")
        loop.close()


atexit.register(stop_background_loop)


def run_sync(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[object, object, T],
    timeout: float | None = None,
) -> T:
    """Run ``coro`` on ``loop`` from another thread and wait for its result."""
    if in_loop_thread(loop):
        raise RuntimeError(
            "run_sync() was called from inside the event loop it would wait for; "
            "use 'await' (or emit(..., asynchronous=True)) there instead"
        )
    fut: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
    if timeout is None and threading.current_thread() is threading.main_thread():
        # The kernel may hand a signal (SIGTERM) to any thread; its C handler
        # only flags it, and Python runs the handler on the main thread when
        # that thread next executes bytecode.  A wait without end would keep
        # a job's graceful-stop handler from ever running, so wake up often.
        while not fut.done():
            concurrent.futures.wait((fut,), timeout=_SIGNAL_POLL)
    return fut.result(timeout)
