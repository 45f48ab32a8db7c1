"""Kafka sources: ``from_kafka`` (one record at a time) and ``from_kafka_batched``.

Both run ONE long-lived ``confluent_kafka.Consumer`` per source node.
Partitions are assigned manually (no ``subscribe``, no rebalances): the
source lists the topics' partitions at start and refreshes that list
periodically (every poll when ``refresh_partitions=True``, else every
``metadata_refresh`` seconds), and a partition that appears while running
is read from its first offset.

Where a partition starts:

* after ``seek(position)`` (a checkpoint restore): at the checkpointed
  offset; an offset no longer on the broker (retention) is replaced by the
  consumer's ``auto.offset.reset`` policy with a loud WARNING; a partition the
  checkpoint does not name appeared after it and starts at its first offset;
  a topic whose id differs from the checkpoint's was recreated and is refused
  (see :mod:`rivermark.kafka.topic_ids`; ``allow_offset_reset=True`` reads it
  from its start);
* otherwise at the group's committed offset, else per ``auto.offset.reset``
  (``"earliest"`` unless the caller's config says otherwise).

The start offset is resolved to a number when the partition is assigned
(:meth:`KafkaBatchedSource.prepare`, which a job awaits before its first
checkpoint), so ``position()`` names every assigned partition, including
empty ones, and a crash before the first interval checkpoint replays from
exactly where the run began.  (The listing, the assignment and the start
offsets are the source's ``partitions``, a ``PartitionAssignment``.)

Offsets and completion.  Every emitted batch carries metadata
``[{"ref": RefCounter, "topic": t, "partition": p, "offset": first}]``.
Without a checkpoint job (at-least-once), when the counter completes the
range is marked finished in an :class:`~rivermark.kafka.offsets.OffsetTracker`
and only the contiguous finished prefix of each partition is committed to the
group, so a commit never passes a batch still in flight.  Under a job
(``source.checkpointing = True``, set by the first ``pause()``, which a job
calls for the checkpoint it takes before starting the sources) the source
does not commit completed ranges; instead a checkpoint's position is
committed to the group once that checkpoint is durable
(:meth:`KafkaBatchedSource.checkpoint_durable`, which the job calls after
the write; a failed checkpoint commits nothing), and once more, synchronously,
when the source closes, so lag tools see progress.  A job may also call
:meth:`KafkaBatchedSource.checkpoint_committed` itself.  Group offsets are
used only when there is no checkpoint.

Backpressure: each batch's emit is awaited before the next is read, and the
consumer's own prefetch is bounded (``queued.max.messages.kbytes``, default
here 16 MB unless the caller sets it).  The caller's config dict is copied,
never changed.
"""

from __future__ import annotations

import ast
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Unpack

from rivermark.core.graph import descendants
from rivermark.core.inputend import ReadsPartitions
from rivermark.core.node import NodeOptions, Stream
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.kafka.assignment import PartitionAssignment, split_key
from rivermark.kafka.bootstrap import CatchUp
from rivermark.kafka.commits import GroupCommits, commit_once
from rivermark.kafka.ownership import owner_tag
from rivermark.kafka.records import SingleRecords
from rivermark.kafka.stalls import FetchWatch
from rivermark.kafka.topic_ids import offsets_of, split_position, with_topic_ids
from rivermark.kafka.transactions import DeadlineExceeded, call_with_deadline
from rivermark.kafka.waiting import RecordWaiter
from rivermark.plugins import door

logger = logging.getLogger(__name__)

__all__ = ["KafkaBatchedSource", "KafkaSource", "from_kafka", "from_kafka_batched"]


def _commit_nothing(offsets: dict[tuple[str, int], int], tag: str) -> None:
    """The offset committer of a source that reads only (:meth:`KafkaBatchedSource.read_only`)."""


