"""Helpers for tests of rivermark pipelines."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import RivermarkError

logger = logging.getLogger(__name__)

__all__ = ["wait_for", "wait_value", "wait_for_async", "WaitTimeout"]


class WaitTimeout(RivermarkError, TimeoutError):
    """A condition awaited by :func:`wait_for` did not become true in time."""


def _fail(predicate: Callable[[], Any], timeout: float, what: str | None = None) -> WaitTimeout:
    name = what or getattr(predicate, "__qualname__", repr(predicate))
    return WaitTimeout(
        f"wait_for: condition {name!r} was still false after {timeout!r} s; "
        "check that the source was started, or pass a larger timeout="
    )


def wait_value(
    predicate: Callable[[], Any],
    timeout: float = 60,
    what: str | None = None,
    *,
    interval: float = 0.002,
) -> Any:
    """Block until ``predicate()`` returns a true value, and return that value.

    Raises :class:`WaitTimeout` (naming ``what``, else the predicate) after
    ``timeout`` s.  Use it from a thread that does not run the pipeline's
    event loop (tests whose graph runs on the background loop).

    >>> box = [1]
    >>> wait_value(lambda: box, what="a full box")
    [1]
    """
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise _fail(predicate, timeout, what)
        time.sleep(interval)
    return value


def wait_for(
    predicate: Callable[[], Any],
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


async def wait_for_async(
    predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.001
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
