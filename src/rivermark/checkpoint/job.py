"""``Job``: run a graph with consistent checkpoints and exact resume.

The protocol (one ordered sequence, :meth:`Job._checkpoint`; the crash
points and what recovery does at each are in ``docs/checkpointing.md``):

1. pause every source (``src.pause()``);
2. ``await src.wait_quiescent()`` for each, then wait until every node's
   ``_inflight`` counter is 0 (asynchronous work has drained);
3. synchronously, on the loop thread, take the snapshot: ``pickle.dumps``
   of every stateful node's ``get_state()``, every source's ``position()``,
   every checkpointed sink's ``pre_commit(epoch)`` handle;
4. write it through the store in a thread executor: state files (fsynced),
   then the manifest atomically (temp name, fsync, rename, fsync dir);
   fault points ``after-state-files`` and ``after-manifest``;
5. post-commit: every sink's ``commit(epoch, handle)`` (fault point
   ``after-sink-commit``), then prune to ``keep`` checkpoints;
6. fault point ``before-resume``; resume the sources.

The sources stay paused until the write is durable (correctness first).

Recovery at start: the newest checkpoint that verifies is loaded (damaged
ones are skipped with a WARNING); ``set_state`` on stateful nodes,
``restore(handle)`` on checkpointed sinks (``None`` without a checkpoint),
``seek(position)`` on sources; then the sources start.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import pickle
import threading
import time
from typing import Any

from ..core import graph, runtime
from ..core.node import Stream
from ..core.timeutil import parse_interval
from ..errors import ConfigurationError, NodeFailedError, describe
from ..sinks.base import CheckpointedSink
from ..sources.base import Source
from ..testing.faults import fault_point
from .errors import CheckpointCorruptError, CheckpointMismatchError, JobFailedError
from .manifest import Manifest
from .store import LocalDirectoryStore, Store

logger = logging.getLogger(__name__)

__all__ = ["Job"]

_POLL = 0.0005


class Job:
    """Run the whole graph of ``node`` with checkpoints in ``checkpoint``.

    The job ends when every source is exhausted, or at :meth:`stop`; a graph
    with roots fed by ``emit`` (plain ``Stream()``) runs until :meth:`stop`.

    ``every`` is the checkpoint interval (``"2s"``, ``"200ms"``, seconds, or
    ``None``); ``every_batches`` checkpoints after that many records emitted by
    the sources; ``keep`` is how many checkpoints are retained.  Running the
    same program on the same directory resumes where the last checkpoint was.
    ``allow_new_nodes=True`` lets stateful nodes added since the checkpoint
    start empty.  ``on_error`` is the default error policy of the graph's
    nodes that have none.  ``exactly_once=True`` refuses (``ConfigurationError``)
    graphs that cannot deliver it: a leaf that is neither a checkpointed sink nor
    stateful (``sink(func)``), or a source that is not replayable.

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
    ) -> None:
        if not isinstance(node, Stream):
            raise ConfigurationError(
                f"Job: node must be a Stream node of the graph to run, got {node!r}"
            )
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigurationError(
                f"Job: keep must be an integer >= 1, got {keep!r}; pass e.g. 10"
            )
        if every_batches is not None and (
            isinstance(every_batches, bool)
            or not isinstance(every_batches, int)
            or every_batches < 1
        ):
            raise ConfigurationError(
                f"Job: every_batches must be an integer >= 1 or None, got {every_batches!r}"
            )
        self.interval: float | None = (
            None if every is None else parse_interval(every, "Job", "every")
        )
        self.every_batches = every_batches
        self.keep = keep
        self.exactly_once = exactly_once
        self.allow_new_nodes = allow_new_nodes
        self.store: Store = (
            checkpoint if isinstance(checkpoint, Store) else LocalDirectoryStore(checkpoint)
        )
        self.nodes = graph.topological(node)
        self._ids = graph.node_ids(node)
        self.fingerprint = graph.fingerprint(node)
        self.sources: list[Source] = [n for n in self.nodes if isinstance(n, Source)]
        self.stateful = [n for n in self.nodes if n.is_stateful and not isinstance(n, Source)]
        self.sinks = [
            n for n in self.nodes if isinstance(n, CheckpointedSink) and not isinstance(n, Source)
        ]
        #: stable across restarts on the same store: names transactional ids
        self.job_id = self._derive_job_id()
        for sink in self.sinks:
            if getattr(sink, "job_id", "") is None:
                sink.job_id = self.job_id  # type: ignore[attr-defined]
        if exactly_once:
            self._check_exactly_once()
        #: roots fed by ``emit`` (not sources): the job runs until ``stop()``
        self._emit_roots = [n for n in self.nodes if not n.upstreams and not isinstance(n, Source)]
        if on_error is not None:
            for n in self.nodes:
                if n.on_error is None:
                    n.on_error = on_error
        self.epoch = 0
        self.restored_epoch: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop_requested = False
        self._running = False
        self._done = threading.Event()
        self._ckpt_lock: asyncio.Lock | None = None
        self._requests: list[asyncio.Future[int]] = []

    def _derive_job_id(self) -> str:
        path = getattr(self.store, "path", None)
        if path is None:
            return "job"
        resolved = str(os.path.abspath(os.fspath(path)))
        digest = hashlib.sha1(resolved.encode()).hexdigest()[:10]
        return f"{os.path.basename(resolved) or 'job'}-{digest}"

    def _check_exactly_once(self) -> None:
        weak = [
            n
            for n in self.nodes
            if (not n.downstreams and not n.is_stateful and not isinstance(n, CheckpointedSink))
            or (not n.upstreams and not getattr(n, "replayable", False))
        ]
        if weak:
            raise ConfigurationError(
                "Job(exactly_once=True): "
                + ", ".join(repr(n) for n in weak)
                + " cannot give exactly-once results (a sink without the checkpointed-sink "
                "contract is at-least-once, a source that is not replayable is at-most-once); "
                "use checkpointed sinks (e.g. sink_to_textfile) and replayable sources, "
                "or pass exactly_once=False"
            )

    def id_of(self, node: Stream) -> str:
        """The stable id the checkpoint stores ``node`` under."""
        return self._ids[id(node)]

    def __repr__(self) -> str:
        return f"Job({self.store!r}, sources={len(self.sources)}, epoch={self.epoch})"

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        """Run until every source is exhausted or :meth:`stop` is called (blocking)."""
        loop = self.sources[0].loop if self.sources else runtime.background_loop()
        if runtime.in_loop_thread(loop):
            raise ConfigurationError(
                "Job.run() was called on the event loop thread; use 'await job.run_async()'"
            )
        runtime.run_sync(loop, self.run_async())

    async def run_async(self) -> None:
        """Run on the current event loop until done (see :meth:`run`)."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._ckpt_lock = asyncio.Lock()
        self._done.clear()
        self.store.lock()
        try:
            self._recover()
            self._warn_not_replayable()
            self.store.write_job_info(
                {
                    "fingerprint": self.fingerprint,
                    "node_ids": [self.id_of(n) for n in self.nodes],
                }
            )
            self._running = True
            if self._stop_requested:
                await self._finish()
                return
            for s in self.sources:
                # concrete start positions (e.g. Kafka offsets for "latest")
                await s.prepare()
            if self.restored_epoch is None:
                # epoch of the configured start: a crash before the first interval
                # checkpoint then rolls sinks back to where this run began and
                # replays the sources from where it began
                await self._checkpoint()
            for s in self.sources:
                s.start()
            await self._main_loop()
        finally:
            self._running = False
            self.store.unlock()
            self._done.set()

    async def _main_loop(self) -> None:
        assert self._wake is not None
        last = time.monotonic()
        emitted_at_last = self._emitted()
        tick = 0.002 if self.every_batches else None
        while True:
            await self._fail_if_a_node_failed()
            failed = [s for s in self.sources if s.error]
            if failed:
                await self._shutdown_sources()
                raise JobFailedError(
                    f"Job: source {failed[0]!r} failed; see the logged traceback. "
                    "Fix the cause and run again: the job resumes from its last checkpoint"
                ) from None
            if self._stop_requested or (
                not self._emit_roots and all(s.finished for s in self.sources)
            ):
                await self._finish()
                return
            for fut in self._requests[:]:
                self._requests.remove(fut)
                try:
                    epoch = await self._checkpoint()
                except BaseException as e:  # hand the failure to the caller
                    if not fut.done():
                        fut.set_exception(e)
                    raise
                if not fut.done():
                    fut.set_result(epoch)
            now = time.monotonic()
            due = self.interval is not None and now - last >= self.interval
            if self.every_batches and self._emitted() - emitted_at_last >= self.every_batches:
                due = True
            if due:
                await self._checkpoint()
                last = time.monotonic()
                emitted_at_last = self._emitted()
            timeout = tick
            if self.interval is not None:
                left = max(0.0, self.interval - (time.monotonic() - last))
                timeout = left if timeout is None else min(timeout, left)
            if timeout is None:
                timeout = 0.05  # notice exhausted sources
            else:
                timeout = min(timeout, 0.05)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

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
                raise JobFailedError(
                    f"Job: node {self.id_of(n)} {n!r} failed ({describe(exc)}); "
                    f"the job stopped, its last complete checkpoint in {self.store!r} is intact: "
                    "fix the cause and run again to resume from it"
                ) from exc

    def _emitted(self) -> int:
        return sum(getattr(s, "emitted", 0) for s in self.sources)

    async def _finish(self) -> None:
        """Final checkpoint with the sources paused, then stop and close everything."""
        await self._checkpoint(final=True)

    async def _shutdown_sources(self) -> None:
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

    def stop(self) -> None:
        """Stop gracefully: pause, drain, final checkpoint, stop sources, close sinks.

        From another thread this waits until the job has finished.
        """
        self._stop_requested = True
        loop = self._loop
        if loop is None or not self._running:
            return
        if runtime.in_loop_thread(loop):
            assert self._wake is not None
            self._wake.set()
            return
        loop.call_soon_threadsafe(self._wake_up)
        self._done.wait(60)

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
        fut: asyncio.Future[int] = self._loop.create_future()
        self._requests.append(fut)
        self._wake.set()
        return await fut

    # ------------------------------------------------------------------ the protocol
    async def _checkpoint(self, final: bool = False) -> int:
        """The checkpoint protocol, steps 1-6 (see the module docs)."""
        assert self._ckpt_lock is not None
        async with self._ckpt_lock:
            epoch = self.epoch + 1
            # (1) pause
            for s in self.sources:
                s.pause()
            try:
                # (2) quiesce
                for s in self.sources:
                    await s.wait_quiescent()
                while any(getattr(n, "_inflight", 0) for n in self.nodes):
                    await self._fail_if_a_node_failed()
                    await asyncio.sleep(_POLL)
                # a record that failed (source or node) may have left part of its
                # effects in the graph's state: never snapshot after that
                await self._fail_if_a_node_failed()
                # (3) snapshot, synchronously on the loop thread
                states = {self.id_of(n): pickle.dumps(n.get_state()) for n in self.stateful}
                positions = {self.id_of(s): s.position() for s in self.sources}
                handles = {self.id_of(k): k.pre_commit(epoch) for k in self.sinks}
                manifest = Manifest(
                    epoch=epoch,
                    time=time.time(),
                    fingerprint=self.fingerprint,
                    positions=positions,
                    sinks=handles,
                )
                # (4) durable write (fault points after-state-files / after-manifest)
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, self.store.write_checkpoint, manifest, states)
                fault_point("after-manifest")
                self.epoch = epoch
                # (5) post-commit
                for k in self.sinks:
                    k.commit(epoch, handles[self.id_of(k)])
                fault_point("after-sink-commit")
                await loop.run_in_executor(None, self.store.prune, self.keep)
                fault_point("before-resume")
                logger.info("checkpoint %d written (%d state files)", epoch, len(states))
                if final:
                    await self._shutdown_sources()
            finally:
                # (6) resume
                for s in self.sources:
                    s.resume()
            return epoch

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        epochs = self.store.list_epochs()
        manifest: Manifest | None = None
        for e in reversed(epochs):
            try:
                manifest = self.store.verify(e)
                break
            except CheckpointCorruptError as err:
                logger.warning("skipping damaged checkpoint %d: %s", e, err)
        incomplete = self.store.list_incomplete()
        taken = [*epochs, *(int(p.name) for p in incomplete if p.name.isdigit())]
        self.epoch = max(taken, default=0)
        if manifest is None:
            if epochs:
                logger.warning(
                    "no checkpoint in %r verifies; starting from the sources' configured start",
                    self.store,
                )
            for k in self.sinks:
                k.restore(None)
            return
        self._check_fingerprint(manifest)
        for n in self.stateful:
            nid = self.id_of(n)
            if nid in manifest.state:
                n.set_state(pickle.loads(self.store.read_state(manifest.epoch, nid)))
        for k in self.sinks:
            k.restore(manifest.sinks.get(self.id_of(k)))
        for s in self.sources:
            sid = self.id_of(s)
            if sid in manifest.positions:
                s.seek(manifest.positions[sid])
        self.restored_epoch = manifest.epoch
        logger.info("restored checkpoint %d from %r", manifest.epoch, self.store)

    def _check_fingerprint(self, manifest: Manifest) -> None:
        old, new = manifest.fingerprint, self.fingerprint
        if old == new:
            return
        by_id = {self.id_of(n): n for n in self.nodes}
        added = sorted(set(new) - set(old))
        removed = sorted(set(old) - set(new))
        changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
        if not removed and not changed and self.allow_new_nodes:
            logger.warning("checkpoint %d: new nodes %s start empty", manifest.epoch, added)
            return
        lines = [
            f"the graph differs from the one that wrote checkpoint {manifest.epoch} "
            f"in {self.store!r}:"
        ]
        lines += [f"  added: {k} {by_id[k]!r}" for k in added]
        lines += [f"  removed: {k} (was {old[k]})" for k in removed]
        lines += [f"  changed: {k} {by_id[k]!r} (was {old[k]}, now {new[k]})" for k in changed]
        # a node without name= whose derived id moved (e.g. a map inserted
        # above it) shows up as removed + added with the same configuration
        moved = [
            (r, a) for r in removed for a in added if old[r] == new[a] and by_id[a].name is None
        ]
        lines += [
            f"  {r} and {a} look like the same node ({new[a]}): its id is derived from the "
            f"graph's shape, which changed; to restore its state from this checkpoint, "
            f"pass name={r!r} to {by_id[a]!r}"
            for r, a in moved
        ]
        hint = "use a new checkpoint directory to start from scratch"
        if moved or any(by_id[k].name is None for k in added):
            hint = (
                "give stateful nodes and sources explicit names (e.g. "
                ".accumulate(f, name='totals')) so that their state survives changes of "
                "the graph around them; " + hint
            )
        if added and not removed and not changed:
            hint = "pass Job(..., allow_new_nodes=True) to start the added nodes empty, or " + hint
        else:
            hint = "removed or changed nodes cannot be restored; " + hint
        raise CheckpointMismatchError("\n".join([*lines, hint]))

    def _warn_not_replayable(self) -> None:
        for n in self.nodes:
            if n.upstreams:
                continue
            if not getattr(n, "replayable", False):
                logger.warning(
                    "source %s %r is not replayable: its records are at-most-once across crashes",
                    self.id_of(n),
                    n,
                )
