"""The loop of a job's run: start the sources, checkpoint when due, end.

:class:`RunLoop` starts the sources (after the checkpoint of a fresh start),
then turns until the input is exhausted or a stop is asked: it takes the
checkpoints that are due (``every``, ``every_batches``) or asked for
(:mod:`.requests`), notices a failed node, source or background write,
lets the nodes pass on what they still hold when the input ends, and ends
with the final checkpoint (:meth:`RunLoop.finish`).  Each checkpoint is
the :class:`~rivermark.checkpoint.protocol.cycle.CheckpointCycle`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from rivermark.checkpoint.faults import hold_before_end
from rivermark.checkpoint.protocol.bootstrap import Bootstrap
from rivermark.checkpoint.protocol.cycle import CheckpointCycle
from rivermark.checkpoint.protocol.requests import Requests
from rivermark.checkpoint.protocol.roles import JobGraph
from rivermark.checkpoint.protocol.runstate import signal_reason
from rivermark.core import runtime
from rivermark.core.config import ErrorPolicy
from rivermark.core.contracts import JobAware
from rivermark.core.inputend import EndsWithInput
from rivermark.core.node import Stream
from rivermark.execution import plan as execution_plan
from rivermark.sources.base import RecordBudget, Source

logger = logging.getLogger(__name__)

__all__ = ["RunLoop", "adopt_nodes", "freeze_long_lived", "stop_on_signals"]

#: how often a job whose input is exhausted looks whether its nodes still hold records
_DRAIN_POLL = 0.001


def freeze_long_lived() -> bool:
    """Before the sources start: leave what is alive now out of full collections.

    The graph, its operators' containers (the open windows' mapping and
    heap, a ``KeyedState``, restored state) live as long as the job; a
    generation-2 collection traverses every container it tracks, and a
    mapping of a million windows made each one last most of a second.
    ``gc.freeze()`` moves them to the permanent generation, which no
    collection traverses; what they reference stays alive through them.
    The job ends with ``gc.unfreeze()``, so garbage made before it started
    is collectable again.  ``RIVERMARK_GC_FREEZE=0`` (or ``gc.disable()``)
    leaves the collector as it is.
    """
    if os.environ.get("RIVERMARK_GC_FREEZE", "1") == "0" or not gc.isenabled():
        return False
    gc.freeze()
    return True


def adopt_nodes(
    roles: JobGraph, job_id: str, on_error: ErrorPolicy | None, emit_roots: list[Stream]
) -> None:
    """What a job sets on its nodes: job id, failure reporting, counting, error policy."""
    for node in [*roles.sinks, *roles.sources]:
        if isinstance(node, JobAware) and node.job_id is None:
            node.job_id = job_id
    for n in roles.nodes:
        # the job reports a node's or source's failure itself, once (see Shutdown)
        n.log_failures = False
        if on_error is not None and n.on_error is None:
            n.on_error = on_error
    for root in emit_roots:
        execution_plan.count_emits(root)


class RunLoop:
    """One job's run loop (see the module docs); the job asks it to stop."""

    def __init__(
        self,
        roles: JobGraph,
        cycle: CheckpointCycle,
        requests: Requests,
        *,
        interval: float | None,
        budget: RecordBudget | None,
    ) -> None:
        self.roles = roles
        self.cycle = cycle
        self.requests = requests
        self.interval = interval
        self.budget = budget
        #: roots fed by ``emit`` (not sources): the job runs until ``stop()``
        self.emit_roots = [n for n in roles.nodes if not n.upstreams and not isinstance(n, Source)]
        #: a stop was asked for (the run ends with its final checkpoint)
        self.stop_requested = False
        #: ``stop(savepoint=True)``: the final checkpoint is a savepoint
        self.stop_savepoint = False
        self._input_ended = False
        self._wake: asyncio.Event | None = None
        #: whether this run moved the objects alive at its start out of the
        #: garbage collector's reach (see freeze_long_lived)
        self._gc_frozen = False
        #: the sources of tables read to their end before the others start (refused here
        #: when a table's source cannot be)
        self.bootstrap = Bootstrap(roles)

    def begin(self) -> None:
        """A run begins (on its event loop)."""
        self._wake = asyncio.Event()

    def wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def answer_requests(self, failure: BaseException | None) -> None:
        """Answer the ``checkpoint()``/``savepoint()`` calls the run did not serve."""
        cycle = self.cycle
        self.requests.answer(failure, cycle.epoch, cycle.last_savepoint, cycle.last_epoch_text())

    async def start_sources(self, fresh: bool) -> None:
        """Fix the sources' start positions, checkpoint a ``fresh`` start, then let them run."""
        for s in self.roles.sources:
            # concrete start positions (e.g. Kafka offsets for "latest")
            await s.prepare()
        # a table's bootstrap: its sources note where their input ends now; the
        # other sources start once those have read that far (see .bootstrap)
        await self.bootstrap.begin()
        if fresh:
            # epoch of the configured start: a crash before the first interval
            # checkpoint then rolls sinks back to where this run began and
            # replays the sources from where it began; durable before any
            # source runs, so no output exists that it does not account for
            await self.cycle.checkpoint(blocking=True)
        self._gc_frozen = freeze_long_lived()
        for s in self.roles.sources:
            if not self.bootstrap.holds(s):
                self._start(s)

    def _start(self, s: Source) -> None:
        s.budget = self.budget
        s.on_finished(self.wake_up)  # the end of input wakes the job
        s.start()

    def end(self) -> None:
        """However the run ended: the sources' budgets go, the collector sees everything."""
        for s in self.roles.sources:
            s.budget = None
        if self._gc_frozen:
            gc.unfreeze()  # what was long-lived for this run is collectable again
            self._gc_frozen = False

    async def main(self) -> None:
        """Turn until the input is exhausted (and drained) or a stop is asked."""
        cycle = self.cycle
        sources = self.roles.sources
        last = time.monotonic()
        budget = self.budget
        while True:
            if cycle.in_flight is not None and cycle.in_flight.done():
                await cycle.await_in_flight()  # raises if the background write failed
            await cycle.fail_if_a_node_failed()
            failed = [s for s in sources if s.error]
            if failed:
                await cycle.shutdown_sources()
                raise cycle.shutdown.source_failure(failed[0])
            if self.bootstrap.ready() and not self.stop_requested:
                for s in self.bootstrap.held:
                    self._start(s)  # the tables' sources caught up
            exhausted = not self.emit_roots and all(s.finished for s in sources)
            if exhausted and not self.stop_requested and not self._input_ended:
                await self._end_of_input()
            # input exhausted: the nodes first pass on what they still hold
            # (timers, buffers, asynchronous work), then the final checkpoint
            draining = exhausted and not self.stop_requested and self._held_back()
            if self.stop_requested or (exhausted and not draining):
                await self.finish()
                self.answer_requests(None)  # served by the final checkpoint
                return
            await self.requests.serve(self._take, lambda: cycle.in_flight)
            due = self.interval is not None and time.monotonic() - last >= self.interval
            if budget is not None and budget.left <= 0:
                due = True  # a source spent the record budget and paused itself
            if due:
                await cycle.checkpoint()
                last = time.monotonic()
            await self._wait(draining, last)

    async def _take(self, savepoint: bool) -> int:
        return await self.cycle.checkpoint(savepoint=savepoint)

    async def _wait(self, draining: bool, last: float) -> None:
        """Sleep until woken, the next interval checkpoint is due, or the next poll."""
        assert self._wake is not None
        # a node that failed in background work is noticed within 50 ms
        timeout = _DRAIN_POLL if draining else 0.05
        if self.interval is not None:
            timeout = min(timeout, max(0.0, self.interval - (time.monotonic() - last)))
        self._wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _end_of_input(self) -> None:
        """Every source is exhausted: nodes that wait for more input (event time) finish now."""
        await hold_before_end()  # a crash test that still owes kills holds the job here
        self._input_ended = True
        for n in self.roles.nodes:
            if isinstance(n, EndsWithInput):
                await runtime.gather_results(n.end_of_input())

    def _held_back(self) -> bool:
        """Whether a node still holds records it will pass on by itself, or work in flight."""
        return any(n.emits_later() or n.in_flight for n in self.roles.nodes)

    async def finish(self) -> None:
        """Final checkpoint with the sources paused, then stop and close everything.

        It is a savepoint after ``stop(savepoint=True)`` or while a
        ``savepoint()`` call waits for one.
        """
        await hold_before_end()  # a crash test that still owes kills holds the job here
        savepoint = self.stop_savepoint or self.requests.savepoint_waiting()
        await self.cycle.checkpoint(final=True, savepoint=savepoint)

    def stop_here(self) -> None:
        """A stop asked by a record's processing (on the loop): no later record is emitted."""
        for s in self.roles.sources:
            s.pause()
        assert self._wake is not None
        self._wake.set()


#: ``Job.stop(savepoint, timeout, reason)``
Stop = Callable[[bool, "float | None", str], bool]


def stop_on_signals(stop: Stop, cycle: CheckpointCycle, savepoint: bool) -> None:
    """Make SIGINT and SIGTERM call ``stop`` (see ``Job.install_signal_handlers``)."""
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            logger.warning(
                "signal %d: stopping with a final checkpoint (send it again to stop at once)",
                signum,
            )
            threading.Thread(
                target=stop,
                args=(savepoint, None, signal_reason(signum)),
                name="rivermark-stop",
                daemon=True,
            ).start()
            return
        logger.warning(
            "signal %d again: stopping at once without a final checkpoint; "
            "the last complete checkpoint (%s) in %r is intact",
            signum,
            cycle.last_epoch_text(),
            cycle.store,
        )
        for h in logging.getLogger().handlers:
            h.flush()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
