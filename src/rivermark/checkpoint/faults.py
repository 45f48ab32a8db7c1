"""Fault points: places where a crash test can make the process kill itself.

``fault_point(name)`` does nothing unless the environment variable
``RIVERMARK_FAULT`` equals ``name`` (or ``name:N``: the N-th time the point
is reached).  Then the process sends itself SIGKILL, so no ``finally`` block,
``atexit`` hook or buffered write runs: the same as ``kill -9``.

The variable is read once at import; when it is unset a point costs one
dictionary lookup.

``fault_error(name)`` is the other kind of point: when
``RIVERMARK_FAULT_ERROR`` is ``name:ERRNO`` (an errno name such as
``ENOSPC`` or ``EACCES``), it raises that ``OSError`` there, as the file
system would (for a disk that fills up where a small tmpfs cannot be
mounted).  The one point of this kind, ``checkpoint-write``, sits in
``LocalDirectoryStore.write_checkpoint`` after the checkpoint's directory
was created and before its first state file is written.

``savepoint-after-state-files`` is passed only by a savepoint, right after
``after-state-files`` (a savepoint's state files are written, its manifest
not yet); it is not in :data:`FAULT_POINTS`, which every checkpoint passes.

``hold_before_end()`` is where a job waits to be killed instead of ending:
the crash harness (:func:`rivermark.testing.crash.run_with_crashes`) sets
``RIVERMARK_HOLD_END`` to a file name while it still owes the job kills; a
:class:`~rivermark.checkpoint.Job` that is about to end (its input is
exhausted, or it was asked to stop) creates that file and waits there, its
final checkpoint not written, until the harness kills it.  So a test that
asks for N kills gets N however fast the machine runs the job.  A process
whose parent is gone stops waiting and ends normally.

>>> fault_point("after-manifest")  # RIVERMARK_FAULT is unset: nothing happens
>>> asyncio.run(hold_before_end())  # RIVERMARK_HOLD_END is unset: returns at once
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["fault_point", "fault_error", "hold_before_end", "FAULT_POINTS", "HOLD_END_ENV"]

#: the points the checkpoint protocol passes, in the order of a background write
#: (a checkpoint written with the sources paused passes before-resume last)
FAULT_POINTS: tuple[str, ...] = (
    "before-resume",
    "before-write",
    "after-state-files",
    "after-manifest",
    "after-sink-commit",
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


def _parse_error(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    name, _, code = value.partition(":")
    number = getattr(errno, code or "EIO", None)
    if not isinstance(number, int):
        raise ValueError(f"RIVERMARK_FAULT_ERROR: unknown errno name {code!r}; use e.g. ENOSPC")
    return name, number


_armed_error = _parse_error(os.environ.get("RIVERMARK_FAULT_ERROR"))


def fault_error(name: str) -> None:
    """Raise ``OSError`` if ``RIVERMARK_FAULT_ERROR`` names this point (see module docs)."""
    if _armed_error is None or _armed_error[0] != name:
        return
    number = _armed_error[1]
    logger.warning("fault point %r reached: raising %s", name, errno.errorcode[number])
    raise OSError(number, os.strerror(number))


#: set by the crash harness: the file a job creates when it is about to end
HOLD_END_ENV = "RIVERMARK_HOLD_END"
_hold_end = os.environ.get(HOLD_END_ENV)
_parent = os.getppid()


async def hold_before_end() -> None:
    """Wait here to be killed if ``RIVERMARK_HOLD_END`` is set (see module docs).

    The event loop keeps running meanwhile (a checkpoint written in the
    background completes); the wait ends only when the process that started
    this one is gone, and then the job ends as it would have.
    """
    if _hold_end is None:
        return
    logger.warning("about to end: waiting to be killed (%s=%s)", HOLD_END_ENV, _hold_end)
    Path(_hold_end).touch()
    while os.getppid() == _parent:
        await asyncio.sleep(0.02)
    logger.warning("the process that started this one is gone: ending normally")
