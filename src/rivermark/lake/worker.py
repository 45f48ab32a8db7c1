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

On object storage the sink's other calls to the store (closing and
publishing files, its lock, Delta commits) run on the same thread through
:meth:`BackgroundWriter.call`, and every wait for the thread has a deadline
(the sink's ``timeout``): a store that stops answering raises
:class:`NoAnswerError` on the loop thread within the deadline, however long
the client libraries would retry.  The thread, blocked on a dead socket, is
then abandoned (a daemon thread: it never holds up the end of the process)
and every later call fails at once (the ``rivermark`` command then ends its
process without waiting for it: :func:`abandoned`).

Rows that do not fit the schema are not the writer thread's to judge: the
sink's error policy (``on_error``, which may call user code) runs on the loop
thread, so the sink's write function hands such rows back and the sink passes
them through its policy after the wait.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_future
from typing import TypeVar, cast

logger = logging.getLogger(__name__)

__all__ = ["BackgroundWriter", "NoAnswerError", "abandoned"]

T = TypeVar("T")

#: writer threads given up on: blocked in a call to a store that stopped answering
_abandoned: list[threading.Thread] = []


def abandoned() -> int:
    """How many writer threads of this process were given up on and are still blocked.

    The ``rivermark`` command ends its process at once when there are any:
    the interpreter's own shutdown would stop such a thread inside native
    code (deltalake's Rust client), which crashes the process.
    """
    return sum(t.is_alive() for t in _abandoned)


class NoAnswerError(TimeoutError):
    """The writer thread did not finish a call within the deadline (the store did not answer)."""


class BackgroundWriter:
    """One thread, one write in flight; errors re-raised on the thread that waits.

    ``deadline``: seconds any wait for the thread may last (``None``: no
    limit, for local disks).
    """

    def __init__(self, label: str, deadline: float | None = None) -> None:
        self.label = label
        self.deadline = deadline
        self._queue: queue.SimpleQueue[tuple[Future[object], Callable[[], object]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._inflight: Future[object] | None = None
        #: set once a deadline passed: the thread is abandoned, every later call fails
        self._stuck: str | None = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            fut, fn = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:  # re-raised on the thread that waits
                    fut.set_exception(e)

    def _put(self, fn: Callable[[], object]) -> Future[object]:
        if self._stuck is not None:
            raise NoAnswerError(self._stuck)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"rivermark-lake {self.label}", daemon=True
            )
            self._thread.start()
        fut: Future[object] = Future()
        self._queue.put((fut, fn))
        return fut

    def _result(self, fut: Future[object]) -> object:
        """``fut``'s result, waiting at most the deadline (then the thread counts as stuck)."""
        done, _ = wait_for_future([fut], timeout=self.deadline)
        if not done:
            self._stuck = f"no answer within the timeout of {self.deadline:g} s"
            if self._thread is not None:
                _abandoned.append(self._thread)
                self._queue.put(None)  # no call follows: the thread ends once this one returns
            raise NoAnswerError(self._stuck)
        return fut.result()

    def submit(self, write: Callable[[], None]) -> None:
        """Run ``write`` on the writer thread, after the write in flight (whose error is raised)."""
        self.wait()
        self._inflight = self._put(write)

    def wait(self) -> None:
        """Wait for the write in flight; raise its error (already one line, naming the sink)."""
        fut, self._inflight = self._inflight, None
        if fut is not None:
            self._result(fut)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` after the write in flight; on the writer thread when there is a deadline."""
        self.wait()
        if self.deadline is None or threading.current_thread() is self._thread:
            return fn()
        return cast(T, self._result(self._put(fn)))  # fn's own result

    def drain(self) -> None:
        """Wait for the write in flight, its error logged, not raised (a restore or close follows)."""
        try:
            self.wait()
        except Exception:
            logger.debug("%s: a write failed before the sink was reset", self.label, exc_info=True)

    @property
    def stuck(self) -> bool:
        """A deadline passed: the store did not answer, the thread is abandoned."""
        return self._stuck is not None

    def close(self, cleanup: Callable[[], None] | None = None, *, down: bool = False) -> None:
        """Drain, run ``cleanup`` (closing files, releasing the lease) within the deadline, stop.

        When the store did not answer (a deadline passed, or ``down``),
        ``cleanup`` runs on a thread of its own that nobody waits for, so that
        the job ends at once, and a stuck writer thread is left behind, not
        joined.  Idempotent.
        """
        self.drain()
        if cleanup is not None and self._stuck is None and not down:
            try:
                self.call(cleanup)
            except Exception:
                logger.debug("%s: closing failed", self.label, exc_info=True)
        elif cleanup is not None:
            logger.info("%s: the store does not answer; not waiting for it to close", self.label)
            threading.Thread(target=cleanup, name=f"rivermark-lake-close {self.label}",
                             daemon=True).start()  # fmt: skip
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)  # a stuck thread ends once its call returns
            if self._stuck is None:
                thread.join(self.deadline)
