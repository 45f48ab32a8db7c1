"""``Job``: run a graph with consistent checkpoints and exact resume.

A job holds the parts of its protocol, each made once from its store and
its roles (:class:`~rivermark.checkpoint.protocol.roles.JobGraph`): the recovery at
start (:class:`~rivermark.checkpoint.protocol.recovery.Recovery`), the checkpoint
cycle, one ordered sequence (:class:`~rivermark.checkpoint.protocol.cycle.CheckpointCycle`;
its steps and failure cases are in :mod:`rivermark.checkpoint.protocol.cycle` and
``docs/checkpointing.md``), the run loop (:class:`~rivermark.checkpoint.protocol.runloop.RunLoop`),
the calls waiting for a checkpoint (:class:`~rivermark.checkpoint.protocol.requests.Requests`)
and the stopping of sources and sinks
(:class:`~rivermark.checkpoint.protocol.shutdown.Shutdown`).  Its options are one
checked value, :class:`~rivermark.checkpoint.protocol.options.JobOptions`.  What
watches it (metrics, the Prometheus endpoint, the live page, the notebook
and terminal displays) hears its events as a
:class:`~rivermark.checkpoint.protocol.listeners.JobListener`; the job imports none
of them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any

from rivermark._runguard import check_run_allowed
from rivermark.checkpoint.protocol.cycle import CheckpointCycle, RunInfo
from rivermark.checkpoint.protocol.handle import JobHandle, run_in_background
from rivermark.checkpoint.protocol.listeners import (
    CheckpointFailure,
    CheckpointInfo,
    History,
    JobListener,
    Listeners,
    display,
    make_listeners,
)
from rivermark.checkpoint.protocol.options import (
    JobOptions,
    check_exactly_once,
    check_node,
    choose_background,
    derive_job_id,
)
from rivermark.checkpoint.protocol.recovery import Recovery
from rivermark.checkpoint.protocol.requests import Requests
from rivermark.checkpoint.protocol.roles import JobGraph
from rivermark.checkpoint.protocol.runloop import RunLoop, adopt_nodes, stop_on_signals
from rivermark.checkpoint.protocol.runstate import RunRecord, RunState, previous_run, run_state
from rivermark.checkpoint.protocol.shutdown import Shutdown
from rivermark.checkpoint.protocol.upgrade import job_fingerprint
from rivermark.checkpoint.state.keyed import Chains
from rivermark.checkpoint.stores.signing import Keyring, Trust
from rivermark.checkpoint.stores.store import Store, open_store
from rivermark.core import runtime
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.sinks.base import CheckpointedSink
from rivermark.sources.base import RecordBudget, Source

logger = logging.getLogger(__name__)

__all__ = ["Job", "JobOptions", "CheckpointInfo", "CheckpointFailure"]


class Job:
    """Run the whole graph of ``node`` with checkpoints in ``checkpoint``.

    The job ends when every source is exhausted, or at :meth:`stop`; a graph
    with roots fed by ``emit`` (plain ``Stream()``) runs until :meth:`stop`.

    The options (``every``, ``keep``, ``exactly_once``, ``from_savepoint``,
    ``state``, ``metrics_port``, ``ui``, ...) are the keywords of
    :class:`~rivermark.checkpoint.protocol.options.JobOptions`, which says what each
    does; ``job.options`` holds them, checked.  ``job.add_listener(listener)``
    attaches a :class:`~rivermark.checkpoint.protocol.listeners.JobListener`, which
    hears the job's events (started, checkpoints begun, completed or failed,
    stopped).

    >>> import tempfile
    >>> from rivermark import Stream
    >>> source = Stream.from_iterable([1, 2, 3])
    >>> totals = source.accumulate(lambda acc, x: acc + x, start=0).sink_to_list()
    >>> Job(source, checkpoint=tempfile.mkdtemp(), every=None).run()
    >>> totals
    [1, 3, 6]
    """

    def __init__(self, node: Stream, checkpoint: str | Store = "ckpt/job1", **options: Any) -> None:
        self.options = opts = JobOptions.of_job(checkpoint, options)  # each keyword checked
        check_node(node)
        #: where each node's keyed state lives: in memory, or in RocksDB (see .rocks)
        self.state_backend = opts.state_backend()
        #: how a restore meets a graph that changed since the checkpoint
        self.upgrade = opts.upgrade_rules()
        self.interval = opts.interval()
        self.every_batches, self.keep = opts.every_batches, opts.keep
        self.exactly_once, self.allow_new_nodes = opts.exactly_once, opts.allow_new_nodes
        self.from_scratch = bool(opts.from_scratch)
        self.from_savepoint = opts.savepoint_location()
        self.store: Store = open_store(checkpoint)
        self.store.trust = Trust(Keyring.configured(opts.checkpoint_key), bool(opts.trust_store))
        #: the graph's nodes by role (:attr:`nodes`, :attr:`sources`, :attr:`stateful`, :attr:`sinks`)
        self._roles = JobGraph.of(node)
        self.fingerprint = job_fingerprint(node)
        #: the records the sources may emit before the next checkpoint (every_batches)
        budget = (
            None if opts.every_batches is None else RecordBudget(opts.every_batches, self._wake_up)
        )
        #: write checkpoints after the sources resumed (see CheckpointCycle.checkpoint)
        self.background = choose_background(self.store, self.sinks, opts.background)
        #: stable across restarts on the same store: names transactional ids
        self.job_id = derive_job_id(self.store)
        if opts.exactly_once:
            check_exactly_once(self.nodes)
        self._history = History()
        #: the most recent checkpoints written by this job, and those that failed (the
        #: last 100 of each, oldest first; the job's own listener keeps them)
        self.checkpoints: deque[CheckpointInfo] = self._history.checkpoints
        self.checkpoint_failures: deque[CheckpointFailure] = self._history.failures
        self._listeners = Listeners([self._history])
        self._cycle = CheckpointCycle(
            self.store,
            self._roles,
            self.fingerprint,
            Chains(self.store, opts.compaction()),  # delta chains of keyed state
            Shutdown(self.store, self._roles),  # stops sources and sinks, words failures
            self._listeners,
            background=self.background,
            keep=opts.keep,
            budget=budget,
            wake_up=self._wake_up,
        )
        self._run = RunLoop(
            self._roles, self._cycle, Requests(), interval=self.interval, budget=budget
        )
        adopt_nodes(self._roles, self.job_id, opts.on_error, self._run.emit_roots)
        #: what the job restores at the start of every run
        self._recovery = Recovery(
            self.store,
            self._roles,
            self.upgrade,
            self._cycle.keyed,
            self.state_backend,
            from_scratch=self.from_scratch,
            from_savepoint=self.from_savepoint,
        )
        #: what the run resumed from (None and empty when it started fresh): the
        #: checkpoint's epoch, the time it was written, the sources' positions, node
        #: id -> the counts it carried; the seconds the recovery at start took
        #: (reading, checking, set_state), and whether it (or a fresh start) finished
        self.restored_epoch: int | None = None
        self.restored_time: float | None = None
        self.restored_positions: dict[str, Any] = {}
        self.restored_counts: dict[str, list[int]] = {}
        self.restore_seconds, self.recovered = 0.0, False
        #: unix time ``run`` started and (once it returned) ended
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: what the store's ``job.json`` says of the run
        self._record = RunRecord(self.store)
        #: how the run before this one ended (None: unknown, or the first run)
        self.previous_run: RunState | None = None
        #: who asked the job to stop (``Ctrl-C (SIGINT)``, ``rivermark stop``, ``Job.stop()``)
        self.stop_reason: str | None = None
        self._running = False
        self._done = threading.Event()
        #: what ended the last run with an exception (None: it ended normally)
        self._ended_by: BaseException | None = None
        #: the listeners the observe layer attached, by the option each serves
        self._attached: dict[str, JobListener] = {}
        make_listeners(self, opts, self._attached)
        for listener in self._attached.values():
            self._listeners.add(listener)

    def _recover(self) -> None:
        """Recovery at start: restore the newest checkpoint that verifies (timed)."""
        started = time.perf_counter()
        self.recovered = False
        try:
            restored = self._recovery.recover()
            self._cycle.epoch = restored.epoch
            manifest = restored.manifest
            if manifest is not None:
                self.restored_epoch = manifest.epoch
                self.restored_time = manifest.time
                self.restored_positions = dict(manifest.positions)
                self.restored_counts = dict(manifest.counts or {})
            self._cycle.begin_run(
                RunInfo(
                    started=self.started_at,
                    resumed_from=self.restored_epoch,
                    renamed={} if manifest is None else dict(manifest.renamed),
                    carried=self.restored_counts,
                )
            )
            self.recovered = True
        finally:
            self.restore_seconds = time.perf_counter() - started

    @property
    def running(self) -> bool:
        """Whether the job is running now (recovered, and not ended yet)."""
        return self._running

    @property
    def bootstrapping(self) -> bool:
        """Whether the job holds its other sources while its tables' sources read to
        their end (``to_table(..., bootstrap=True)``; see ``docs/joins.md``)."""
        return self._run.bootstrap.pending

    @property
    def stop_requested(self) -> bool:
        """Whether :meth:`stop` was called for the current run (it is stopping or stopped)."""
        return self._run.stop_requested

    def wait_ended(self, timeout: float | None = None) -> bool:
        """Block until the current (or next) run has ended; False if ``timeout`` passed first."""
        return self._done.wait(timeout)

    @property
    def ended_by(self) -> BaseException | None:
        """What ended the last run with an exception (None: it ended normally, or runs)."""
        return self._ended_by

    @property
    def epoch(self) -> int:
        """The newest durable checkpoint (0: none yet)."""
        return self._cycle.epoch

    @property
    def last_savepoint(self) -> int | None:
        """The epoch of the newest savepoint this job wrote (None: none yet)."""
        return self._cycle.last_savepoint

    @property
    def checkpoints_written(self) -> int:
        return self._history.written

    @property
    def checkpoints_failed(self) -> int:
        return self._history.failed

    @property
    def checkpoint_waits(self) -> int:
        """Triggers that found a checkpoint still in flight and waited (backpressure)."""
        return self._cycle.waits

    @property
    def checkpoint_wait_seconds(self) -> float:
        return self._cycle.wait_seconds

    @property
    def metrics(self) -> JobListener:
        """The job's figures: ``job.metrics.read()`` (a :class:`rivermark.observe.metrics.Metrics`,
        attached by the observe layer; typed code gets it with ``metrics_of(job)`` there)."""
        return self._attached["metrics"]

    def listener(self, option: str) -> JobListener | None:
        """The listener the observe layer attached for ``option`` (None: none)."""
        return self._attached.get(option)

    @property
    def metrics_url(self) -> str | None:
        """Where the Prometheus metrics are served (None without ``metrics_port``)."""
        endpoint = self._attached.get("metrics_port")
        return None if endpoint is None else endpoint.served_at()

    @property
    def ui_url(self) -> str | None:
        """Where the live pipeline page is served (None without ``ui``)."""
        page = self._attached.get("ui")
        return None if page is None else page.served_at()

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

    def add_listener(self, listener: JobListener) -> None:
        """Let ``listener`` hear this job's events from now on (see :mod:`.listeners`)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: JobListener) -> None:
        self._listeners.remove(listener)

    def _ipython_display_(self) -> None:
        """In Jupyter: the job's progress, refreshed while it runs (``rivermark[notebook]``)."""
        display(self)

    def __repr__(self) -> str:
        return f"Job({self.store!r}, sources={len(self.sources)}, epoch={self.epoch})"

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
        self._run.begin()
        self._done.clear()
        self.store.lock()
        self.started_at, self.ended_at = time.time(), None
        try:
            await self._start()
            if self._run.stop_requested:
                await self._run.finish()
                return
            await self._run.start_sources(fresh=self.restored_epoch is None)
            await self._run.main()
        except BaseException as e:
            # a job refused at start (or failed) releases its sinks' files and
            # locks before the checkpoint lock; closing is idempotent
            await self._cycle.settle_in_flight()
            self._cycle.shutdown.close_sinks()
            self._ended_by = e
            self._run.answer_requests(e)
            raise
        finally:
            await self._end()

    async def _start(self) -> None:
        """Recover, tell the listeners (the servers start), record the job's graph."""
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
        self.previous_run = previous_run(self.store.read_job_info())
        await self._listeners.started(self)  # they see what the run resumed from
        self._recovery.warn_not_replayable()
        node_ids = [self.id_of(n) for n in self.nodes]
        self._record.started(self.fingerprint, node_ids, self._listeners.run_record())
        self._ended_by = None
        self._running = True

    async def _end(self) -> None:
        """However the run ended: answer waiting requests, tell the listeners, unlock."""
        self._running = False
        self._run.end()
        self.ended_at = time.time()
        state = run_state(self)
        self._record.ended(state, self._ended_by)
        self._run.answer_requests(None)
        await self._listeners.stopped(self, state)
        # the state directory before the store: the next owner of the store takes both
        self.state_backend.release()
        self.store.unlock()
        self._done.set()

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
        is kept: :func:`rivermark.checkpoint.protocol.runstate.run_state` reports it).
        """
        if savepoint:
            self._run.stop_savepoint = True
        if self.stop_reason is None:
            self.stop_reason = reason
        self._run.stop_requested = True
        loop = self._loop
        if loop is None or not self._running:
            return not self._running
        if runtime.in_loop_thread(loop):
            self._run.stop_here()  # asked by a record's processing
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
        stop_on_signals(self.stop, self._cycle, savepoint)

    def _wake_up(self) -> None:
        self._run.wake_up()

    def checkpoint(self) -> int:
        """Take a checkpoint now; returns its epoch (call from outside the loop)."""
        loop = self._loop
        if loop is None or not self._running:
            raise ConfigurationError("Job.checkpoint(): the job is not running; call run() first")
        return runtime.run_sync(loop, self.checkpoint_async())

    async def checkpoint_async(self) -> int:
        """Take a checkpoint now (on the loop); returns its epoch."""
        return await self._ask(savepoint=False)

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
        return await self._ask(savepoint=True)

    async def _ask(self, savepoint: bool) -> int:
        """A checkpoint (or savepoint) request, served by the run loop at its next turn;
        after the run ended, answered as the requests it had when it ended."""
        assert self._loop is not None
        fut = self._run.requests.add(self._loop, savepoint)
        if not self._running:
            self._run.answer_requests(self._ended_by)
        else:
            self._wake_up()
        return await fut