class KafkaBatchedSource(SingleRecords, CatchUp):
    """Read Kafka topics and emit lists of records per partition.

    See :func:`from_kafka_batched` for the parameters; the node is usually
    created through ``Stream.from_kafka_batched``.

    >>> src = KafkaBatchedSource(["t"], {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> src.position()
    {}
    >>> src.seek({"t:0": 5}); src.position()
    {'t:0': 5}
    """

    replayable = True
    #: a group whose offsets another job committed less than this many seconds ago is in use
    group_live_window: float = 60.0
    #: seconds the final commit and the consumer's close may take at stop
    close_timeout: float = 5.0

    def __init__(
        self,
        topics: str | list[str],
        consumer_params: Mapping[str, object],
        poll_interval: object = "1s",
        npartitions: int | None = None,
        refresh_partitions: bool = False,
        max_batch_size: int = 10000,
        keys: bool = False,
        engine: str | None = None,
        start: bool = False,
        batched: bool = True,
        metadata_refresh: float = 2.0,
        stop_at_end: bool = False,
        allow_offset_reset: bool = False,
        group_takeover: bool = False,
        timestamps: bool = False,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        kind = "from_kafka_batched" if batched else "from_kafka"
        if timestamps and batched:
            raise ConfigurationError(
                f"{kind}: timestamps=True gives each record its Kafka timestamp, which needs "
                "one record at a time; read with from_kafka(..., timestamps=True)"
            )
        if isinstance(topics, str):
            topics = [topics]
        if (
            not isinstance(topics, (list, tuple))
            or not topics
            or not all(isinstance(t, str) and t for t in topics)
        ):
            raise ConfigurationError(
                f"{kind}: topics must be a topic name or a non-empty list of names, got {topics!r}; "
                f"pass e.g. ['events']"
            )
        if not isinstance(consumer_params, dict) or "bootstrap.servers" not in consumer_params:
            raise ConfigurationError(
                f"{kind}: consumer_params must be a dict with 'bootstrap.servers' and 'group.id', "
                f"got {consumer_params!r}; pass e.g. "
                f"{{'bootstrap.servers': 'localhost:9092', 'group.id': 'mygroup'}}"
            )
        if "group.id" not in consumer_params:
            raise ConfigurationError(
                f"{kind}: consumer_params needs a 'group.id' (offsets are committed to the group), "
                f"got {consumer_params!r}; add e.g. 'group.id': 'mygroup'"
            )
        if (
            isinstance(max_batch_size, bool)
            or not isinstance(max_batch_size, int)
            or max_batch_size < 1
        ):
            raise ConfigurationError(
                f"{kind}: max_batch_size must be an integer >= 1, got {max_batch_size!r}; pass e.g. 10000"
            )
        if npartitions is not None and (
            isinstance(npartitions, bool) or not isinstance(npartitions, int) or npartitions < 1
        ):
            raise ConfigurationError(
                f"{kind}: npartitions must be None (all partitions) or an integer >= 1, "
                f"got {npartitions!r}; pass e.g. npartitions=4"
            )
        if engine is not None:
            raise ConfigurationError(
                f"{kind}: engine={engine!r} is not supported; pass engine=None (Python values)"
            )
        self.topics = list(topics)
        # a private copy: the caller's dict is never changed
        self.consumer_params: dict[str, Any] = dict(consumer_params)
        self.consumer_params.setdefault("auto.offset.reset", "earliest")
        self.consumer_params["enable.auto.commit"] = False
        self.consumer_params.setdefault("enable.partition.eof", False)
        self.consumer_params.setdefault("queued.max.messages.kbytes", 16384)
        self.poll_interval = parse_interval(poll_interval, kind, "poll_interval", allow_zero=True)
        self.npartitions = npartitions
        self.refresh_partitions = refresh_partitions
        self.max_batch_size = max_batch_size if batched else 1
        self.keys = keys
        self.batched = batched
        self.metadata_refresh = metadata_refresh
        self.stop_at_end = bool(stop_at_end)
        self.allow_offset_reset = bool(allow_offset_reset)
        self.group_takeover = bool(group_takeover)
        #: each record's metadata carries its Kafka timestamp (epoch seconds) as "timestamp"
        self.record_timestamps = bool(timestamps)
        #: set by a checkpoint job: offsets are then committed only after checkpoints
        self.checkpointing = False
        #: set by a checkpoint job: tags the group's offsets with the job that committed them
        self.job_id: str | None = None
        #: commits ``{(topic, partition): offset}`` with a metadata tag instead of this
        #: source's consumer (a partitioned job: only the group member may commit)
        self.offset_committer: Callable[[dict[tuple[str, int], int], str], None] | None = None
        self.consumer: Any = None
        #: which partitions are read and where each is (the position's offsets)
        self.partitions = PartitionAssignment(self)
        self._durable_position: dict[str, int] | None = None
        #: waits for records in a thread when the consumer holds none (see .waiting)
        self._waiter = RecordWaiter(kind, self.poll_interval, single=not batched)
        #: offsets to commit once the waiting thread left the consumer
        self._deferred: dict[tuple[str, int], int] = {}
        #: the offsets sent to the group, and those the broker refused (see .commits)
        self._commits = GroupCommits(kind)
        #: partitions the client stopped fetching, found and assigned again (see .stalls)
        self._fetch_watch = FetchWatch(kind)
        #: when the emit loop next gives the event loop a turn (perf_counter)
        self._turn_at = 0.0
        self.batches_emitted = 0
        self.records_emitted = 0
        super().__init__(start=start, **kwargs)

    def announce_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """Tell the event-time nodes below that ``partitions`` will deliver records.

        Each then holds the watermark until its first record (see
        ``docs/event-time.md``), so a backfill closes the windows a live read does.
        """
        if not partitions:
            return
        for n in descendants(self):
            if isinstance(n, ReadsPartitions):
                n.expect_partitions(partitions)

    # ---------------------------------------------------------------- positions
    def position(self) -> dict[str, object]:
        """``{"topic:partition": next_offset}`` for every partition read so far.

        Plus ``"topic_ids": {topic: id}`` once the broker named the topics' ids
        (see :mod:`rivermark.kafka.topic_ids`; read it with ``split_position``).
        """
        return with_topic_ids(self.partitions.offsets, self.partitions.topic_ids)

    def position_now(self) -> dict[str, int]:
        """The offsets only (for display)."""
        return dict(self.partitions.offsets)

    def lag(self) -> dict[str, int] | None:
        """High watermark minus the next offset, per ``topic:partition`` read so far.

        Uses the consumer's cached high watermarks (updated with every fetch),
        so it never waits for the broker.
        """
        consumer = self.consumer
        if consumer is None:
            return None
        import confluent_kafka as ck

        out: dict[str, int] = {}
        for key, offset in list(self.partitions.offsets.items()):
            topic, _, part = key.rpartition(":")
            try:
                _, high = consumer.get_watermark_offsets(
                    ck.TopicPartition(topic, int(part)), cached=True
                )
            except Exception:  # closed meanwhile, or nothing fetched yet
                continue
            if high is not None and high >= 0:
                out[key] = max(int(high) - int(offset), 0)
        return out

    def seek(self, position: object) -> None:
        """Start every partition named in ``position`` at its offset on the next run."""
        if position is None:
            return
        if not isinstance(position, dict):
            raise ConfigurationError(
                f"{self.display_name()}: seek() needs a dict {{'topic:partition': offset}}, "
                f"got {position!r}"
            )
        # a position written before topic ids were recorded has none: accepted,
        # and the ids are recorded from the next listing on
        offsets, ids = split_position(position)
        # the offsets of topics no longer subscribed are dropped
        offsets = {k: v for k, v in offsets.items() if split_key(k)[0] in self.topics}
        self.partitions.restore(offsets, {t: i for t, i in ids.items() if t in self.topics})
        # restored from a checkpoint: never commit uncheckpointed progress to the
        # group (a restored job takes no checkpoint before its sources start); a
        # partition missing from ``position`` appeared after the checkpoint and
        # is read from its first offset
        self.checkpointing = True

    def state_signature(self) -> str:
        return f"{type(self).__name__}(topics={sorted(self.topics)!r}, keys={self.keys!r})"

    def inputs_change(self, stored: str, position: object) -> str | None:
        """Topics added to or removed from the subscription since the checkpoint (one line).

        ``None`` unless ``stored`` (the checkpoint's signature of this source)
        differs from this one's by its topics only.  An added topic starts as
        on a first run: at the group's committed offsets, else per
        ``auto.offset.reset``; a removed topic's offsets are dropped.
        """
        old = self._stored_topics(stored)
        if old is None or set(old) == set(self.topics):
            return None
        added, removed = sorted(set(self.topics) - set(old)), sorted(set(old) - set(self.topics))
        offsets = offsets_of(position) if isinstance(position, dict) else {}
        said = []
        if added:
            reset = self.consumer_params.get("auto.offset.reset")
            said.append(
                f"topics added to the subscription: {', '.join(added)}; they start as on a "
                f"first run (the group's committed offsets, else auto.offset.reset={reset!r})"
            )
        if removed:
            gone = [f"{k}@{v}" for k, v in sorted(offsets.items()) if split_key(k)[0] in removed]
            said.append(
                f"topics no longer read: {', '.join(removed)}; their offsets are dropped "
                f"({', '.join(gone) or 'none'})"
            )
        return "; ".join(said)

    def restore_inputs(self, stored: str) -> None:
        """The topics the checkpoint's signature ``stored`` does not name start as on a first run."""
        old = self._stored_topics(stored)
        self.partitions.new_topics = set() if old is None else set(self.topics) - set(old)

    def _stored_topics(self, stored: str) -> list[str] | None:
        """The topics of ``stored``, a signature of this source's kind and ``keys``; else None."""
        m = re.fullmatch(rf"{type(self).__name__}\(topics=(\[.*\]), keys=(True|False)\)", stored)
        if m is None or m[2] != repr(self.keys):
            return None
        try:
            old = ast.literal_eval(m[1])
        except (ValueError, SyntaxError):
            return None
        if not isinstance(old, list) or not all(isinstance(t, str) for t in old):
            return None
        return old

    def stop_at(self, position: object) -> None:
        """Read every partition up to its offset in ``position`` (a bounded read, as ``stop_at_end``).

        Partitions that ``position`` does not name are not read.
        """
        if not isinstance(position, dict):
            raise ConfigurationError(
                f"{self.display_name()}: stop_at() needs a dict {{'topic:partition': offset}}, "
                f"got {position!r}"
            )
        self.partitions.until = {split_key(k): int(v) for k, v in offsets_of(position).items()}
        self.stop_at_end = True

    def stop_at_input_end(self) -> None:
        """Read every partition up to its high watermark at start, as ``stop_at_end=True``."""
        self.stop_at_end = True

    def read_only(self) -> None:
        """Commit no offsets to the consumer group, and read even while another job uses it."""
        self.offset_committer = _commit_nothing
        self.group_takeover = True

    def pause(self) -> None:
        """Hold the source at a checkpoint barrier; from then on it runs under a job.

        Under a job the source stops committing completed offsets by itself
        (the checkpoint holds the positions; see the module docs).
        """
        self.checkpointing = True
        super().pause()

    def checkpoint_durable(self, epoch: int, position: object) -> None:
        """Commit a durable checkpoint's position to the consumer group (for lag tools).

        Called by the job only once checkpoint ``epoch`` is durable, so the
        group's offsets never run ahead of a checkpoint (a failed checkpoint
        commits nothing).  Under a job the group offsets are informational (a
        restore uses the checkpoint), but lag tools and the detection of a
        second job on the same group read them.
        """
        self.checkpoint_committed(position)

    def checkpoint_committed(self, position: Any) -> None:
        """Commit ``position`` (a durable checkpoint's source position) to the group."""
        if not position:
            return
        self._durable_position = offsets_of(position)
        offsets = {split_key(k): v for k, v in self._durable_position.items()}
        if self.consumer is not None:
            self._commit(offsets)
        elif self.finished:
            # the final checkpoint of a source that ended (stop_at_end): its
            # consumer is closed, so commit through a short-lived one
            self._commit_once(offsets)

    # ---------------------------------------------------------------- consumer
    def _make_consumer(self) -> Any:
        import confluent_kafka as ck

        params = dict(self.consumer_params)
        params["on_commit"] = self._commits.callback(params.get("on_commit"))
        return ck.Consumer(params)

    def _owner_tag(self) -> str:
        """Metadata committed with the group's offsets: which job, and when."""
        return owner_tag(self.job_id)

    def _commit(self, offsets: dict[tuple[str, int], int]) -> None:
        import confluent_kafka as ck

        if not offsets or self.consumer is None:
            return
        tag = self._owner_tag()
        if self.offset_committer is not None:
            self.offset_committer(offsets, tag)
            return
        if self._waiter.busy:
            # one call on the consumer at a time: committed after the wait
            self._deferred.update(offsets)
            return
        if self._deferred:
            # offsets held back during a wait go first, overridden by the newer ones:
            # sent after them, they would move the group's offsets backwards
            offsets, self._deferred = {**self._deferred, **offsets}, {}
        tps = [ck.TopicPartition(t, p, o, tag) for (t, p), o in offsets.items()]
        try:
            self.consumer.commit(offsets=tps, asynchronous=True)
            self._commits.record(offsets)
        except ck.KafkaException as e:
            self._commits.unsent(offsets)
            logger.warning("%s: offset commit failed (sent again): %s", self.display_name(), e)

    def _commit_deferred(self) -> None:
        """Commit the offsets held back while the waiting thread was on the consumer."""
        if self._deferred:
            offsets, self._deferred = self._deferred, {}
            self._commit(offsets)

    def _commit_once(self, offsets: dict[tuple[str, int], int]) -> None:
        if self.offset_committer is not None:
            self.offset_committer(offsets, self._owner_tag())
        else:
            commit_once(self._make_consumer(), offsets, self._owner_tag(), self.display_name())

    def _on_complete(self, topic: str, partition: int, start: int, end: int) -> None:
        self.partitions.tracker.finished(topic, partition, start, end)
        if not self.checkpointing:
            self._commit(self.partitions.tracker.committable())

    # ---------------------------------------------------------------- main loop
    async def _refresh(self) -> None:
        """List the partitions and assign the new ones (the process exiting stops the source)."""
        if not await self.partitions.refresh():
            self.stopped = True

    async def prepare(self) -> None:
        """Create the consumer and resolve every partition's start offset.

        Called by a job before its first checkpoint (so that checkpoint holds
        concrete offsets even for ``auto.offset.reset="latest"`` or the group's
        offsets), else by :meth:`run`.
        """
        if self.consumer is None:
            self.consumer = self._make_consumer()
            try:
                await self._refresh()
            except BaseException:
                self.close()  # refused at start: the consumer does not stay behind
                raise

    async def run(self) -> None:
        await self.prepare()
        while not self.stopped:
            every = self.poll_interval if self.refresh_partitions else self.metadata_refresh
            if time.monotonic() - self.partitions.last_refresh >= every:
                await self._refresh()
            self.check_caught_up()  # a table's bootstrap (see .bootstrap)
            self._watch_fetches()
            again = self._commits.due()  # commits the group does not hold (see .commits)
            if again:
                self._commit(again)
            if self.stop_at_end and self.partitions.listed and self.partitions.at_end():
                name = self.display_name()
                logger.info("%s: stop_at_end: every partition read to its end; finishing", name)
                return
            n = max(self.max_batch_size, 500)
            msgs = self.consumer.consume(num_messages=n, timeout=0)
            if not msgs:
                msgs = await self._waiter.wait(self.consumer, n)
                self._commit_deferred()
                if not msgs:
                    continue
            await self._emit_messages(msgs)

    def _watch_fetches(self) -> None:
        """Assign again the partitions the client stopped fetching (see :mod:`.stalls`)."""
        if not self._fetch_watch.due():
            return
        parts = self.partitions
        reading: dict[tuple[str, int], int] = {}
        for tp in parts.assigned:
            offset = parts.offsets.get(f"{tp[0]}:{tp[1]}")
            end = parts.end.get(tp) if self.stop_at_end else None
            if offset is not None and (end is None or offset < end):
                reading[tp] = offset
        again = self._fetch_watch.check(self.consumer, reading)
        if again:
            parts.assign_again(again)

    async def _emit_messages(self, msgs: list[object]) -> None:
        if not self.batched:
            await self._emit_singles(msgs)
            return
        for (t, p), ms in self._by_partition(msgs).items():
            for i in range(0, len(ms), self.max_batch_size):
                chunk = ms[i : i + self.max_batch_size]
                if self.keys:
                    values: list[Any] = [{"key": m.key(), "value": m.value()} for m in chunk]
                else:
                    values = [m.value() for m in chunk]
                first, end = chunk[0].offset(), chunk[-1].offset() + 1
                origin = {"topic": t, "partition": p, "offset": first, "end": end}
                await self._emit_one(t, p, first, end, values, origin)
                if self.stopped:
                    return
                await self._turn()

    def _by_partition(self, msgs: list[Any]) -> dict[tuple[str, int], list[Any]]:
        """The records of ``msgs`` to emit per partition (as :meth:`_readable` keeps them).

        The consumer hands over runs of one partition: its position's key
        and a bounded read's end are looked up once a run, not per record.
        """
        groups: dict[tuple[str, int], list[Any]] = {}
        offsets = self.partitions.offsets
        last_t: str | None = None
        last_p = -1
        where = ""
        end: int | None = None
        run: list[Any] = []
        for m in msgs:
            err = m.error()
            if err is not None:
                self._consumer_error(err)
                continue
            t, p, off = m.topic(), m.partition(), m.offset()
            if p != last_p or t != last_t:
                last_t, last_p, where, end = t, p, f"{t}:{p}", self._end_of(t, p)
                run = groups.setdefault((t, p), [])
            if (off < offsets.get(where, off) or end is not None) and self._skip(m, end):
                continue
            run.append(m)
        return groups

    def _threads_left(self) -> bool:
        """Whether the threads calling the consumer left it (one call on it at a time)."""
        if not self._fetch_watch.join():
            logger.warning("%s: the broker did not answer an offset look-up", self.display_name())
            return False
        if not self._waiter.join():
            logger.warning("%s: the consumer's wait did not end", self.display_name())
            return False
        return True

    def close(self) -> None:
        """Commit the final offsets and close the consumer, within ``close_timeout``.

        An unreachable broker does not hold the stop longer than that: the
        consumer is then left behind (under a job the checkpoint holds the
        position; the group's offsets are informational).
        """
        consumer, self.consumer = self.consumer, None
        if consumer is None:
            self.partitions.closed()
            return
        if not self._threads_left():
            logger.warning("%s: the consumer is left behind", self.display_name())
            self.partitions.closed()
            return
        deferred, self._deferred = self._deferred, {}
        if self.checkpointing:
            # the newest durable checkpoint's position, committed once more
            # synchronously (the commit after each checkpoint is asynchronous)
            pos = self._durable_position or {}
            final = {split_key(k): int(v) for k, v in pos.items()}
        else:
            # everything sent once more (an asynchronous commit may have failed)
            final = {**self._commits.sent, **deferred, **self.partitions.tracker.committable()}
        tag = self._owner_tag()
        name = self.display_name()
        if self.offset_committer is not None and final:
            self.offset_committer(final, tag)
            final = {}

        def finish() -> None:
            import confluent_kafka as ck

            try:
                if final:
                    tps = [ck.TopicPartition(t, p, o, tag) for (t, p), o in final.items()]
                    consumer.commit(offsets=tps, asynchronous=False)
            except ck.KafkaException as e:
                logger.warning("%s: final commit failed: %s", name, e)
            finally:
                consumer.close()

        try:
            call_with_deadline("closing the consumer", finish, self.close_timeout)
        except DeadlineExceeded:
            logger.warning(
                "%s: the broker did not answer the final commit within %gs (unreachable?); "
                "the consumer is left behind",
                name,
                self.close_timeout,
            )
        except RuntimeError as e:  # the consumer was closed, or the process is exiting
            logger.debug("%s: closing the consumer: %s", name, e)
        finally:
            self.partitions.closed()
            logger.debug("%s: consumer closed", name)


class KafkaSource(KafkaBatchedSource):
    """Read Kafka topics and emit one record value at a time (see :func:`from_kafka`).

    >>> src = KafkaSource(["t"], {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> src.max_batch_size
    1
    """

    def __init__(
        self,
        topics: str | list[str],
        consumer_params: Mapping[str, object],
        poll_interval: object = 0.1,
        start: bool = False,
        keys: bool = False,
        **kwargs: Any,  # node options and KafkaBatchedSource's own (stop_at_end, ...)
    ) -> None:
        super().__init__(
            topics,
            consumer_params,
            poll_interval=poll_interval,
            start=start,
            keys=keys,
            batched=False,
            **kwargs,
        )


@Stream.register_api(staticmethod, attribute_name="from_kafka")
def from_kafka(
    topics: str | list[str],
    consumer_params: Mapping[str, object],
    poll_interval: object = 0.1,
    start: bool = False,
    **kwargs: Any,  # node options and KafkaSource's own (stop_at_end, timestamps, ...)
) -> KafkaSource:
    """Emit the value of every record of ``topics``, one at a time.

    ``consumer_params`` is a confluent-kafka consumer config (copied, never
    changed) with ``bootstrap.servers`` and ``group.id``.

    With ``timestamps=True`` each record's metadata also carries its Kafka
    timestamp in epoch seconds (``"timestamp"``: the producer's time, or the
    broker's on a ``LogAppendTime`` topic; None when the record has none),
    which ``stream.timestamps()`` without a function takes as the event
    time.  The options of :func:`from_kafka_batched` apply too.

    >>> src = Stream.from_kafka(["t"], {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> type(src).__name__, src.replayable
    ('KafkaSource', True)
    """
    return KafkaSource(topics, consumer_params, poll_interval=poll_interval, start=start, **kwargs)


@Stream.register_api(staticmethod, attribute_name="from_kafka_batched")
def from_kafka_batched(
    topic: str | list[str],
    consumer_params: Mapping[str, object],
    poll_interval: object = "1s",
    npartitions: int | None = None,
    refresh_partitions: bool = False,
    start: bool = False,
    dask: bool = False,
    max_batch_size: int = 10000,
    keys: bool = False,
    engine: str | None = None,
    **kwargs: Any,  # node options and KafkaSource's own (stop_at_end, timestamps, ...)
) -> Stream:
    """Emit lists of record values per partition (streamz's signature and argument order).

    ``topic`` is a name or a list of names; ``npartitions`` limits each topic
    to its first n partitions (None: all, also those added later);
    ``refresh_partitions`` looks for new partitions at every poll;
    ``max_batch_size`` caps a batch; with ``keys=True`` each element is
    ``{"key": key, "value": value}``; ``dask=True`` reads each partition's
    batches on Dask workers and returns the scattered stream of them (this
    process handles only offsets; see :mod:`rivermark.dask.kafka`).

    Options of both Kafka sources (keyword arguments):

    * ``stop_at_end=True``: a bounded read: every partition is read up to the
      high watermark it had when the source started, then the source
      finishes (a job then writes its final checkpoint and ends, exit 0);
      partitions that appear later are not read.  A resumed run reads up to
      the watermarks of its own start.
    * ``allow_offset_reset=True``: go on (with a WARNING) when an input topic
      was deleted and recreated (its topic id changed: the new topic is read
      from its start) or a partition's offsets go backwards (read from the
      new offsets); by default the source refuses with
      :class:`~rivermark.kafka.errors.KafkaTopicError`.
    * ``group_takeover=True``: start even though another job committed its
      checkpoints to this ``group.id`` within the last
      ``group_live_window`` (60) seconds; by default the source refuses
      with :class:`~rivermark.kafka.errors.KafkaGroupInUseError`.

    >>> src = Stream.from_kafka_batched("t", {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> src.topics, src.poll_interval
    (['t'], 1.0)
    """
    if dask and kwargs.get("stop_at_end"):
        raise ConfigurationError(
            "from_kafka_batched: stop_at_end=True is not supported with dask=True; "
            "pass dask=False for a bounded read"
        )
    options: dict[str, Any] = {
        "poll_interval": poll_interval,
        "npartitions": npartitions,
        "refresh_partitions": refresh_partitions,
        "max_batch_size": max_batch_size,
        "keys": keys,
        "engine": engine,
        "start": start,
        **kwargs,
    }
    if dask:
        scattered: Stream = door("from_kafka_batched_dask")(topic, consumer_params, **options)
        return scattered
    return KafkaBatchedSource(topic, consumer_params, **options)
