"""The checkpoint protocol: one ordered sequence, :meth:`CheckpointCycle.checkpoint`.

The crash points and what recovery does at each are in
``docs/checkpointing.md``:

1. pause every source (``src.pause()``), after waiting for the checkpoint
   still in flight, if any (counted in ``checkpoint_waits``);
2. ``await src.wait_quiescent()`` for each, then wait until every node's
   ``in_flight`` counter is 0 (asynchronous work has drained);
3. synchronously, on the loop thread, take the snapshot: an immutable view
   of every stateful node's state (pickled bytes, or a ``KeyedState``'s
   changed keys), every source's ``position()``, every checkpointed sink's
   ``pre_commit(epoch)`` handle; fault point ``before-resume``, resume the
   sources (background mode);
4. serialise the views and write them through the store in a worker thread:
   fault point ``before-write``, state files (fsynced), then the manifest
   atomically (temp name, fsync, rename, fsync dir); fault points
   ``after-state-files`` and ``after-manifest``;
5. post-commit, only once the manifest is durable: every sink's
   ``commit(epoch, handle)``, every source's ``checkpoint_durable(epoch,
   position)`` (fault point ``after-sink-commit``), then prune to ``keep``
   checkpoints.

In blocking mode (``background=False``, a sink that does not seal its
epoch at ``pre_commit``, the start and the final checkpoint) steps 4-5 run
with the sources paused and they resume after step 5.
When a step fails (unpicklable state, a failed write, a sink that raises),
the sources are not resumed (or, after a failed background write, stopped):
every source is stopped and every sink
closed before the error (:class:`CheckpointWriteError`) leaves the job and
before the directory's lock is released; the torn checkpoint is removed.

The cycle tells the job's listeners (:mod:`.listeners`) as it goes: a
checkpoint begun, the nodes' counts at its barrier, completed or failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rivermark.checkpoint.errors import CheckpointLockedError, CheckpointWriteError
from rivermark.checkpoint.faults import fault_point
from rivermark.checkpoint.protocol.counts import totals
from rivermark.checkpoint.protocol.listeners import CheckpointFailure, CheckpointInfo, Listeners
from rivermark.checkpoint.protocol.roles import JobGraph
from rivermark.checkpoint.protocol.shutdown import Shutdown
from rivermark.checkpoint.state.keyed import Chains, KeyedView, checkpoint_kind, keyed_attrs
from rivermark.checkpoint.state.rocks.backend import files_of
from rivermark.checkpoint.state.views import StateView, unpicklable_part, view_of
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.store import Store
from rivermark.errors import first_line
from rivermark.sinks.base import CheckpointedSink
from rivermark.sources.base import RecordBudget

logger = logging.getLogger(__name__)

__all__ = ["CheckpointCycle", "RunInfo"]

#: how often the barrier looks whether the nodes' asynchronous work has drained
_POLL = 0.0005


@dataclass
class _Clock:
    """When a checkpoint paused the sources, resumed them and began its write."""

    paused_at: float
    resumed_at: float | None = None
    write_started: float | None = None

    def timing(self) -> dict[str, float]:
        """The manifest's ``timing``, taken as it is serialised: seconds since the pause
        (end to end), since the write began, and of them the sources held."""
        now = time.monotonic()
        return {
            "duration": now - self.paused_at,
            "write": now - (self.write_started or now),
            "pause": (self.resumed_at or now) - self.paused_at,
        }


@dataclass
class _Pending:
    """A checkpoint between its barrier and its durable write.

    Its manifest's ``timer`` is the clock's, never a method of the pending
    checkpoint: that would make a reference cycle, and the views (a whole
    RocksDB key cache handed over, a keyed delta) would then stay in memory
    until the garbage collector's next full collection, not until the write
    completes.
    """

    epoch: int
    manifest: Manifest
    #: node id -> pickled state, or an immutable view serialised in the background
    views: dict[str, bytes | StateView]
    positions: dict[str, Any]
    handles: dict[str, Any]
    clock: _Clock


@dataclass
class RunInfo:
    """What every checkpoint of a run records of the run (set at its start)."""

    #: unix time the run started
    started: float | None = None
    #: the epoch it resumed from (None: it started fresh)
    resumed_from: int | None = None
    #: node id -> the id its state had before a rename
    renamed: Mapping[str, str] | None = None
    #: node id -> the counts the restored checkpoint carried
    carried: Mapping[str, Sequence[int]] | None = None


class CheckpointCycle:
    """The checkpoint protocol of one job (see the module docs), and what it counts.

    Made once per job from its store and roles; it holds the job's
    ``epoch`` (the newest durable checkpoint), the checkpoint in flight (at
    most one), and the backpressure counts (``waits``, ``wait_seconds``).
    """

    def __init__(
        self,
        store: Store,
        roles: JobGraph,
        fingerprint: dict[str, str],
        keyed: Chains,
        shutdown: Shutdown,
        listeners: Listeners,
        *,
        background: bool,
        keep: int,
        budget: RecordBudget | None,
        wake_up: Callable[[], None],
    ) -> None:
        self.store = store
        self.roles = roles
        self.fingerprint = fingerprint
        self.keyed = keyed
        self.shutdown = shutdown
        self.listeners = listeners
        #: write checkpoints after the sources resumed (see :meth:`checkpoint`)
        self.background = background
        self.keep = keep
        self.budget = budget
        self._wake_up = wake_up
        #: the newest durable checkpoint (0: none yet)
        self.epoch = 0
        #: the epoch of the newest savepoint this job wrote (None: none yet)
        self.last_savepoint: int | None = None
        self.run = RunInfo()
        #: the checkpoint being written in the background (at most one)
        self.in_flight: asyncio.Future[None] | None = None
        #: triggers that found a checkpoint still in flight and waited (backpressure)
        self.waits = 0
        self.wait_seconds = 0.0
        self._lock: asyncio.Lock | None = None

    def begin_run(self, run: RunInfo) -> None:
        """A run starts (on its event loop): what its checkpoints record of it."""
        self.run = run
        self._lock = asyncio.Lock()

    def last_epoch_text(self) -> str:
        return f"epoch {self.epoch}" if self.epoch else "none yet"

    async def checkpoint(
        self, final: bool = False, blocking: bool = False, savepoint: bool = False
    ) -> int:
        """The checkpoint protocol, steps 1-6 (see the module docs).

        With background writes (the default where every checkpointed sink
        seals its epoch at ``pre_commit``), steps 4-5 run after the sources
        resumed, in :meth:`complete`, as the one checkpoint in flight; a
        trigger that comes while one is in flight waits for it (counted in
        ``checkpoint_waits``).  The start checkpoint (``blocking``) and the
        final one are always written with the sources paused.

        When a step fails (a node's state cannot be pickled, the store cannot
        write, a sink cannot pre-commit or commit), the sources are not
        resumed, or are stopped again: every source is stopped and every sink
        closed *before* the error leaves the job, so nothing runs on once the
        job reports the failure and releases its lock.  Nothing of the failed
        epoch is committed, and a checkpoint whose write failed is removed.
        """
        assert self._lock is not None
        async with self._lock:
            await self._wait_for_in_flight()
            epoch = self.epoch + 1
            paused_at = time.monotonic()
            self.listeners.checkpoint_begun(epoch, savepoint)
            # (1) pause
            for s in self.roles.sources:
                s.pause()
            ok = False
            background = self.background and not final and not blocking
            try:
                await self.quiesce()  # (2)
                # (3) snapshot, synchronously on the loop thread
                pending = self._barrier(epoch, paused_at, savepoint, final)
                if not background:
                    # (4)-(5) with the sources paused
                    await self.complete(pending)
                    if final:
                        await self.shutdown_sources()
                ok = True
            finally:
                if ok:
                    # (6) resume
                    fault_point("before-resume")
                    for s in self.roles.sources:
                        s.resume()
                    if background:
                        pending.clock.resumed_at = time.monotonic()
                        self.in_flight = asyncio.ensure_future(self.complete(pending))
                        self.in_flight.add_done_callback(lambda _: self._wake_up())
                else:
                    await self.shutdown.stop_everything()
            return epoch

    def _barrier(self, epoch: int, paused_at: float, savepoint: bool, final: bool) -> _Pending:
        """Step 3: an immutable view of every node's state, positions, sink handles (pre-commit)."""
        id_of = self.roles.id_of
        views = self.snapshot_states(epoch, base=savepoint, final=final)
        positions = {id_of(s): s.position() for s in self.roles.sources}
        if self.budget is not None:
            self.budget.refill()  # the next record-count checkpoint counts from here
        handles = {id_of(k): self._pre_commit(k, epoch) for k in self.roles.sinks}
        counts = totals(self.roles.nodes, id_of, self.run.carried or {})
        renamed = self.run.renamed or {}
        manifest = Manifest(
            epoch=epoch,
            time=time.time(),
            fingerprint=self.fingerprint,
            positions=positions,
            sinks=handles,
            chains={
                nid: self.keyed.link(v) for nid, v in views.items() if isinstance(v, KeyedView)
            },
            files=files_of(views),
            savepoint=savepoint,
            run={"started": self.run.started, "resumed_from": self.run.resumed_from},
            counts=counts,
            renamed={n: o for n, o in renamed.items() if n in self.fingerprint},
        )
        self.listeners.node_counts(epoch, counts)
        clock = _Clock(paused_at)
        pending = _Pending(epoch, manifest, views, positions, handles, clock)
        manifest.timer = clock.timing
        return pending

    async def _wait_for_in_flight(self) -> None:
        """At most one checkpoint in flight: a trigger waits for it (backpressure, counted)."""
        if self.in_flight is None:
            return
        waited = time.monotonic()
        if not self.in_flight.done():
            self.waits += 1
        await self.await_in_flight()
        self.wait_seconds += time.monotonic() - waited

    async def fail_if_a_node_failed(self) -> None:
        """Stop the sources and raise if a node has failed for good (see :class:`Shutdown`)."""
        failure = self.shutdown.node_failure()
        if failure is not None:
            await self.shutdown_sources()
            raise failure

    async def settle_in_flight(self) -> None:
        """Let a background write that is still running end (the job is failing anyway)."""
        task, self.in_flight = self.in_flight, None
        if task is not None:
            try:
                await asyncio.shield(task)
            except BaseException as e:
                # the job reports the failure that stopped it; this one is a line beside
                # it (a full disk fails both), its traceback only at DEBUG
                logger.warning(
                    "the checkpoint in flight failed too: %s: %s", type(e).__name__, first_line(e)
                )
                logger.debug("the checkpoint in flight failed", exc_info=True)

    async def shutdown_sources(self) -> None:
        """Let the checkpoint in flight end, then stop every source and close every sink."""
        await self.settle_in_flight()
        await self.shutdown.stop_sources()

    async def quiesce(self) -> None:
        """Step 2: every record the sources emitted has been fully processed, none failed."""
        for s in self.roles.sources:
            await s.wait_quiescent()
        while any(n.in_flight for n in self.roles.nodes):
            await self.fail_if_a_node_failed()
            await asyncio.sleep(_POLL)
        # a record that failed (source or node) may have left part of its
        # effects in the graph's state: never snapshot after that
        await self.fail_if_a_node_failed()

    async def await_in_flight(self) -> None:
        """Wait for the checkpoint in flight; on its failure stop everything and raise."""
        task, self.in_flight = self.in_flight, None
        if task is None:
            return
        try:
            await asyncio.shield(task)
        except BaseException:
            await self.shutdown.stop_everything()
            raise

    async def complete(self, p: _Pending) -> None:
        """Steps 4-5: the durable write, then the post-commit (sinks, sources, prune)."""
        loop = asyncio.get_running_loop()
        p.clock.write_started = time.monotonic()
        try:
            # (4) serialise and write durably in one trip to the worker thread
            # (fault points before-write / after-state-files / after-manifest)
            states = await loop.run_in_executor(None, self._write, p)
        except CheckpointLockedError as e:
            # the lock (lease) was lost: another job may own the store now,
            # so nothing of it is touched, torn files included
            self._failed(p.epoch, e)
            raise
        except CheckpointWriteError as e:
            self._failed(p.epoch, e)
            await self.shutdown.remove_torn(p.epoch)
            raise
        except Exception as e:
            self._failed(p.epoch, e)
            await self.shutdown.remove_torn(p.epoch)
            raise CheckpointWriteError(
                f"Job: checkpoint {p.epoch} could not be written to {self.store!r} "
                f"({type(e).__name__}: {e}); every source and sink was stopped and "
                f"nothing of checkpoint {p.epoch} was committed. The last complete "
                f"checkpoint ({self.last_epoch_text()}) is intact: fix the cause "
                "(free disk space, restore write permission) and run again to resume"
            ) from e
        fault_point("after-manifest")
        self.epoch = p.epoch
        if p.manifest.savepoint:
            self.last_savepoint = p.epoch
        for v in p.views.values():
            if isinstance(v, KeyedView):
                self.keyed.written(v, p.epoch)
        # (5) post-commit: only now does the checkpoint count
        id_of = self.roles.id_of
        for k in self.roles.sinks:
            k.commit(p.epoch, p.handles[id_of(k)])
        for s in self.roles.sources:
            s.checkpoint_durable(p.epoch, p.positions[id_of(s)])
        fault_point("after-sink-commit")
        try:
            await loop.run_in_executor(None, self.store.prune, self.keep)
        except Exception as e:
            # checkpoint p.epoch is complete; old ones stay until a later prune
            # succeeds (a store that is really gone fails the next write)
            self._failed(p.epoch, e, fatal=False, what="pruning older checkpoints")
            logger.warning(
                "checkpoint %d written, but older checkpoints could not be pruned from %r "
                "(%s: %s); they are removed by a later checkpoint",
                p.epoch, self.store, type(e).__name__, e,
            )  # fmt: skip
        self._completed(p, states)

    def _completed(self, p: _Pending, states: dict[str, bytes]) -> None:
        # the figures the manifest holds (one definition everywhere); a store that
        # did not serialise it through to_json gets them now
        timing = p.manifest.timing or p.clock.timing()
        info = CheckpointInfo(
            epoch=p.epoch,
            time=p.manifest.time,
            duration=timing["duration"],
            pause=timing["pause"],
            write=timing["write"],
            size=sum(len(b) for b in states.values()),
            kind="savepoint" if p.manifest.savepoint else checkpoint_kind(p.views.values()),
            sizes={nid: len(b) for nid, b in states.items()},
        )
        self.listeners.checkpoint_completed(info)
        logger.info(
            "%s %d written: %d state files, %d bytes, in %.3f s end to end "
            "(write %.3f s, sources paused %.3f s)",
            "savepoint" if p.manifest.savepoint else "checkpoint",
            p.epoch, len(states), info.size, info.duration, info.write, info.pause,
            extra={
                "epoch": p.epoch,
                "position": p.positions,
                "duration_seconds": round(info.duration, 6),
                "write_seconds": round(info.write, 6),
                "pause_seconds": round(info.pause, 6),
                "size_bytes": info.size,
            },
        )  # fmt: skip

    def _failed(self, epoch: int, e: BaseException, fatal: bool = True, what: str = "") -> None:
        reason = f"{what + ': ' if what else ''}{type(e).__name__}: {str(e)[:300]}"
        self.listeners.checkpoint_failed(CheckpointFailure(epoch, time.time(), reason, fatal))

    def _write(self, p: _Pending) -> dict[str, bytes]:
        """Serialise ``p``'s views and write the checkpoint (in the worker thread)."""
        states = {nid: v if isinstance(v, bytes) else v.serialise() for nid, v in p.views.items()}
        fault_point("before-write")
        self.store.write_checkpoint(p.manifest, states)
        return states

    def snapshot_states(
        self, epoch: int, base: bool = False, final: bool = False
    ) -> dict[str, bytes | StateView]:
        """Pickle every stateful node's state; a failure names the node and the type.

        With ``base`` (a savepoint) keyed state is written whole, not as a delta.
        The ``final`` checkpoint (written with the sources held) defers a due
        compaction within bounds (``Chains.view``'s ``defer``): it writes the
        changes since the last checkpoint, and the next run's first
        checkpoint compacts.
        """
        id_of = self.roles.id_of
        states: dict[str, bytes | StateView] = {}
        current = [(n, n.get_state()) for n in self.roles.stateful]
        # every keyed chain is compacted at the same barrier (see Chains.compaction_due)
        compact = not final and any(
            self.keyed.compaction_due(id_of(n), state, self.epoch)
            for n, state in current
            if keyed_attrs(state)
        )
        for n, state in current:
            nid = id_of(n)
            try:
                # keyed state: O(changed keys), the rest of the state is pickled here
                states[nid] = view_of(
                    self.keyed,
                    nid,
                    state,
                    epoch,
                    self.epoch,
                    base=base,
                    compact=compact,
                    defer=final and not base,
                )
            except Exception as e:
                where, bad = unpicklable_part(state)
                raise CheckpointWriteError(
                    f"Job: checkpoint {epoch}: the state of node {nid} {n!r} "
                    f"cannot be pickled: {where} is a {type(bad).__module__}."
                    f"{type(bad).__qualname__} ({type(e).__name__}: {e}); "
                    "keep only picklable values (numbers, strings, containers, dataclasses) "
                    "in the node's state, e.g. not open files, locks or generators"
                ) from e
        return states

    def _pre_commit(self, sink: CheckpointedSink, epoch: int) -> object:
        try:
            return sink.pre_commit(epoch)
        except OSError as e:
            raise CheckpointWriteError(
                f"Job: checkpoint {epoch}: sink {self.roles.id_of(sink)} {sink!r} could not make "
                f"its output durable ({type(e).__name__}: {e}); every source and sink was "
                f"stopped. The last complete checkpoint ({self.last_epoch_text()}) is intact: "
                "fix the cause (free disk space, restore write permission) and run again"
            ) from e
