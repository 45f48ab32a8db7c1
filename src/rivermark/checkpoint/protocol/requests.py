"""The checkpoints and savepoints a job was asked for (``Job.checkpoint()``, ``Job.savepoint()``).

A call puts a future here and wakes the job's loop; the loop takes one
checkpoint per call at its next turn (:meth:`Requests.serve`) and the
caller gets the epoch once that checkpoint is durable.  A run that ends
first answers what it still holds (:meth:`Requests.answer`): the final
checkpoint's epoch after a normal end, the failure otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rivermark.checkpoint.errors import JobFailedError

__all__ = ["Requests"]

#: takes a checkpoint (a savepoint when asked) and returns its epoch
TakeCheckpoint = Callable[[bool], Awaitable[int]]


def _resolve_when_durable(
    fut: asyncio.Future[int], epoch: int, task: asyncio.Future[None] | None
) -> None:
    """Give ``fut`` the ``epoch`` once ``task`` (its background write, if any) succeeded."""

    def done(t: asyncio.Future[None] | None = None) -> None:
        if fut.done():
            return
        if t is not None and not t.cancelled() and t.exception() is not None:
            fut.set_exception(t.exception())  # type: ignore[arg-type]
        else:
            fut.set_result(epoch)

    if task is None:
        done()
    else:
        task.add_done_callback(done)


class Requests:
    """The calls waiting for a checkpoint or a savepoint, on the job's loop."""

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[int]] = []
        #: the requests among ``_waiting`` that asked for a savepoint
        self._savepoint_wanted: set[asyncio.Future[int]] = set()

    def add(self, loop: asyncio.AbstractEventLoop, savepoint: bool) -> asyncio.Future[int]:
        """A new request; its future gets the epoch (or the failure)."""
        fut: asyncio.Future[int] = loop.create_future()
        self._waiting.append(fut)
        if savepoint:
            self._savepoint_wanted.add(fut)
        return fut

    def savepoint_waiting(self) -> bool:
        """Whether a ``savepoint()`` call waits (the final checkpoint is then a savepoint)."""
        return any(f in self._savepoint_wanted and not f.done() for f in self._waiting)

    async def serve(
        self, take: TakeCheckpoint, in_flight: Callable[[], asyncio.Future[None] | None]
    ) -> None:
        """Take the checkpoints asked for; each caller gets its epoch once durable."""
        for fut in self._waiting[:]:
            self._waiting.remove(fut)
            savepoint = fut in self._savepoint_wanted
            self._savepoint_wanted.discard(fut)
            try:
                epoch = await take(savepoint)
            except BaseException as e:  # hand the failure to the caller
                if not fut.done():
                    fut.set_exception(e)
                raise
            _resolve_when_durable(fut, epoch, in_flight())

    def answer(
        self,
        failure: BaseException | None,
        epoch: int,
        last_savepoint: int | None,
        last_epoch_text: str,
    ) -> None:
        """Answer the calls the job ended before serving.

        After a normal end the final checkpoint covers every record, so its
        epoch is the answer; after a failure, the failure.  A ``savepoint()``
        call is answered only by a savepoint: the final checkpoint is one
        when such a call was waiting.
        """
        requests, self._waiting = self._waiting, []
        wanted, self._savepoint_wanted = self._savepoint_wanted, set()
        for fut in requests:
            if fut.done():
                continue
            savepoint = fut in wanted
            # a savepoint call is answered by the final checkpoint only if it is one
            if failure is None and epoch and (not savepoint or last_savepoint == epoch):
                fut.set_result(epoch)
                continue
            what = "savepoint" if savepoint else "checkpoint"
            fut.set_exception(
                JobFailedError(
                    f"Job.{what}(): the job ended before taking it ({failure!r}); "
                    f"the last complete checkpoint is {last_epoch_text}"
                )
            )
