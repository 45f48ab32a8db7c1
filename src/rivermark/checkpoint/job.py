"""``Job``: run a graph with consistent checkpoints and exact resume.

The protocol (one ordered sequence, :meth:`Job._checkpoint`; the crash
points and what recovery does at each are in ``docs/checkpointing.md``):

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

Recovery at start (:class:`~rivermark.checkpoint.recovery.Recovery`, an
object the job holds): the newest
checkpoint that verifies is loaded (damaged ones are skipped with a
WARNING); ``set_state`` on stateful nodes, ``restore(handle)`` on
checkpointed sinks (``None`` without a checkpoint), ``seek(position)`` on
sources; then the sources start.  When the store holds checkpoints and none
verifies, the job refuses to start (:class:`NoValidCheckpointError`); on a
store without checkpoints it refuses to append to sink output that no
checkpoint accounts for (:class:`UnaccountedOutputError`).
``from_scratch=True`` sets every checkpoint aside and calls
``start_over()`` on every checkpointed sink.  Stopping the sources and sinks
and the failure messages are the job's
:class:`~rivermark.checkpoint.shutdown.Shutdown`.
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
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._runguard import check_run_allowed
from ..core import runtime
from ..core.contracts import JobAware
from ..core.inputend import EndsWithInput
from ..core.node import Stream
from ..core.timeutil import parse_interval
from ..errors import ConfigurationError
from ..execution import plan as execution_plan
from ..observe.endstate import (
    RunState,
    ended_record,
    previous_run,
    run_record,
    run_state,
    signal_reason,
)
from ..observe.metrics import Metrics
from ..observe.prometheus import MetricsServer
from ..observe.ui import UiServer
from ..sinks.base import CheckpointedSink
from ..sources.base import RecordBudget, Source
from .errors import (
    CheckpointLockedError,
    CheckpointWriteError,
    JobFailedError,
)
from .faults import fault_point, hold_before_end
from .handle import JobHandle, run_in_background
from .keyed import Chains, KeyedView, checkpoint_kind, keyed_attrs
from .manifest import Manifest
from .options import (
    check_compact_every,
    check_exactly_once,
    check_options,
    choose_background,
    derive_job_id,
)
from .recovery import Recovery, parse_savepoint_spec
from .rocks.backend import StateBackend, files_of
from .roles import JobGraph
from .shutdown import Shutdown
from .signing import Keyring, Trust
from .store import Store, open_store
from .upgrade import UpgradeRules, job_fingerprint
from .views import StateView, unpicklable_part, view_of

logger = logging.getLogger(__name__)

__all__ = ["Job", "CheckpointInfo", "CheckpointFailure"]


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint written by a running job (what the metrics report).

    The figures are the manifest's ``timing`` (seconds, up to the manifest's
    write; see :mod:`rivermark.checkpoint.manifest`): ``duration`` end to
    end, from the pause of the sources; ``write`` the durable write of the
    state files and the manifest; ``pause`` the time the sources were held
    by then (steps 1-3 for a background write; a blocking one holds them
    throughout).  ``size`` is the bytes of state written, ``sizes`` per node id;
    ``kind`` is ``"delta"`` when a node's keyed state was written as a delta,
    ``"savepoint"`` for a savepoint.
    """

    epoch: int
    time: float
    duration: float
    pause: float
    size: int
    kind: str = "full"
    sizes: dict[str, int] = field(default_factory=dict)
    write: float = 0.0


@dataclass(frozen=True)
class CheckpointFailure:
    """A checkpoint a running job could not complete (what the history shows).

    ``fatal`` failures stop the job (the write failed, or the store's lock
    was lost); a failed prune of older checkpoints is not fatal: the
    checkpoint itself is complete and a later prune removes the old ones.
    """

    epoch: int
    time: float
    reason: str
    fatal: bool = True


@dataclass
class _Pending:
    """A checkpoint between its barrier and its durable write."""

    epoch: int
    manifest: Manifest
    #: node id -> pickled state, or an immutable view serialised in the background
    views: dict[str, bytes | StateView]
    positions: dict[str, Any]
    handles: dict[str, Any]
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


_POLL = 0.0005
#: how often a job whose input is exhausted looks whether its nodes still hold records
_DRAIN_POLL = 0.001


