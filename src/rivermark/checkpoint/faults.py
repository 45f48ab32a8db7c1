"""Fault points: places where a crash test can make the process kill itself.

``fault_point(name)`` does nothing unless the environment variable
``RIVERMARK_FAULT`` equals ``name`` (or ``name:N``: the N-th time the point
is reached).  Then the process sends itself SIGKILL, so no ``finally`` block,
``atexit`` hook or buffered write runs: the same as ``kill -9``.

The variable is read once at import; when it is unset a point costs one
dictionary lookup.

>>> fault_point("after-manifest")  # RIVERMARK_FAULT is unset: nothing happens
"""

from __future__ import annotations

import logging
import os
import signal

logger = logging.getLogger(__name__)

__all__ = ["fault_point", "FAULT_POINTS"]

#: the points the checkpoint protocol passes, in order
FAULT_POINTS: tuple[str, ...] = (
    "after-state-files",
    "after-manifest",
    "after-sink-commit",
    "before-resume",
)


def _parse(value: str | None) -> dict[str, int]:
    if not value:
        return {}
    name, _, nth = value.partition(":")
    return {name: int(nth) if nth else 1}


_armed: dict[str, int] = _parse(os.environ.get("RIVERMARK_FAULT"))
_reached: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Kill this process with SIGKILL if ``RIVERMARK_FAULT`` names this point."""
    nth = _armed.get(name)
    if nth is None:
        return
    count = _reached.get(name, 0) + 1
    _reached[name] = count
    if count >= nth:
        logger.warning("fault point %r reached (%d): killing the process", name, count)
        os.kill(os.getpid(), signal.SIGKILL)
