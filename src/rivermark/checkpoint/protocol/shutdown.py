"""How a :class:`~rivermark.checkpoint.protocol.job.Job` stops its sources and sinks, and reports a failure.

At the end of a run, after a failed checkpoint (every source stopped and
every sink closed *before* the error leaves the job and the lock is
released; the torn checkpoint removed), and after a node or a source failed
for good (the failure names the node and the user function that raised).

A job holds one :class:`Shutdown`, made from its store and the graph's
roles; the checkpoint in flight stays the job's (it lets that end before it
stops the sources).
"""

from __future__ import annotations

import asyncio
import logging

from rivermark._frames import user_frame
from rivermark.checkpoint.errors import JobFailedError
from rivermark.checkpoint.protocol.roles import JobGraph
from rivermark.checkpoint.stores.store import Store
from rivermark.core.node import Stream
from rivermark.errors import NodeFailedError, context_of, describe
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["Shutdown"]

#: how long a failed job waits for each source to stop (seconds)
_STOP_WAIT = 30.0


class Shutdown:
    """Stopping the sources and sinks of a :class:`~rivermark.checkpoint.protocol.job.Job` (see module docs)."""

    def __init__(self, store: Store, roles: JobGraph) -> None:
        self.store = store
        self.roles = roles

    def node_failure(self) -> JobFailedError | None:
        """The job's failure if a node has failed for good (its ``failure``), else None.

        Such a node (e.g. a Dask ``gather`` that lost its scheduler) keeps its
        records in flight, so a barrier waiting for them would wait forever;
        no checkpoint is written after it failed.  The root cause is named,
        not a node that refused records after it.
        """
        failed = [n for n in self.roles.nodes if n.failure is not None]
        if not failed:
            return None
        root = min(failed, key=lambda n: isinstance(n.failure, NodeFailedError))
        return self.failure(root, root.failure)

    def source_failure(self, source: Source) -> JobFailedError:
        """The error for a source whose run ended with an exception."""
        return self.failure(source, source.failure)

    def failure(self, node: Stream, exc: BaseException | None) -> JobFailedError:
        """The job's failure message for ``exc``, which failed ``node``.

        A user function that raised downstream of a source is the cause, so
        the node that ran it is named, not the source that fed it the record;
        the user's own frame is shown where there is one.
        """
        resume = (
            f"the job stopped; its last complete checkpoint in {self.store!r} is intact: "
            "fix the cause and run again to resume from it"
        )
        ctx = None if exc is None else context_of(exc)
        if exc is not None and ctx is not None and isinstance(ctx.stream, Stream):
            nid = self.roles.ids.get(id(ctx.stream), "?")
            where = user_frame(exc)
            what = (
                f"node {nid} failed: {ctx.node}: user function {ctx.function!r} raised "
                f"{type(exc).__name__}: {exc} on record {ctx.record_text()}"
            )
        elif exc is not None:
            where = user_frame(exc)
            what = f"node {self.roles.id_of(node)} {node!r} failed ({describe(exc)})"
        else:
            where = None
            what = f"node {self.roles.id_of(node)} {node!r} failed"
        err = JobFailedError(f"Job: {what}" + (f" (at {where})" if where else "") + f"; {resume}")
        err.__cause__ = exc
        return err

    async def stop_sources(self) -> None:
        """Stop every source, wait until each has ended, then close every sink."""
        for s in self.roles.sources:
            s.stop()
        for s in self.roles.sources:
            if s.started:
                try:
                    await s.wait_finished()
                except Exception:
                    if s.failure is None:  # a known failure is reported by the caller
                        logger.exception("source %r failed while stopping", s)
        for k in self.roles.closing:  # a failure to close (a last flush) is the job's
            k.close()

    async def remove_torn(self, epoch: int) -> None:
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

    async def stop_everything(self) -> None:
        """After a failed checkpoint: stop every source (not resumed) and close every sink."""
        for s in self.roles.sources:
            s.stop()
        for s in self.roles.sources:
            # a source paused at the barrier is cancelled at once by stop(); one
            # that was still emitting ends at its next stop check
            if s.started and not s.finished:
                try:
                    await asyncio.wait_for(s.wait_finished(), _STOP_WAIT)
                except asyncio.TimeoutError:
                    logger.warning("source %r did not stop within %s s", s, _STOP_WAIT)
                except Exception:
                    logger.debug("source %r failed while stopping", s, exc_info=True)
        self.close_sinks()

    def close_sinks(self) -> None:
        """Close every node that holds a file or a connection (the sinks among them)."""
        for k in self.roles.closing:
            try:
                k.close()
            except Exception:
                logger.warning("node %r failed to close", k, exc_info=True)
