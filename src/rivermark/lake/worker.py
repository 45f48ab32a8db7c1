"""A file sink's writer thread: convert and write one full buffer while the loop fills the next.

Converting records to Arrow and encoding Parquet take most of a file sink's
time; pyarrow releases the GIL while it encodes and writes, so this work
runs on one thread per sink, off the loop that runs the pipeline.  One write
at a time, in the order submitted: :meth:`BackgroundWriter.submit` first
waits for the write in flight, so at most one buffer is being written while
the next fills, and an error of the write surfaces (re-raised on the loop
thread, by the next ``update`` or by ``pre_commit``) before anything else is
written.  ``pre_commit`` calls :meth:`BackgroundWriter.wait` before it closes
the epoch's files, so the checkpoint's handle lists only complete files.

Rows that do not fit the schema are not the writer thread's to judge: the
sink's error policy (``on_error``, which may call user code) runs on the loop
thread, so the sink's write function hands such rows back and the sink passes
them through its policy after the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

logger = logging.getLogger(__name__)

__all__ = ["BackgroundWriter"]


class BackgroundWriter:
    """One thread, one write in flight; errors re-raised on the thread that waits."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: Future[None] | None = None

    def submit(self, write: Callable[[], None]) -> None:
        """Run ``write`` on the writer thread, after the write in flight (whose error is raised)."""
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rivermark-lake")
        self._inflight = self._pool.submit(write)

    def wait(self) -> None:
        """Wait for the write in flight; raise its error (already one line, naming the sink)."""
        fut, self._inflight = self._inflight, None
        if fut is not None:
            fut.result()

    def drain(self) -> None:
        """Wait for the write in flight, its error logged, not raised (a restore or close follows)."""
        try:
            self.wait()
        except Exception:
            logger.debug("%s: a write failed before the sink was reset", self.label, exc_info=True)

    def close(self) -> None:
        """Drain and stop the thread (idempotent)."""
        self.drain()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