class Job:
    """Run the whole graph of ``node`` with checkpoints in ``checkpoint``.

    The job ends when every source is exhausted, or at :meth:`stop`; a graph
    with roots fed by ``emit`` (plain ``Stream()``) runs until :meth:`stop`.

    ``every`` is the checkpoint interval (``"2s"``, ``"200ms"``, seconds, or
    ``None``); ``every_batches`` checkpoints after that many records emitted by
    the sources; ``keep`` is how many checkpoints are retained.  Running the
    same program on the same directory resumes where the last checkpoint was.
    ``allow_new_nodes=True`` lets stateful nodes added since the checkpoint
    start empty; ``rename={"old-id": "new-id"}`` restores a node's state under
    its new id; ``allow_dropped_state`` (``True`` or the ids) lets the state of
    removed nodes go; ``migrate={"node-id": fn}`` turns a node's old state into
    the state its changed code expects (see ``docs/upgrading.md``).  ``on_error`` is the default error policy of the graph's
    nodes that have none.  ``exactly_once=True`` refuses (``ConfigurationError``)
    graphs that cannot deliver it: a leaf that is neither a checkpointed sink nor
    stateful (``sink(func)``), or a source that is not replayable.
    ``from_scratch=True`` starts over explicitly: every checkpoint in the
    store is set aside (kept, not deleted), nothing is restored, and every
    checkpointed sink starts its output over (``start_over()``).
    ``from_savepoint="DIR"`` (the newest savepoint there) or ``"DIR@EPOCH"``
    restores that savepoint, verified like any checkpoint: in the job's own
    location the newer checkpoints are set aside; into an empty location it
    is first copied as that location's first checkpoint; a different location
    that holds checkpoints is refused (see ``docs/checkpointing.md``).
    ``background=True`` (the default for a local directory; ``None`` picks
    it) writes each checkpoint in a worker thread after the sources resumed; it counts only once its manifest is
    durable, and one is in flight at a time (see ``docs/checkpointing.md``).
    A node whose state holds a :class:`rivermark.KeyedState` is written as a
    delta of its changed keys; ``compact_every`` deltas (or deltas outweighing
    the base) are followed by a new base (default 20, or the environment
    variable ``RIVERMARK_COMPACT_EVERY``, which is how ``rivermark run`` is
    configured).
    ``metrics_port`` serves Prometheus metrics over HTTP at
    ``metrics_addr:metrics_port/metrics`` while the job runs (0 picks a free
    port: ``job.metrics_url``); ``job.metrics.read()`` gives the same
    figures in Python.  ``ui`` serves the live pipeline page at
    ``ui_addr:ui`` on the job's event loop (``job.ui_url``).
    ``checkpoint_key`` (a key, a list whose first key signs and the others
    are old keys still accepted, or the path of a key file; default: the
    environment variables ``RIVERMARK_CHECKPOINT_KEY`` and
    ``RIVERMARK_CHECKPOINT_KEY_FILE``) signs every checkpoint and refuses to
    resume from one that is unsigned or signed otherwise.  ``trust_store=True``
    resumes from unsigned checkpoints and loads pickled state without a
    verified signature (see ``docs/security.md``).
    ``state="rocksdb"`` keeps every node's ``KeyedState`` in RocksDB (or
    ``state={"node-id": "rocksdb"}`` some nodes'), in ``state_dir`` (locked
    while the job runs; default: a directory named after the job in this
    user's private ``<temporary directory>/rivermark-state-<uid>``, removed
    when the job ends),
    with ``state_cache`` bytes of RocksDB cache (default 256 MiB); each
    checkpoint uploads only the database files the store does not hold yet
    (see "Keyed state in RocksDB" in ``docs/checkpointing.md``).

    >>> import tempfile
    >>> from rivermark import Stream
    >>> source = Stream.from_iterable([1, 2, 3])
    >>> totals = source.accumulate(lambda acc, x: acc + x, start=0).sink_to_list()
    >>> Job(source, checkpoint=tempfile.mkdtemp(), every=None).run()
    >>> totals
    [1, 3, 6]
    """

    def __init__(
        self,
        node: Stream,
        checkpoint: str | Store = "ckpt/job1",
        every: Any = "2s",
        every_batches: int | None = None,
        keep: int = 10,
        exactly_once: bool = False,
        allow_new_nodes: bool = False,
        on_error: Any = None,
        from_scratch: bool = False,
        from_savepoint: str | os.PathLike[str] | None = None,
        background: bool | None = None,
        compact_every: int | None = None,
        metrics_port: int | None = None,
        metrics_addr: str = "127.0.0.1",
        ui: int | None = None,
        ui_addr: str = "127.0.0.1",
        checkpoint_key: Any = None,
        trust_store: bool = False,
        rename: dict[str, str] | None = None,
        allow_dropped_state: bool | Iterable[str] = False,
        migrate: dict[str, Callable[[Any], Any]] | None = None,
        state: str | dict[str, str] = "memory",
        state_dir: str | os.PathLike[str] | None = None,
        state_cache: int | str | None = None,
    ) -> None:
        check_options(node, keep, every_batches)
        #: where each node's keyed state lives: in memory, or in RocksDB (see .rocks)
        self.state_backend = StateBackend(state, state_dir, state_cache)
        #: how a restore meets a graph that changed since the checkpoint
        self.upgrade = UpgradeRules.checked(rename, allow_dropped_state, allow_new_nodes, migrate)
        self.interval: float | None = (
            None if every is None else parse_interval(every, "Job", "every")
        )
        self.every_batches = every_batches
        #: the records the sources may emit before the next checkpoint (every_batches)
        self._budget: RecordBudget | None = None
        self.keep = keep
        self.exactly_once = exactly_once
        self.allow_new_nodes = allow_new_nodes
        self.from_scratch = bool(from_scratch)
        if from_savepoint is not None and from_scratch:
            raise ConfigurationError(
                "Job: from_scratch and from_savepoint exclude each other; pass one of them"
            )
        self.from_savepoint = None if from_savepoint is None else os.fspath(from_savepoint)
        if self.from_savepoint is not None:
            parse_savepoint_spec(self.from_savepoint)  # a malformed one is refused here
        self.store: Store = open_store(checkpoint)
        self.store.trust = Trust(Keyring.configured(checkpoint_key), bool(trust_store))
        #: the graph's nodes by role (:attr:`nodes`, :attr:`sources`, :attr:`stateful`, :attr:`sinks`)
        self._roles = JobGraph.of(node)
        self.fingerprint = job_fingerprint(node)
        if every_batches is not None:
            self._budget = RecordBudget(every_batches, self._wake_up)
        #: write checkpoints after the sources resumed (see :meth:`_checkpoint`)
        self.background = choose_background(self.store, self.sinks, background)
        #: stable across restarts on the same store: names transactional ids
        self.job_id = derive_job_id(self.store)
        if exactly_once:
            check_exactly_once(self.nodes)
        #: roots fed by ``emit`` (not sources): the job runs until ``stop()``
        self._emit_roots = [n for n in self.nodes if not n.upstreams and not isinstance(n, Source)]
        self._adopt_nodes(on_error)
        #: the job's figures (read them with ``job.metrics.read()``)
        self.metrics = Metrics(self)
        self._metrics_server: MetricsServer | None = None
        if metrics_port is not None:
            self._metrics_server = MetricsServer(self.metrics, metrics_port, metrics_addr)
        self._ui: UiServer | None = None if ui is None else UiServer(self, ui, ui_addr)
        self.epoch = 0
        self.restored_epoch: int | None = None
        #: node id -> the id its state had before a rename (recorded in every checkpoint)
        self._renamed: dict[str, str] = {}
        #: the time the restored checkpoint was written (None when starting fresh)
        self.restored_time: float | None = None
        #: the positions the run resumed from (empty when starting fresh)
        self.restored_positions: dict[str, Any] = {}
        #: node id -> [records in, records out] the restored checkpoint carried
        self.restored_counts: dict[str, list[int]] = {}
        #: wall time the recovery at start took (reading, checking, set_state), seconds
        self.restore_seconds = 0.0
        #: whether the restore (or the fresh start's set-up of the sinks) finished
        self.recovered = False
        #: the most recent checkpoints written by this run, oldest first
        self.checkpoints: deque[CheckpointInfo] = deque(maxlen=100)
        #: the checkpoints of this run that failed, oldest first
        self.checkpoint_failures: deque[CheckpointFailure] = deque(maxlen=100)
        self.checkpoints_failed = 0
        self.checkpoints_written = 0
        #: unix time ``run`` started and (once it returned) ended
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop_requested = False
        #: what ``job.json`` says of this run (None before it started)
        self._job_info: dict[str, Any] | None = None
        #: how the run before this one ended (None: unknown, or the first run)
        self.previous_run: RunState | None = None
        #: who asked the job to stop (``Ctrl-C (SIGINT)``, ``rivermark stop``, ``Job.stop()``)
        self.stop_reason: str | None = None
        self._input_ended = False
        self._running = False
        self._done = threading.Event()
        self._ckpt_lock: asyncio.Lock | None = None
        self._requests: list[asyncio.Future[int]] = []
        #: the requests among ``_requests`` that asked for a savepoint
        self._savepoint_wanted: set[asyncio.Future[int]] = set()
        #: ``stop(savepoint=True)``: the final checkpoint is a savepoint
        self._stop_savepoint = False
        #: the epoch of the newest savepoint this job wrote (None: none yet)
        self.last_savepoint: int | None = None
        #: what ended the last run with an exception (None: it ended normally)
        self._ended_by: BaseException | None = None
        #: delta chains of the nodes whose state holds a ``KeyedState``
        self._keyed = Chains(self.store, check_compact_every(compact_every))
        #: whether this run moved the objects alive at its start out of the
        #: garbage collector's reach (see freeze_long_lived)
        self._gc_frozen = False
        #: what the job restores at the start of every run
        self._recovery = Recovery(
            self.store,
            self._roles,
            self.upgrade,
            self._keyed,
            self.state_backend,
            from_scratch=self.from_scratch,
            from_savepoint=self.from_savepoint,
        )
        #: stops the sources and sinks, and words the job's failures
        self._shutdown = Shutdown(self.store, self._roles)
        #: the checkpoint being written in the background (at most one)
        self._in_flight: asyncio.Future[None] | None = None
        #: triggers that found a checkpoint still in flight and waited (backpressure)
        self.checkpoint_waits = 0
        self.checkpoint_wait_seconds = 0.0

    def _adopt_nodes(self, on_error: Any) -> None:
        """What the job sets on its nodes: job id, failure reporting, counting, error policy."""
        for node in [*self.sinks, *self.sources]:
            if isinstance(node, JobAware) and node.job_id is None:
                node.job_id = self.job_id
        for n in self.nodes:
            # the job reports a node's or source's failure itself, once (see _failed)
            n.log_failures = False
            if on_error is not None and n.on_error is None:
                n.on_error = on_error
        for root in self._emit_roots:
            execution_plan.count_emits(root)

    def _recover(self) -> None:
        """Recovery at start: restore the newest checkpoint that verifies (timed)."""
        started = time.perf_counter()
        self.recovered = False
        try:
            restored = self._recovery.recover()
            self.epoch = restored.epoch
            manifest = restored.manifest
            self._renamed = {} if manifest is None else dict(manifest.renamed)
            if manifest is not None:
                self.restored_epoch = manifest.epoch
                self.restored_time = manifest.time
                self.restored_positions = dict(manifest.positions)
                self.restored_counts = dict(manifest.counts or {})
            self.recovered = True
        finally:
            self.restore_seconds = time.perf_counter() - started

    async def _fail_if_a_node_failed(self) -> None:
        """Stop the sources and raise if a node has failed for good (see :class:`Shutdown`)."""
        failure = self._shutdown.node_failure()
        if failure is not None:
            await self._shutdown_sources()
            raise failure

    async def _settle_in_flight(self) -> None:
        """Let a background write that is still running end (the job is failing anyway)."""
        task, self._in_flight = self._in_flight, None
        if task is not None:
            try:
                await asyncio.shield(task)
            except BaseException:
                logger.warning("the checkpoint in flight failed too", exc_info=True)

    async def _shutdown_sources(self) -> None:
        """Let the checkpoint in flight end, then stop every source and close every sink."""
        await self._settle_in_flight()
        await self._shutdown.stop_sources()

    @property
    def running(self) -> bool:
        """Whether the job is running now (recovered, and not ended yet)."""
        return self._running

    @property
    def stop_requested(self) -> bool:
        """Whether :meth:`stop` was called for the current run (it is stopping or stopped)."""
        return self._stop_requested

    def wait_ended(self, timeout: float | None = None) -> bool:
        """Block until the current (or next) run has ended; False if ``timeout`` passed first."""
        return self._done.wait(timeout)

    @property
    def ended_by(self) -> BaseException | None:
        """What ended the last run with an exception (None: it ended normally, or runs)."""
        return self._ended_by

    @property
    def metrics_url(self) -> str | None:
        """Where the Prometheus metrics are served (None without ``metrics_port``)."""
        return None if self._metrics_server is None else self._metrics_server.url

    @property
    def ui_url(self) -> str | None:
        """Where the live pipeline page is served (None without ``ui``)."""
        return None if self._ui is None else self._ui.url

    @property
    def nodes(self) -> list[Stream]:
        """Every node of the job's graph, in topological order."""
        return self._roles.nodes

    @property
    def sources(self) -> list[Source]:
        """The graph's sources (their positions are checkpointed)."""
        return self._roles.sources

    @property
    def stateful(self) -> list[Stream]:
        """The graph's nodes, sources excepted, whose state is checkpointed."""
        return self._roles.stateful

    @property
    def sinks(self) -> list[CheckpointedSink]:
        """The graph's checkpointed sinks."""
        return self._roles.sinks

    def id_of(self, node: Stream | CheckpointedSink) -> str:
        """The stable id the checkpoint stores ``node`` under."""
        return self._roles.id_of(node)

    def _ipython_display_(self) -> None:
        """In Jupyter: the job's progress, refreshed while it runs (``rivermark[notebook]``)."""
        from ..observe.notebook import display_job

        display_job(self)

    def __repr__(self) -> str:
        return f"Job({self.store!r}, sources={len(self.sources)}, epoch={self.epoch})"

    # ------------------------------------------------------------------ running
    def run(self) -> JobHandle | None:
        """Run until every source is exhausted or :meth:`stop` is called (blocking).

        On a thread running an event loop (a Jupyter cell) it does not block:
        the job runs on rivermark's background loop and a :class:`JobHandle`
        (``wait``, ``stop``, ``result``) is returned at once.
        """
        check_run_allowed()
        if runtime.current_loop() is not None:
            return run_in_background(self)
        loop = self.sources[0].loop if self.sources else runtime.background_loop()
        runtime.run_sync(loop, self.run_async())
        return None

    async def run_async(self) -> None:
        """Run on the current event loop until done (see :meth:`run`)."""
        check_run_allowed()
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._ckpt_lock = asyncio.Lock()
        self._done.clear()
        self.store.lock()
        self.started_at, self.ended_at = time.time(), None
        try:
            await self._start()
            if self._stop_requested:
                await self._finish()
                return
            await self._start_sources()
            await self._main_loop()
        except BaseException as e:
            # a job refused at start (or failed) releases its sinks' files and
            # locks before the checkpoint lock; closing is idempotent
            await self._settle_in_flight()
            self._shutdown.close_sinks()
            self._ended_by = e
            self._answer_requests(e)
            raise
        finally:
            await self._end()

    async def _start(self) -> None:
        """Recover, start the metrics endpoint and the page, record the job's graph."""
        if self.store.trust.keyring is None:
            logger.info(
                "checkpoints in %r are not signed: whoever can write there can change what "
                "the job resumes from; set RIVERMARK_CHECKPOINT_KEY (see docs/security.md)",
                self.store,
            )
        stateful_ids = [self.id_of(n) for n in self.stateful]
        self.state_backend.bind(self.store, self.job_id, stateful_ids)
        self._recover()
        self.state_backend.adopt(list(zip(stateful_ids, self.stateful)))
        if self._metrics_server is not None:
            self._metrics_server.start()
        if self._ui is not None:
            await self._ui.start()
        self._recovery.warn_not_replayable()
        self.previous_run = previous_run(self.store.read_job_info())
        self._job_info = {
            "fingerprint": self.fingerprint,
            "node_ids": [self.id_of(n) for n in self.nodes],
            # where 'rivermark savepoint/stop DIR' reach this run (its page)
            "control": None if self._ui is None else self._ui.local_url,
            # the run that must answer there ('rivermark stop' checks it first)
            "control_run": None if self._ui is None else self._ui.control_run,
            # how this run ended: null until it does (still null later: it was killed)
            "ended": None,
            **run_record(),
        }
        self.store.write_job_info(self._job_info)
        self._ended_by = None
        self._running = True

    async def _start_sources(self) -> None:
        """Fix the sources' start positions, checkpoint a fresh start, then let them run."""
        for s in self.sources:
            # concrete start positions (e.g. Kafka offsets for "latest")
            await s.prepare()
        if self.restored_epoch is None:
            # epoch of the configured start: a crash before the first interval
            # checkpoint then rolls sinks back to where this run began and
            # replays the sources from where it began; durable before any
            # source runs, so no output exists that it does not account for
            await self._checkpoint(blocking=True)
        self._gc_frozen = freeze_long_lived()
        for s in self.sources:
            s.budget = self._budget
            s.on_finished(self._wake_up)  # the end of input wakes the job
            s.start()

    async def _end(self) -> None:
        """However the run ended: answer waiting requests, stop the servers, unlock."""
        self._running = False
        for s in self.sources:
            s.budget = None
        self.ended_at = time.time()
        self._record_end()
        self._answer_requests(None)
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self._ui is not None:
            await self._ui.stop()
        if self._gc_frozen:
            gc.unfreeze()  # what was long-lived for this run is collectable again
            self._gc_frozen = False
        # the state directory before the store: the next owner of the store takes both
        self.state_backend.release()
        self.store.unlock()
        self._done.set()

    def _record_end(self) -> None:
        """Write how the run ended into the store's ``job.json`` (a later reader sees it)."""
        if self._job_info is None or isinstance(self._ended_by, CheckpointLockedError):
            return  # refused before it started, or another job may own the store now
        try:
            self.store.write_job_info({**self._job_info, "ended": ended_record(run_state(self))})
        except Exception:  # the store may be what failed; the end state is shown anyway
            logger.info("could not record the end of the run in %r", self.store, exc_info=True)

    async def _main_loop(self) -> None:
        assert self._wake is not None
        last = time.monotonic()
        budget = self._budget
        while True:
            if self._in_flight is not None and self._in_flight.done():
                await self._await_in_flight()  # raises if the background write failed
            await self._fail_if_a_node_failed()
            failed = [s for s in self.sources if s.error]
            if failed:
                await self._shutdown_sources()
                raise self._shutdown.source_failure(failed[0])
            exhausted = not self._emit_roots and all(s.finished for s in self.sources)
            if exhausted and not self._stop_requested and not self._input_ended:
                await self._end_of_input()
            # input exhausted: the nodes first pass on what they still hold
            # (timers, buffers, asynchronous work), then the final checkpoint
            draining = exhausted and not self._stop_requested and self._held_back()
            if self._stop_requested or (exhausted and not draining):
                await self._finish()
                self._answer_requests(None)  # served by the final checkpoint
                return
            await self._serve_requests()
            due = self.interval is not None and time.monotonic() - last >= self.interval
            if budget is not None and budget.left <= 0:
                due = True  # a source spent the record budget and paused itself
            if due:
                await self._checkpoint()
                last = time.monotonic()
            await self._wait(draining, last)

    async def _serve_requests(self) -> None:
        """Take the checkpoints ``checkpoint()`` asked for; each caller gets its epoch once durable."""
        for fut in self._requests[:]:
            self._requests.remove(fut)
            savepoint = fut in self._savepoint_wanted
            self._savepoint_wanted.discard(fut)
            try:
                epoch = await self._checkpoint(savepoint=savepoint)
            except BaseException as e:  # hand the failure to the caller
                if not fut.done():
                    fut.set_exception(e)
                raise
            _resolve_when_durable(fut, epoch, self._in_flight)

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
        for n in self.nodes:
            if isinstance(n, EndsWithInput):
                await runtime.gather_results(n.end_of_input())

    def _held_back(self) -> bool:
        """Whether a node still holds records it will pass on by itself, or work in flight."""
        return any(n.emits_later() or n.in_flight for n in self.nodes)

    def _answer_requests(self, failure: BaseException | None) -> None:
        """Answer ``checkpoint()`` calls the job ended before serving.

        After a normal end the final checkpoint covers every record, so its
        epoch is the answer; after a failure, the failure.

        A ``savepoint()`` call is answered only by a savepoint: the final
        checkpoint is one when such a call was waiting (see :meth:`_finish`).
        """
        requests, self._requests = self._requests, []
        wanted, self._savepoint_wanted = self._savepoint_wanted, set()
        for fut in requests:
            if fut.done():
                continue
            savepoint = fut in wanted
            # a savepoint call is answered by the final checkpoint only if it is one
            if (
                failure is None
                and self.epoch
                and (not savepoint or self.last_savepoint == self.epoch)
            ):
                fut.set_result(self.epoch)
                continue
            what = "savepoint" if savepoint else "checkpoint"
            fut.set_exception(
                JobFailedError(
                    f"Job.{what}(): the job ended before taking it ({failure!r}); "
                    f"the last complete checkpoint is {self._last_epoch_text()}"
                )
            )

    async def _finish(self) -> None:
        """Final checkpoint with the sources paused, then stop and close everything.

        It is a savepoint after ``stop(savepoint=True)`` or while a
        ``savepoint()`` call waits for one.
        """
        await hold_before_end()  # a crash test that still owes kills holds the job here
        savepoint = self._stop_savepoint or any(
            f in self._savepoint_wanted and not f.done() for f in self._requests
        )
        await self._checkpoint(final=True, savepoint=savepoint)

    def stop(
        self, savepoint: bool = False, timeout: float | None = None, reason: str = "Job.stop()"
    ) -> bool:
        """Stop gracefully: pause, drain, final checkpoint, stop sources, close sinks.

        With ``savepoint=True`` the final checkpoint is a savepoint (kept by
        retention, self-contained; see :meth:`savepoint`); its epoch is then
        :attr:`last_savepoint`.  From another thread this waits until the job
        has finished (its final checkpoint written, however long that takes
        with a large state), or for ``timeout`` seconds: it returns whether
        the job has ended.  From the job's own loop (a record's processing) it
        only asks, and returns False.  ``reason`` says who asked (the first one
        is kept: :func:`rivermark.observe.endstate.run_state` reports it).
        """
        if savepoint:
            self._stop_savepoint = True
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop_requested = True
        loop = self._loop
        if loop is None or not self._running:
            return not self._running
        if runtime.in_loop_thread(loop):
            # asked by a record's processing: no later record is emitted
            for s in self.sources:
                s.pause()
            assert self._wake is not None
            self._wake.set()
            return False
        loop.call_soon_threadsafe(self._wake_up)
        return self._done.wait(timeout)

    def install_signal_handlers(self, savepoint: bool = False) -> None:
        """Make SIGINT and SIGTERM stop this job (call from the main thread).

        The first signal stops gracefully (:meth:`stop`: final checkpoint,
        sources stopped, sinks closed; a savepoint with ``savepoint=True``).  A second one stops the process at
        once with exit status 128 + the signal number: no final checkpoint,
        and the last complete checkpoint stays intact (a checkpoint is only
        complete once its manifest is durable), as after ``kill -9``.
        """
        received: list[int] = []

        def handler(signum: int, frame: Any) -> None:
            received.append(signum)
            if len(received) == 1:
                logger.warning(
                    "signal %d: stopping with a final checkpoint (send it again to stop at once)",
                    signum,
                )
                threading.Thread(
                    target=self.stop,
                    args=(savepoint, None, signal_reason(signum)),
                    name="rivermark-stop",
                    daemon=True,
                ).start()
                return
            logger.warning(
                "signal %d again: stopping at once without a final checkpoint; "
                "the last complete checkpoint (%s) in %r is intact",
                signum,
                self._last_epoch_text(),
                self.store,
            )
            for h in logging.getLogger().handlers:
                h.flush()
            os._exit(128 + signum)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def checkpoint(self) -> int:
        """Take a checkpoint now; returns its epoch (call from outside the loop)."""
        loop = self._loop
        if loop is None or not self._running:
            raise ConfigurationError("Job.checkpoint(): the job is not running; call run() first")
        return runtime.run_sync(loop, self.checkpoint_async())

    async def checkpoint_async(self) -> int:
        """Take a checkpoint now (on the loop); returns its epoch."""
        assert self._loop is not None and self._wake is not None
        if not self._running:
            # the job ended since the request was made: answered as the requests
            # it had when it ended (its final checkpoint, or its failure)
            fut0: asyncio.Future[int] = self._loop.create_future()
            self._requests.append(fut0)
            self._answer_requests(self._ended_by)
            return await fut0
        fut: asyncio.Future[int] = self._loop.create_future()
        self._requests.append(fut)
        self._wake.set()
        return await fut

    def savepoint(self) -> int:
        """Take a savepoint at the next barrier; returns its epoch once it is durable.

        Callable from any thread but the job's loop while the job runs.  A
        savepoint is a checkpoint that retention (``keep``, ``rivermark
        checkpoints prune``) never deletes, and every keyed state in it is
        written whole, so it needs no other checkpoint.  Raises
        :class:`JobFailedError` if the job ends before taking it.
        """
        loop = self._loop
        if loop is None or not self._running:
            raise ConfigurationError(
                "Job.savepoint(): the job is not running; call run() first, or stop it with "
                "stop(savepoint=True) to end it with a savepoint"
            )
        return runtime.run_sync(loop, self.savepoint_async())

    async def savepoint_async(self) -> int:
        """Take a savepoint at the next barrier (on the loop); returns its epoch."""
        assert self._loop is not None and self._wake is not None
        fut: asyncio.Future[int] = self._loop.create_future()
        self._requests.append(fut)
        self._savepoint_wanted.add(fut)
        if not self._running:
            self._answer_requests(self._ended_by)
        else:
            self._wake.set()
        return await fut

    # ------------------------------------------------------------------ the protocol
    async def _checkpoint(
        self, final: bool = False, blocking: bool = False, savepoint: bool = False
    ) -> int:
        """The checkpoint protocol, steps 1-6 (see the module docs).

        With background writes (the default where every checkpointed sink
        seals its epoch at ``pre_commit``), steps 4-5 run after the sources
        resumed, in :meth:`_complete`, as the one checkpoint in flight; a
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
        assert self._ckpt_lock is not None
        async with self._ckpt_lock:
            await self._wait_for_in_flight()
            epoch = self.epoch + 1
            paused_at = time.monotonic()
            # (1) pause
            for s in self.sources:
                s.pause()
            ok = False
            background = self.background and not final and not blocking
            try:
                await self._quiesce()  # (2)
                # (3) snapshot, synchronously on the loop thread: an immutable view
                # of every node's state, positions, sink handles (pre-commit)
                views = self._snapshot_states(epoch, base=savepoint, final=final)
                positions = {self.id_of(s): s.position() for s in self.sources}
                if self._budget is not None:
                    self._budget.refill()  # the next record-count checkpoint counts from here
                handles = {self.id_of(k): self._pre_commit(k, epoch) for k in self.sinks}
                manifest = Manifest(
                    epoch=epoch,
                    time=time.time(),
                    fingerprint=self.fingerprint,
                    positions=positions,
                    sinks=handles,
                    chains={
                        nid: self._keyed.link(v)
                        for nid, v in views.items()
                        if isinstance(v, KeyedView)
                    },
                    files=files_of(views),
                    savepoint=savepoint,
                    run={"started": self.started_at, "resumed_from": self.restored_epoch},
                    counts=self.metrics.totals(),
                    renamed={n: o for n, o in self._renamed.items() if n in self.fingerprint},
                )
                pending = _Pending(epoch, manifest, views, positions, handles, paused_at)
                manifest.timer = pending.timing
                if not background:
                    # (4)-(5) with the sources paused
                    await self._complete(pending)
                    if final:
                        await self._shutdown_sources()
                ok = True
            finally:
                if ok:
                    # (6) resume
                    fault_point("before-resume")
                    for s in self.sources:
                        s.resume()
                    if background:
                        pending.resumed_at = time.monotonic()
                        self._in_flight = asyncio.ensure_future(self._complete(pending))
                        self._in_flight.add_done_callback(lambda _: self._wake_up())
                else:
                    await self._shutdown.stop_everything()
            return epoch

    async def _wait_for_in_flight(self) -> None:
        """At most one checkpoint in flight: a trigger waits for it (backpressure, counted)."""
        if self._in_flight is None:
            return
        waited = time.monotonic()
        if not self._in_flight.done():
            self.checkpoint_waits += 1
        await self._await_in_flight()
        self.checkpoint_wait_seconds += time.monotonic() - waited

    async def _quiesce(self) -> None:
        """Step 2: every record the sources emitted has been fully processed, none failed."""
        for s in self.sources:
            await s.wait_quiescent()
        while any(n.in_flight for n in self.nodes):
            await self._fail_if_a_node_failed()
            await asyncio.sleep(_POLL)
        # a record that failed (source or node) may have left part of its
        # effects in the graph's state: never snapshot after that
        await self._fail_if_a_node_failed()

    async def _await_in_flight(self) -> None:
        """Wait for the checkpoint in flight; on its failure stop everything and raise."""
        task, self._in_flight = self._in_flight, None
        if task is None:
            return
        try:
            await asyncio.shield(task)
        except BaseException:
            await self._shutdown.stop_everything()
            raise

    async def _complete(self, p: _Pending) -> None:
        """Steps 4-5: the durable write, then the post-commit (sinks, sources, prune)."""
        loop = asyncio.get_running_loop()
        p.write_started = time.monotonic()
        try:
            # (4) serialise and write durably in one trip to the worker thread
            # (fault points before-write / after-state-files / after-manifest)
            states = await loop.run_in_executor(None, self._write, p)
        except CheckpointLockedError as e:
            # the lock (lease) was lost: another job may own the store now,
            # so nothing of it is touched, torn files included
            self._checkpoint_failed(p.epoch, e)
            raise
        except CheckpointWriteError as e:
            self._checkpoint_failed(p.epoch, e)
            await self._shutdown.remove_torn(p.epoch)
            raise
        except Exception as e:
            self._checkpoint_failed(p.epoch, e)
            await self._shutdown.remove_torn(p.epoch)
            raise CheckpointWriteError(
                f"Job: checkpoint {p.epoch} could not be written to {self.store!r} "
                f"({type(e).__name__}: {e}); every source and sink was stopped and "
                f"nothing of checkpoint {p.epoch} was committed. The last complete "
                f"checkpoint ({self._last_epoch_text()}) is intact: fix the cause "
                "(free disk space, restore write permission) and run again to resume"
            ) from e
        fault_point("after-manifest")
        self.epoch = p.epoch
        if p.manifest.savepoint:
            self.last_savepoint = p.epoch
        for v in p.views.values():
            if isinstance(v, KeyedView):
                self._keyed.written(v, p.epoch)
        # (5) post-commit: only now does the checkpoint count
        for k in self.sinks:
            k.commit(p.epoch, p.handles[self.id_of(k)])
        for s in self.sources:
            s.checkpoint_durable(p.epoch, p.positions[self.id_of(s)])
        fault_point("after-sink-commit")
        try:
            await loop.run_in_executor(None, self.store.prune, self.keep)
        except Exception as e:
            # checkpoint p.epoch is complete; old ones stay until a later prune
            # succeeds (a store that is really gone fails the next write)
            self._checkpoint_failed(p.epoch, e, fatal=False, what="pruning older checkpoints")
            logger.warning(
                "checkpoint %d written, but older checkpoints could not be pruned from %r "
                "(%s: %s); they are removed by a later checkpoint",
                p.epoch, self.store, type(e).__name__, e,
            )  # fmt: skip
        # the figures the manifest holds (one definition everywhere); a store that
        # did not serialise it through to_json gets them now
        timing = p.manifest.timing or p.timing()
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
        self.checkpoints.append(info)
        self.checkpoints_written += 1
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

    def _checkpoint_failed(
        self, epoch: int, e: BaseException, fatal: bool = True, what: str = ""
    ) -> None:
        reason = f"{what + ': ' if what else ''}{type(e).__name__}: {str(e)[:300]}"
        self.checkpoint_failures.append(CheckpointFailure(epoch, time.time(), reason, fatal))
        self.checkpoints_failed += 1

    def _write(self, p: _Pending) -> dict[str, bytes]:
        """Serialise ``p``'s views and write the checkpoint (in the worker thread)."""
        states = {nid: v if isinstance(v, bytes) else v.serialise() for nid, v in p.views.items()}
        fault_point("before-write")
        self.store.write_checkpoint(p.manifest, states)
        return states

    def _snapshot_states(
        self, epoch: int, base: bool = False, final: bool = False
    ) -> dict[str, bytes | StateView]:
        """Pickle every stateful node's state; a failure names the node and the type.

        With ``base`` (a savepoint) keyed state is written whole, not as a delta.
        The ``final`` checkpoint (written with the sources held) defers a due
        compaction within bounds (``Chains.view``'s ``defer``): it writes the
        changes since the last checkpoint, and the next run's first
        checkpoint compacts.
        """
        states: dict[str, bytes | StateView] = {}
        current = [(n, n.get_state()) for n in self.stateful]
        # every keyed chain is compacted at the same barrier (see Chains.compaction_due)
        compact = not final and any(
            self._keyed.compaction_due(self.id_of(n), state, self.epoch)
            for n, state in current
            if keyed_attrs(state)
        )
        for n, state in current:
            nid = self.id_of(n)
            try:
                # keyed state: O(changed keys), the rest of the state is pickled here
                states[nid] = view_of(
                    self._keyed,
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
                    f"Job: checkpoint {epoch}: the state of node {self.id_of(n)} {n!r} "
                    f"cannot be pickled: {where} is a {type(bad).__module__}."
                    f"{type(bad).__qualname__} ({type(e).__name__}: {e}); "
                    "keep only picklable values (numbers, strings, containers, dataclasses) "
                    "in the node's state, e.g. not open files, locks or generators"
                ) from e
        return states

    def _pre_commit(self, sink: CheckpointedSink, epoch: int) -> Any:
        try:
            return sink.pre_commit(epoch)
        except OSError as e:
            raise CheckpointWriteError(
                f"Job: checkpoint {epoch}: sink {self.id_of(sink)} {sink!r} could not make "
                f"its output durable ({type(e).__name__}: {e}); every source and sink was "
                f"stopped. The last complete checkpoint ({self._last_epoch_text()}) is intact: "
                "fix the cause (free disk space, restore write permission) and run again"
            ) from e

    def _last_epoch_text(self) -> str:
        return f"epoch {self.epoch}" if self.epoch else "none yet"
