"""Helpers for tests of rivermark pipelines."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from rivermark.errors import RivermarkError

logger = logging.getLogger(__name__)

__all__ = [
    "wait_for",
    "wait_value",
    "wait_for_async",
    "wait_progress",
    "run_in_thread",
    "WaitTimeout",
    "examples",
]


def examples(n: int) -> int:
    """How many examples a property test runs: ``n`` scaled by ``RIVERMARK_TEST_EXAMPLES``.

    The full test run uses ``n``; the quick tier (``scripts/test --quick``)
    sets the scale to 0.2, so a developer's loop checks every property on
    fewer random cases.

    >>> examples(100) if "RIVERMARK_TEST_EXAMPLES" not in os.environ else 100
    100
    """
    raw = os.environ.get("RIVERMARK_TEST_EXAMPLES", "1")
    try:
        scale = float(raw)
    except ValueError:
        raise ValueError(
            f"RIVERMARK_TEST_EXAMPLES={raw!r} is not a number; set it to a scale such as 0.2"
        ) from None
    return max(5, round(n * scale))


class WaitTimeout(RivermarkError, TimeoutError):
    """A condition awaited by :func:`wait_for` did not become true in time."""


def _fail(predicate: Callable[[], object], timeout: float, what: str | None = None) -> WaitTimeout:
    # optional: a callable object has no __qualname__
    name = what or getattr(predicate, "__qualname__", repr(predicate))
    return WaitTimeout(
        f"wait_for: condition {name!r} was still false after {timeout!r} s; "
        "check that the source was started, or pass a larger timeout="
    )


def wait_value(
    predicate: Callable[[], object],
    timeout: float = 60,
    what: str | None = None,
    *,
    interval: float = 0.002,
) -> object:
    """Block until ``predicate()`` returns a true value, and return that value.

    Raises :class:`WaitTimeout` (naming ``what``, else the predicate) after
    ``timeout`` s.  The condition is asked again after ``interval`` s, then
    after pauses that double up to ``MAX_PAUSE``.  Use it from a thread that
    does not run the pipeline's event loop (tests whose graph runs on the
    background loop).

    >>> box = [1]
    >>> wait_value(lambda: box, what="a full box")
    [1]
    """
    deadline = time.monotonic() + timeout
    pause = interval
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise _fail(predicate, timeout, what)
        time.sleep(pause)
        pause = _next_pause(pause, interval)
    return value


#: the longest pause between two polls of a condition that stays false
MAX_PAUSE = 0.05


def _next_pause(pause: float, interval: float) -> float:
    """The pause after ``pause``: doubled, up to ``MAX_PAUSE`` (or ``interval`` if longer).

    A condition that comes true at once is seen within ``interval``; one
    that takes seconds is polled 20 times a second, not 500, so the wait
    leaves the processors to the job it waits for.

    >>> _next_pause(0.002, 0.002), _next_pause(0.04, 0.002), _next_pause(0.5, 0.5)
    (0.004, 0.05, 0.5)
    """
    return min(pause * 2, max(MAX_PAUSE, interval))


def wait_for(
    predicate: Callable[[], object],
    timeout: float = 60,
    what: str | None = None,
    *,
    interval: float = 0.002,
) -> None:
    """Block until ``predicate()`` is true (:func:`wait_value`, without the value).

    >>> box = [1]
    >>> wait_for(lambda: box)
    """
    wait_value(predicate, timeout, what, interval=interval)


def wait_progress(
    count: Callable[[], int],
    goal: int,
    stall: float = 120,
    what: str | None = None,
    *,
    limit: float = 1800,
    interval: float = 0.01,
) -> None:
    """Block until ``count()`` reaches ``goal``, for as long as it keeps growing.

    A deadline that follows progress rather than the wall clock: it raises
    :class:`WaitTimeout` when ``count()`` has not grown for ``stall`` s (or
    after ``limit`` s in all), so a slow machine that still makes progress
    is waited for, and a stuck one is not.

    >>> seen = iter(range(100))
    >>> wait_progress(lambda: next(seen), 50, stall=5, what="records")
    """
    start = last_change = time.monotonic()
    pause = interval
    best = count()
    while best < goal:
        now = time.monotonic()
        if now - last_change > stall or now - start > limit:
            name = what or "count"
            raise WaitTimeout(
                f"wait_progress: {name} reached {best} of {goal} and did not grow for "
                f"{now - last_change:.0f} s ({now - start:.0f} s in all)"
            )
        time.sleep(pause)
        pause = _next_pause(pause, interval)
        n = count()
        if n > best:
            best, last_change = n, time.monotonic()


async def wait_for_async(
    predicate: Callable[[], object], timeout: float = 30, interval: float = 0.001
) -> None:
    """Like :func:`wait_for`, but awaits, for use inside the pipeline's event loop.

    >>> asyncio.run(wait_for_async(lambda: True))
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise _fail(predicate, timeout)
        await asyncio.sleep(interval)


class Runs(Protocol):
    """Something with a blocking ``run()``: a :class:`~rivermark.checkpoint.Job`."""

    def run(self) -> Any: ...


def run_in_thread(job: Runs) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``job.run()`` in a daemon thread; the list receives what it raised, if anything.

    The test joins the thread and looks at the list (empty: the run ended
    normally), so a failure is the test's to judge, not an unhandled
    exception in a thread.

    >>> class Failing:
    ...     def run(self):
    ...         raise ValueError("bad input")
    >>> thread, raised = run_in_thread(Failing())
    >>> thread.join(10); raised
    [ValueError('bad input')]
    """
    raised: list[BaseException] = []

    def target() -> None:
        try:
            job.run()
        except BaseException as e:  # handed to the test
            raised.append(e)

    thread = threading.Thread(target=target, name=f"run {job!r}", daemon=True)
    thread.start()
    return thread, raised
