"""``PartitionedJob``: one Kafka app over several processes, a task per input partition.

Run the same program in N processes with the same ``group.id`` and the same
checkpoint location: Kafka's consumer-group protocol splits the input
partitions among the processes, and each process runs one *task* per
partition it owns.  A task is an independent copy of the graph below the
source, built by the user's ``build(source)`` on a source that reads that
one partition, and run as an ordinary checkpointed :class:`~rivermark.checkpoint.Job`
whose store is ``<checkpoint>/tasks/<topic>-<partition>``: the task's state,
its offset and its sinks' handles are checkpointed together, as for any job.

Membership.  Each process holds one consumer that joins the group
(``subscribe``, ``cooperative-sticky`` assignment unless the caller's config
names another strategy).  That consumer reads no records (its partitions
are paused); it only learns which partitions this process owns and commits
the tasks' checkpointed offsets to the group (only a member may).  It joins
as a static member (``group.instance.id``: ``instance_id=``, else the
identity of :mod:`rivermark.kafka.membership`), so a process started again
within the session timeout gets its partitions back without a rebalance.
Its rebalance callbacks run in its polling thread:

* assigned: a task is built and started for each new partition; its job
  restores the newest checkpoint of the partition's store before its source
  reads anything (a partition without a checkpoint starts at the group's
  committed offset, else ``auto.offset.reset``);
* revoked (or lost): the task stops with a final checkpoint and closes its
  source and sinks; the callback returns (and the partition can move) only
  then, or after ``revoke_timeout`` seconds.

A task that fails for a broker deadline, a fenced producer or a lost store
lock gives its partition up (started again after ``RETRY_AFTER`` seconds
while the partition is still this process's); any other failure stops every
task and ends :meth:`PartitionedJob.run` with one line and exit status 1.

A partition's store is locked by the task that runs it (the store's lock or
lease), so two processes never run one task: a new owner waits until the old
one released the lock (a process killed with SIGKILL releases a local lock at
once; an object-store lease expires).

Exactly-once output.  ``to_kafka(..., exactly_once=True)`` in a task takes
its transactional id from the task's job id, which is derived from the task's
store location, so the id is per task and the same in every process: the
process that gains a partition calls ``init_transactions`` with it, which
aborts the open transaction of the previous owner and fences it, should it
still be alive.  An explicit ``transactional_id=`` would be shared by every
task and is refused.

What cannot be partitioned is refused when the job is created, with one line:
a graph with another input besides the partition's source (a second source,
a ``Stream()`` fed by ``emit``, a join with another stream), a ``build``
that does not build on the source it is given, and ``stop_at_end``.

>>> import tempfile
>>> from rivermark import Stream
>>> def build(source):
...     return source.map(len).accumulate(lambda a, n: a + n, start=0).sink(print)
>>> job = PartitionedJob("events", {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},
...                      build, checkpoint=tempfile.mkdtemp())
>>> job.task_location("events", 3).endswith("/tasks/events-3")
True
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rivermark._runguard import check_run_allowed
from rivermark.checkpoint.errors import CheckpointLockedError
from rivermark.checkpoint.protocol.job import Job
from rivermark.core import graph, runtime
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.kafka.commits import GroupCommits
from rivermark.kafka.copartition import co_partitioning_problem, partition_counts
from rivermark.kafka.errors import KafkaCommitError, KafkaConnectorError, KafkaDeliveryError
from rivermark.kafka.group_control import GroupControl
from rivermark.kafka.membership import InstanceSlot
from rivermark.kafka.sink import ToKafka
from rivermark.kafka.source import KafkaBatchedSource
from rivermark.observe.control import local_url
from rivermark.observe.endstate import signal_reason

logger = logging.getLogger(__name__)

__all__ = ["PartitionSource", "PartitionedJob"]

TP = tuple[str, int]

#: options of the Kafka sources that a partitioned job decides itself
_REFUSED_SOURCE_OPTIONS = {
    "stop_at_end": "a partitioned job runs until it is stopped; use a single Job for a "
    "bounded read",
    "npartitions": "the group assigns the partitions",
    "refresh_partitions": "the group assigns the partitions",
    "dask": "tasks run in this process",
    "start": "the job starts the tasks' sources",
}
#: failures after which a task gives its partition up and the process goes on:
#: the broker was away past a deadline, the producer was fenced, the store's
#: lock or lease was lost (another process owns the partition now)
_TASK_FAILURES = (KafkaCommitError, KafkaDeliveryError, CheckpointLockedError)
#: seconds before a task that gave up is started again while the partition is still ours
RETRY_AFTER = 5.0
#: seconds a stopping process tries to leave its final offsets in the group
FINAL_COMMITS_WITHIN = 20.0
#: Job options a partitioned job passes to every task's job
_JOB_OPTIONS = (
    "every",
    "every_batches",
    "keep",
    "exactly_once",
    "on_error",
    "allow_new_nodes",
    "checkpoint_key",
    "trust_store",
    "state",
    "state_dir",
    "state_cache",
)


class PartitionSource(KafkaBatchedSource):
    """A Kafka source that reads one partition of one topic (a task's input).

    Positions, restores and batches are those of :class:`KafkaBatchedSource`
    (it stores the offset of the next record to read).

    >>> src = PartitionSource("t", 2, {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> src.state_signature()
    "PartitionSource(topic='t', partition=2, keys=False)"
    """

    def __init__(
        self, topic: str, partition: int, consumer_params: dict[str, Any], **kwargs: Any
    ) -> None:
        super().__init__([topic], consumer_params, **kwargs)
        self.partition = int(partition)
        self.partitions.only = {(topic, self.partition)}
        self._params, self._options = dict(consumer_params), dict(kwargs)
        #: the sources of other topics the task reads (co-partitioned or global)
        self.partners: list[KafkaBatchedSource] = []

    def co_partitioned(self, topic: str) -> PartitionSource:
        """A source reading the same partition of ``topic``: the other side of a join by key.

        ``topic`` must have as many partitions as the task's topic, keyed
        alike (checked when the job starts).  Its offsets are kept in the
        task's checkpoints only.
        """
        src = PartitionSource(topic, self.partition, self._params, **self._options)
        src.read_only()
        self.partners.append(src)
        return src

    def global_topic(self, topic: str) -> KafkaBatchedSource:
        """A source reading every partition of ``topic`` in this task (a global table).

        No co-partitioning needed; every task reads all of it.  Its offsets
        are kept in the task's checkpoints only.
        """
        src = KafkaBatchedSource([topic], self._params, **self._options)
        src.read_only()
        self.partners.append(src)
        return src

    def state_signature(self) -> str:
        # a task's checkpoint belongs to its partition: another one's is refused
        return (
            f"PartitionSource(topic={self.topics[0]!r}, partition={self.partition}, "
            f"keys={self.keys!r})"
        )


@dataclass
class _Task:
    """One partition's graph and job in this process."""

    tp: TP
    job: Job
    future: concurrent.futures.Future[None] | None = None
    revoked: bool = False


def _check_control_port(port: object) -> None:
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535
    ):
        raise ConfigurationError(
            f"PartitionedJob: control_port must be a TCP port number (0-65535) or None, got "
            f"{port!r}; pass e.g. control_port=8081"
        )


def _check_instance_id(instance_id: object, consumer_params: Mapping[str, object]) -> None:
    if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
        raise ConfigurationError(
            f"PartitionedJob: instance_id must be a non-empty string, 'auto' or None, got "
            f"{instance_id!r}"
        )
    if instance_id not in ("auto", None) and "group.instance.id" in consumer_params:
        raise ConfigurationError(
            "PartitionedJob: both instance_id= and consumer_params['group.instance.id'] "
            "are set; pass one"
        )


def _task_failure(e: BaseException) -> BaseException | None:
    """The cause in ``e``'s chain that only ends its task (see ``_TASK_FAILURES``), or None."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, _TASK_FAILURES):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


class PartitionedJob:
    """Run ``build(source)`` once per input partition this process owns (see the module docs).

    ``topics`` and ``consumer_params`` (with ``bootstrap.servers`` and the
    ``group.id`` shared by every process; copied, never changed) name the
    input; ``build`` is called with each task's :class:`PartitionSource` and
    returns a node of the graph it built on it (e.g. the sink).  It is
    called once when the job is created, to check the graph.
    ``checkpoint`` is the location shared by every process (a directory on a
    shared file system or an object-store URL); each task's store is
    ``<checkpoint>/tasks/<topic>-<partition>``.  ``batched`` chooses
    ``from_kafka_batched`` (lists per partition) or ``from_kafka`` (one
    record at a time); ``source_options`` go to the source (``poll_interval``,
    ``max_batch_size``, ``keys``, ...), ``every``, ``every_batches``,
    ``keep``, ``exactly_once``, ``on_error``, ``allow_new_nodes``,
    ``checkpoint_key``, ``trust_store`` and the state backend (``state``,
    ``state_cache``: each task's own cache) to every task's
    :class:`~rivermark.checkpoint.Job`; a task keeps RocksDB state in
    ``<state_dir>/<topic>-<partition>``.  ``control_port`` serves the
    control API for this process's tasks on ``control_addr`` (loopback by
    default; ``0`` picks a free port, :attr:`control_url` says which): see
    :mod:`rivermark.kafka.group_control`.
    """

    def __init__(
        self,
        topics: str | list[str],
        consumer_params: dict[str, Any],
        build: Callable[[PartitionSource], Stream],
        checkpoint: str | os.PathLike[str],
        *,
        batched: bool = True,
        source_options: dict[str, Any] | None = None,
        revoke_timeout: float = 60.0,
        instance_id: str | None = "auto",
        control_port: int | None = None,
        control_addr: str = "127.0.0.1",
        **job_options: Any,
    ) -> None:
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            raise ConfigurationError(
                f"PartitionedJob: topics must be a topic name or a non-empty list of names, "
                f"got {topics!r}; pass e.g. 'events'"
            )
        if not isinstance(consumer_params, dict) or not {
            "bootstrap.servers",
            "group.id",
        } <= set(consumer_params):
            raise ConfigurationError(
                "PartitionedJob: consumer_params must be a dict with 'bootstrap.servers' and the "
                f"'group.id' every process shares, got {consumer_params!r}"
            )
        if not callable(build):
            raise ConfigurationError(
                f"PartitionedJob: build must be a function that builds the graph on a source, "
                f"got {build!r}; pass e.g. lambda source: source.map(f).to_kafka(...)"
            )
        if not isinstance(checkpoint, (str, os.PathLike)):
            raise ConfigurationError(
                f"PartitionedJob: checkpoint must be a directory or an object-store URL shared "
                f"by every process, got {checkpoint!r}"
            )
        options = dict(source_options or {})
        if not batched:
            options.setdefault("poll_interval", 0.1)  # from_kafka's default
        for name, why in _REFUSED_SOURCE_OPTIONS.items():
            if name in options:
                raise ConfigurationError(
                    f"PartitionedJob: source option {name}={options[name]!r} is not supported "
                    f"({why}); remove it"
                )
        unknown = sorted(set(job_options) - set(_JOB_OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"PartitionedJob: unknown option {unknown[0]!r}; the options passed to every "
                f"task's Job are {', '.join(_JOB_OPTIONS)}"
            )
        if isinstance(revoke_timeout, bool) or not isinstance(revoke_timeout, (int, float)):
            raise ConfigurationError(
                f"PartitionedJob: revoke_timeout must be a number of seconds, got {revoke_timeout!r}"
            )
        _check_control_port(control_port)
        self.control_port, self.control_addr = control_port, control_addr
        self.control: GroupControl | None = None
        #: a graceful stop was asked for (signal, stop(), the control API)
        self.stop_requested = False
        #: who asked for the stop first (``Ctrl-C (SIGINT)``, ``SIGTERM``, ...)
        self.stop_reason: str | None = None
        #: run() has returned (or is returning)
        self.ended = False
        self._stop_savepoint = False
        self.consumer_params: dict[str, Any] = dict(consumer_params)
        self.build = build
        text = os.fspath(checkpoint)
        self.location = text.rstrip("/") if "://" in text else os.path.abspath(text)
        self.batched = bool(batched)
        self.source_options = options
        self.job_options = job_options
        self.revoke_timeout = float(revoke_timeout)
        _check_instance_id(instance_id, consumer_params)
        self.instance_id = instance_id
        #: the group.instance.id this process joined with (None: dynamic membership)
        self.member_identity: str | None = None
        #: partitions whose task gave up, with the time it may start again
        self._retry: dict[TP, float] = {}
        #: the tasks this process runs now, by (topic, partition)
        self.tasks: dict[TP, _Task] = {}
        self._consumer: Any = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._incremental = True
        #: partitions the group assigned to this process
        self._owned: set[TP] = set()
        #: offsets waiting to be committed to the group, with their metadata tag
        self._pending: dict[TP, tuple[int, str]] = {}
        self._pending_lock = threading.Lock()
        #: the offsets committed to the group, and those it does not hold yet (.commits)
        self._commits = GroupCommits("PartitionedJob")
        #: the metadata tag of each partition's newest offset
        self._tags: dict[TP, str] = {}
        self._runner: threading.Thread | None = None
        # build one task's graph now, so that a graph that cannot be partitioned
        # is refused before the process joins the group
        first = self._make_graph((self.topics[0], 0))
        #: the topics each task reads the same partition of (checked when the job starts)
        self.co_partitioned = [
            p.topics[0] for p in first.partners if isinstance(p, PartitionSource)
        ]

    # ------------------------------------------------------------------ tasks
    def task_location(self, topic: str, partition: int) -> str:
        """The checkpoint store of one partition's task."""
        if "://" in self.location:
            return f"{self.location}/tasks/{topic}-{partition}"
        return os.path.join(self.location, "tasks", f"{topic}-{partition}")

    def _task_options(self, tp: TP) -> dict[str, object]:
        """The options of one task's Job: its own directory of RocksDB state."""
        options = dict(self.job_options)
        if options.get("state_dir") is not None:
            options["state_dir"] = os.path.join(options["state_dir"], f"{tp[0]}-{tp[1]}")
        return options

    def _make_graph(self, tp: TP) -> PartitionSource:
        params = {
            k: v
            for k, v in self.consumer_params.items()
            if k not in ("partition.assignment.strategy", "group.instance.id")
        }
        source = PartitionSource(tp[0], tp[1], params, batched=self.batched, **self.source_options)
        node = self.build(source)
        self._check_graph(source, node)
        return source

    def _check_graph(self, source: PartitionSource, node: object) -> None:
        # optional: a callable object has no __qualname__
        name = getattr(self.build, "__qualname__", repr(self.build))
        if not isinstance(node, Stream):
            raise ConfigurationError(
                f"PartitionedJob: build {name} must return a node of the graph it built on the "
                f"source it was given, got {node!r}; return e.g. the sink"
            )
        nodes = graph.topological(node)
        if not any(n is source for n in nodes):
            raise ConfigurationError(
                f"PartitionedJob: build {name} returned {node!r}, which is not connected to the "
                "source it was given; build the graph on that source (each partition gets its "
                "own copy)"
            )
        partners = source.partners
        others = [
            n
            for n in nodes
            if not n.upstreams and n is not source and not any(n is p for p in partners)
        ]
        if others:
            raise ConfigurationError(
                f"PartitionedJob: the graph of build {name} has another input besides the "
                f"partition's source: {others[0]!r}; a partitioned job keeps state per input "
                "partition, so every node must depend on that partition's records only (a "
                "second source, or a join with another stream, cannot be split by partition). "
                "Read another topic with source.co_partitioned(topic) or "
                "source.global_topic(topic), or run that part as its own Job"
            )
        for n in nodes:
            if isinstance(n, ToKafka) and n.exactly_once and n.transactional_id is not None:
                raise ConfigurationError(
                    f"PartitionedJob: {n!r} has transactional_id={n.transactional_id!r}, which "
                    "every task would share (they would fence each other); remove it: each "
                    "task's id is derived from its checkpoint location"
                )

    def _start_task(self, tp: TP) -> None:
        source = self._make_graph(tp)
        source.offset_committer = self._commit
        job = Job(source, checkpoint=self.task_location(*tp), **self._task_options(tp))
        task = _Task(tp, job)
        assert self._loop is not None
        task.future = asyncio.run_coroutine_threadsafe(self._run_task(task), self._loop)
        self.tasks[tp] = task
        logger.info("task %s[%d] started (store %s)", tp[0], tp[1], self.task_location(*tp))

    async def _run_task(self, task: _Task) -> None:
        waiting = False
        try:
            while not task.revoked:
                try:
                    await task.job.run_async()
                    return
                except CheckpointLockedError as e:
                    # the previous owner has not released the partition's store yet
                    if not waiting:
                        logger.info("task %s[%d] waits for the store: %s", *task.tp, e)
                        waiting = True
                    await asyncio.sleep(0.2)
        finally:
            # nobody reads a stopped task's state: its RocksDB databases (and their
            # caches) are closed now, not when the process ends
            task.job.state_backend.close()

    def _stop_tasks(self, tps: list[TP], savepoint: bool = False) -> None:
        """Stop these tasks with a final checkpoint (a savepoint) each, and wait (polling thread)."""
        tasks = [self.tasks.pop(tp) for tp in tps if tp in self.tasks]
        for task in tasks:
            task.revoked = True
        deadline = time.monotonic() + self.revoke_timeout
        # who asked, as the task's end state reports it
        reason = (
            (self.stop_reason or "the process stopped")
            if self._stop.is_set()
            else "its partition was revoked or lost"
        )
        for task in tasks:
            stopper = threading.Thread(
                target=task.job.stop,
                kwargs={"savepoint": savepoint, "reason": reason},
                daemon=True,
            )
            stopper.start()
        for task in tasks:
            assert task.future is not None
            try:
                task.future.result(max(0.0, deadline - time.monotonic()))
                logger.info("task %s[%d] stopped", *task.tp)
            except concurrent.futures.TimeoutError:
                logger.warning(
                    "task %s[%d] did not stop within revoke_timeout=%gs; its store stays locked "
                    "until it does",
                    *task.tp,
                    self.revoke_timeout,
                )
            except BaseException as e:
                self._fail(task, e)

    def _fail(self, task: _Task, e: BaseException) -> None:
        """A task failed: give its partition up (see ``_TASK_FAILURES``), else stop the process."""
        cause = _task_failure(e)
        if cause is not None:
            logger.error(
                "task %s[%d] gave its partition up: %s; the other tasks go on%s",
                task.tp[0],
                task.tp[1],
                cause,
                f", and it starts again from its last checkpoint in {RETRY_AFTER:g}s while "
                "this process owns the partition"
                if not task.revoked
                else "",
            )
            if not task.revoked:
                self._retry[task.tp] = time.monotonic() + RETRY_AFTER
            return
        logger.error("task %s[%d] failed: %s", task.tp[0], task.tp[1], e)
        if self._error is None:
            self._error = e
        self._stop.set()

    def _check_tasks(self) -> None:
        for tp, task in list(self.tasks.items()):
            if task.future is not None and task.future.done():
                del self.tasks[tp]
                exc = task.future.exception()
                if exc is not None:
                    self._fail(task, exc)
        now = time.monotonic()
        for tp, when in list(self._retry.items()):
            if tp not in self._owned:
                del self._retry[tp]
            elif when <= now and tp not in self.tasks and not self._stop.is_set():
                del self._retry[tp]
                self._start_task(tp)

    # ------------------------------------------------------------------ the group
    def _commit(self, offsets: dict[TP, int], tag: str) -> None:
        """Queue a task's checkpointed offsets for the group (committed by the polling thread).

        Every call on the group's consumer is made from its polling thread: a
        commit from the event loop's thread while that consumer polls was seen
        to block both threads.
        """
        with self._pending_lock:
            for tp, offset in offsets.items():
                self._pending[tp] = (offset, tag)

    def _flush_commits(self, wait: bool = False) -> None:
        """Commit the queued offsets of the partitions this process still owns (polling thread).

        With them go the offsets the group does not hold although they were
        sent (a commit refused during a rebalance, or applied out of order:
        :mod:`.commits`).  ``wait``: synchronously, before partitions are
        given up or the process ends.
        """
        import confluent_kafka as ck

        with self._pending_lock:
            pending, self._pending = self._pending, {}
        offsets = self._commits.due(at_once=wait)
        for tp, (offset, tag) in pending.items():
            offsets[tp] = offset
            self._tags[tp] = tag
        owned = {tp: o for tp, o in offsets.items() if tp in self._owned}
        if not owned or self._consumer is None:
            return
        parts = [ck.TopicPartition(t, p, o, self._tags.get((t, p))) for (t, p), o in owned.items()]
        try:
            self._consumer.commit(offsets=parts, asynchronous=not wait)
        except ck.KafkaException as e:
            if e.args and isinstance(e.args[0], ck.KafkaError) and e.args[0].fatal():
                self._commits.forget(list(owned))  # a fenced member: no commit of it lands
            else:
                self._commits.unsent(owned)
            logger.log(
                logging.INFO if wait else logging.DEBUG,
                "committing %s to the group failed (tried again; the offsets there are "
                "informational): %s",
                owned,
                e,
            )
            return
        if wait:
            self._commits.confirmed(owned)
        else:
            self._commits.record(owned)

    def _final_commits(self, consumer: Any) -> None:
        """The final checkpoints' offsets into the group, through the rebalance stopping causes.

        When processes stop together, one leaving the group starts a
        rebalance during which the others' commits are refused: each tries
        again while it takes part in the rebalance, for at most
        :data:`FINAL_COMMITS_WITHIN` seconds.
        """
        end = time.monotonic() + FINAL_COMMITS_WITHIN
        while True:
            self._flush_commits(wait=True)
            if self._commits.settled():
                return
            if time.monotonic() >= end:
                logger.warning(
                    "the group does not hold the final offsets of %s after %.0f s: lag tools "
                    "show them behind until the partitions' next checkpoints (the checkpoints "
                    "hold the positions)",
                    sorted(self._owned),
                    FINAL_COMMITS_WITHIN,
                )
                return
            consumer.poll(0.2)  # commits' answers, and the rebalance that refused one

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if self._incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if partitions:
            # the tasks' sources read; this consumer only holds the membership
            consumer.pause(partitions)
        gained = [(tp.topic, tp.partition) for tp in partitions]
        self._owned.update(gained)
        logger.info("partitions assigned: %s", gained)
        for tp in gained:
            self._retry.pop(tp, None)
            if tp not in self.tasks and not self._stop.is_set():
                self._start_task(tp)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        lost = [(tp.topic, tp.partition) for tp in partitions]
        logger.info("partitions revoked: %s", lost)
        self._stop_tasks(lost)
        self._flush_commits(wait=True)  # the final checkpoints' offsets, while still a member
        self._owned.difference_update(lost)
        self._commits.forget(lost)  # their next owner commits them
        if self._incremental:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        # this process missed its session timeout: the partitions may have a new
        # owner already, which waits for each task's store until the task stopped
        logger.warning(
            "partitions lost (session timed out): %s",
            [(tp.topic, tp.partition) for tp in partitions],
        )
        self._on_revoke(consumer, partitions)

    def _member_conf(self, slot: InstanceSlot) -> dict[str, object]:
        """The group consumer's configuration, with this process's static identity."""
        conf = dict(self.consumer_params)
        conf["enable.auto.commit"] = False
        conf["on_commit"] = self._commits.callback(conf.get("on_commit"))
        conf.setdefault("partition.assignment.strategy", "cooperative-sticky")
        if "group.instance.id" not in conf and self.instance_id is not None:
            conf["group.instance.id"] = (
                slot.acquire() if self.instance_id == "auto" else self.instance_id
            )
        self.member_identity = conf.get("group.instance.id")
        return conf

    def run(self) -> None:
        """Join the group and run this process's tasks until :meth:`stop` (blocking).

        A fatal error (a task failure that is not one of the broker, fencing
        or lock failures a task gives its partition up for, or a fatal error
        of the group's consumer) stops every task and ends the process with
        one line on stderr and exit status 1 (``SystemExit``).
        """
        check_run_allowed()
        self._loop = runtime.background_loop()
        if runtime.in_loop_thread(self._loop):
            raise ConfigurationError(
                "PartitionedJob.run() was called on the event loop thread; call it from a thread"
            )
        slot = InstanceSlot(str(self.consumer_params["group.id"]), self.location)
        try:
            self._start_control()
            self._run_member(self._member_conf(slot))
        except (KafkaConnectorError, ConfigurationError) as e:
            self._error = self._error or e
        finally:
            self.ended = True
            slot.release()
            self._stop_control()
        if self._error is not None:
            line = str(self._error).splitlines()[0] if str(self._error) else repr(self._error)
            print(f"rivermark: PartitionedJob stopped: {line}", file=sys.stderr, flush=True)
            raise SystemExit(1)

    def _run_member(self, conf: dict[str, object]) -> None:
        import confluent_kafka as ck

        self._incremental = "cooperative" in str(conf["partition.assignment.strategy"])
        self._done.clear()
        self._runner = threading.current_thread()
        logger.info(
            "joining group %r as %s",
            conf["group.id"],
            f"static member {self.member_identity!r}"
            if self.member_identity
            else "a dynamic member",
        )
        self._consumer = consumer = ck.Consumer(conf)
        try:
            if self.co_partitioned:
                counts = partition_counts(consumer, [*self.topics, *self.co_partitioned])
                problem = co_partitioning_problem(counts, self.topics, self.co_partitioned)
                if problem is not None:
                    raise ConfigurationError(problem)
            consumer.subscribe(
                self.topics,
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            while not self._stop.is_set():
                msg = consumer.poll(0.2)  # rebalance callbacks run in here
                err = None if msg is None else msg.error()
                if err is not None and err.fatal():
                    raise KafkaConnectorError(f"fatal error of the group's consumer: {err.str()}")
                self._check_tasks()
                self._flush_commits()
        finally:
            self._stop.set()
            self._stop_tasks(list(self.tasks), savepoint=self._stop_savepoint)
            self._final_commits(consumer)
            try:
                consumer.close()  # a dynamic member leaves the group (no task is left)
            except RuntimeError as e:
                logger.debug("closing the group consumer: %s", e)
            self._consumer = None
            self._done.set()

    @property
    def error(self) -> BaseException | None:
        """The error that stopped the process (a task's or the group consumer's), if any."""
        return self._error

    def stop(self, savepoint: bool = False, reason: str = "PartitionedJob.stop()") -> None:
        """Stop every task with a final checkpoint and leave the group; waits up to a minute.

        With ``savepoint`` each task's final checkpoint is a savepoint.  ``reason``
        says who asked (the first one is kept; the control API reports it).
        """
        self.request_stop(savepoint, reason)
        if self._runner is not None and self._runner is not threading.current_thread():
            self.wait_stopped(60)

    def request_stop(self, savepoint: bool = False, reason: str = "PartitionedJob.stop()") -> None:
        """Ask for a graceful stop (returns at once; :meth:`wait_stopped` waits for it)."""
        self._stop_savepoint = self._stop_savepoint or savepoint
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop_requested = True
        self._stop.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Wait until every task stopped and the process left the group; False on timeout."""
        return self._done.wait(self.revoke_timeout + 60 if timeout is None else timeout)

    @property
    def control_url(self) -> str | None:
        """The control API's URL on this machine, while it is served."""
        if self.control is None or self.control.port is None:
            return None
        return local_url(self.control_addr, self.control.port)

    def _start_control(self) -> None:
        if self.control_port is None:
            return
        assert self._loop is not None
        self.control = GroupControl(self)
        start = self.control.start(self.control_port, self.control_addr)
        asyncio.run_coroutine_threadsafe(start, self._loop).result(60)

    def _stop_control(self) -> None:
        if self.control is None or self._loop is None:
            return
        stop = self.control.stop()
        try:
            asyncio.run_coroutine_threadsafe(stop, self._loop).result(90)
        except (concurrent.futures.TimeoutError, RuntimeError) as e:
            logger.warning("stopping the control API: %s", e)

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM: stop gracefully; a second signal exits at once (as ``Job``'s)."""
        received: list[int] = []

        def handler(signum: int, frame: object) -> None:
            received.append(signum)
            if len(received) == 1:
                logger.warning("signal %d: stopping every task with a final checkpoint", signum)
                self.request_stop(reason=signal_reason(signum))
                return
            os._exit(128 + signum)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
