"""A job started from a thread that runs an event loop (a Jupyter cell).

``Job.run()`` blocks until the job ends.  On a thread whose event loop is
running (Jupyter's kernel runs its cells on one), blocking would freeze
that loop, and with it the job if the job's nodes run there.  There
``Job.run()`` moves the graph's asynchronous work to rivermark's own loop,
which runs in a background thread, starts the job on it and returns a
:class:`JobHandle` at once: the cell finishes, outputs keep updating, and
the handle waits for, stops or reports the job.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING

from rivermark.checkpoint.protocol.listeners import display
from rivermark.core import runtime

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job

__all__ = ["JobHandle", "run_in_background"]


class JobHandle:
    """A job running on rivermark's background loop: wait for it, stop it, read how it ended.

    Shown as a cell's result it displays the job's progress, as the job does.
    """

    def __init__(self, job: Job, future: concurrent.futures.Future[None]) -> None:
        self.job = job
        self._future = future

    @property
    def done(self) -> bool:
        """Whether the run has ended (finished, stopped or failed)."""
        return self._future.done()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run has ended; False if ``timeout`` seconds passed first."""
        try:
            self._future.exception(timeout)
        except concurrent.futures.TimeoutError:
            return False
        except concurrent.futures.CancelledError:
            pass
        return True

    def result(self, timeout: float | None = None) -> None:
        """Wait for the run to end and raise what it raised, if anything."""
        self._future.result(timeout)

    def stop(self, savepoint: bool = False, timeout: float | None = None) -> bool:
        """Stop the job gracefully (final checkpoint) and wait until it has ended.

        With ``savepoint=True`` the final checkpoint is a savepoint (``Job.stop``);
        ``timeout`` bounds the wait.  Returns whether the run has ended.
        """
        self.job.stop(savepoint=savepoint, timeout=timeout)
        try:
            self._future.exception(timeout)
        except concurrent.futures.TimeoutError:
            return False
        return True

    def savepoint(self) -> int:
        """Take a savepoint at the job's next barrier; its epoch (``Job.savepoint``)."""
        return self.job.savepoint()

    def _ipython_display_(self) -> None:
        display(self.job)

    def __repr__(self) -> str:
        state = "running" if not self.done else "ended"
        return f"JobHandle({self.job!r}, {state})"


def run_in_background(job: Job) -> JobHandle:
    """Start ``job`` on rivermark's background loop, moving its nodes off the calling loop."""
    here = asyncio.get_running_loop()
    there = runtime.background_loop()
    for node in job.nodes[0].walk() if job.nodes else ():
        # the whole connected graph: display sinks added after the job was built too
        if node.loop is here:
            node.loop = there
    return JobHandle(job, asyncio.run_coroutine_threadsafe(job.run_async(), there))
