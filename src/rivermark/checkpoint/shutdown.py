"""How a :class:`~rivermark.checkpoint.job.Job` stops its sources and sinks, and reports a failure.

At the end of a run, after a failed checkpoint (every source stopped and
every sink closed *before* the error leaves the job and the lock is
released; the torn checkpoint removed), and after a node or a source failed
for good (the failure names the node and the user function that raised).

:class:`Shutdown` is a part of ``Job`` (its base class): it reads the job's
graph, store and the checkpoint in flight.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .._frames import user_frame
from ..core.node import Stream
from ..errors import ErrorContext, NodeFailedError, describe
from ..sinks.base import CheckpointedSink
from ..sources.base import Source
from .errors import JobFailedError
from .store import Store

# the job's messages keep the job's logger name
logger = logging.getLogger(__name__)

__all__ = ["Shutdown"]

#: how long a failed job waits for each source to stop (seconds)
_STOP_WAIT = 30.0


class Shutdown:
    """Stopping the sources and sinks of a :class:`~rivermark.checkpoint.job.Job` (its base class)."""

    # what the job sets in its __init__ (see Job)
    store: Store
    nodes: list[Stream]
    sinks: list[CheckpointedSink]
    sources: list[Source]
    _ids: dict[int, str]
    _in_flight: asyncio.Future[None] | None

    if TYPE_CHECKING:

        def id_of(self, node: Stream | CheckpointedSink) -> str: ...

    async def _fail_if_a_node_failed(self) -> None:
        """Stop the sources and raise if a node has failed for good (its ``failure``).

        Such a node (e.g. a Dask ``gather`` that lost its scheduler) keeps its
        records in flight, so a barrier waiting for them would wait forever;
        no checkpoint is written after it failed.
        """
        failed = [n for n in self.nodes if isinstance(getattr(n, "failure", None), BaseException)]
        # name the root cause, not a node that refused records after it
        failed.sort(key=lambda n: isinstance(n.failure, NodeFailedError))
        for n in failed[:1]:
            exc = n.failure
            if isinstance(exc, BaseException):
                await self._shutdown_sources()
                raise self._failed(n, exc)

    def _source_failed(self, source: Source) -> JobFailedError:
        """The error for a source whose run ended with an exception."""
        return self._failed(source, source.failure)

    def _failed(self, node: Stream, exc: BaseException | None) -> JobFailedError:
        """The job's failure message for ``exc``, which failed ``node``.

        A user function that raised downstream of a source is the cause, so
        the node that ran it is named, not the source that fed it the record;
        the user's own frame is shown where there is one.
        """
        resume = (
            f"the job stopped; its last complete checkpoint in {self.store!r} is intact: "
            "fix the cause and run again to resume from it"
        )
        ctx = getattr(exc, "rivermark_context", None)
        if exc is not None and isinstance(ctx, ErrorContext) and isinstance(ctx.stream, Stream):
            nid = self._ids.get(id(ctx.stream), "?")
            where = user_frame(exc)
            what = (
                f"node {nid} failed: {ctx.node}: user function {ctx.function!r} raised "
                f"{type(exc).__name__}: {exc} on record {ctx.record_text()}"
            )
        elif exc is not None:
            where = user_frame(exc)
            what = f"node {self.id_of(node)} {node!r} failed ({describe(exc)})"
        else:
            where = None
            what = f"node {self.id_of(node)} {node!r} failed"
        err = JobFailedError(f"Job: {what}" + (f" (at {where})" if where else "") + f"; {resume}")
        err.__cause__ = exc
        return err

    async def _settle_in_flight(self) -> None:
        """Let a background write that is still running end (the job is failing anyway)."""
        task, self._in_flight = self._in_flight, None
        if task is not None:
            try:
                await asyncio.shield(task)
            except BaseException:
                logger.warning("the checkpoint in flight failed too", exc_info=True)

    async def _shutdown_sources(self) -> None:
        await self._settle_in_flight()
        for s in self.sources:
            s.stop()
        for s in self.sources:
            if s.started:
                try:
                    await s.wait_finished()
                except Exception:
                    if s.failure is None:  # a known failure is reported by the caller
                        logger.exception("source %r failed while stopping", s)
        for k in self.sinks:
            close = getattr(k, "close", None)
            if callable(close):
                close()

    async def _remove_torn(self, epoch: int) -> None:
        """Delete what a failed write of ``epoch`` left behind (gives the space back)."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.store.delete, epoch)
        except Exception as e:
            # one line: the torn epoch has no manifest, so it is not a checkpoint
            # and the next run ignores (and removes) it
            logger.warning(
                "could not remove the torn checkpoint %d (%s: %s); without a manifest it is "
                "ignored, and removed by a later run",
                epoch, type(e).__name__, e,
            )  # fmt: skip
            logger.debug("removing the torn checkpoint %d", epoch, exc_info=True)

    async def _stop_everything(self) -> None:
        """After a failed checkpoint: stop every source (not resumed) and close every sink."""
        for s in self.sources:
            s.stop()
        for s in self.sources:
            # a source paused at the barrier is cancelled at once by stop(); one
            # that was still emitting ends at its next stop check
            if s.started and not s.finished:
                try:
                    await asyncio.wait_for(s.wait_finished(), _STOP_WAIT)
                except asyncio.TimeoutError:
                    logger.warning("source %r did not stop within %s s", s, _STOP_WAIT)
                except Exception:
                    logger.debug("source %r failed while stopping", s, exc_info=True)
        self._close_sinks()

    def _close_sinks(self) -> None:
        for k in self.sinks:
            close = getattr(k, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    logger.warning("sink %r failed to close", k, exc_info=True)
