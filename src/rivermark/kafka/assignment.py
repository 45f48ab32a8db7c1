"""Which partitions a Kafka source reads, and where each starts.

The partition listing (refreshed while running; a topic that is missing is
warned about, a recreated one refused or re-read from its start), the
assignment of new partitions to the consumer, and their start offsets: the
restored position, the group's committed offsets (after checking that no
other live job commits to the group) or ``auto.offset.reset``, each checked
against the broker's range; with ``stop_at_end``, the end offsets.  See the
module docs of :mod:`rivermark.kafka.source` for the rules.

A :class:`~rivermark.kafka.source.KafkaBatchedSource` holds one
:class:`PartitionAssignment` (its ``partitions``), which keeps where every
partition is (``offsets``, the position), which are assigned and where a
bounded read ends; it reads the source's options and consumer through the
:class:`ReadingSource` protocol.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any, Protocol

from rivermark.kafka.errors import KafkaGroupInUseError, KafkaTopicError
from rivermark.kafka.offsets import OffsetTracker
from rivermark.kafka.ownership import live_owner
from rivermark.kafka.topic_ids import TopicIds, recreated_message

logger = logging.getLogger(__name__)

__all__ = ["PartitionAssignment", "ReadingSource", "split_key"]

_EARLIEST = ("earliest", "smallest", "beginning")


def split_key(key: str) -> tuple[str, int]:
    """``(topic, partition)`` of a position's ``"topic:partition"`` key."""
    topic, _, part = key.rpartition(":")
    return topic, int(part)


class ReadingSource(Protocol):
    """What a :class:`PartitionAssignment` reads from the source it serves.

    Options that can change after the source was made (``stop_at_end`` by
    ``stop_at``, ``group_takeover`` by ``read_only``, ``job_id`` by the job
    that adopts the source) and the consumer, which the source opens and
    closes.
    """

    topics: list[str]
    consumer_params: dict[str, Any]
    npartitions: int | None
    stop_at_end: bool
    allow_offset_reset: bool
    group_takeover: bool
    group_live_window: float
    job_id: str | None
    #: the ``confluent_kafka.Consumer`` (None before ``prepare`` and after ``close``)
    consumer: Any

    def display_name(self) -> str: ...

    def announce_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """Tell the nodes below the source that it reads ``partitions`` from now on."""
        ...


class PartitionAssignment:
    """Listing, assigning and positioning the partitions of a Kafka source (see module docs)."""

    def __init__(self, source: ReadingSource) -> None:
        self.source = source
        #: ``{"topic:partition": next offset}``: the source's position, without topic ids
        self.offsets: dict[str, int] = {}
        #: ``{topic: topic id}`` of the topics read (see ``topic_ids``); in the position
        self.topic_ids: dict[str, str] = {}
        #: the restored position's offsets (None: not restored)
        self.seek_position: dict[str, int] | None = None
        #: topics added to the subscription since the restored checkpoint: at start
        #: they begin as on a first run (see the source's ``restore_inputs``)
        self.new_topics: set[str] = set()
        #: completion of the emitted ranges per partition (what may be committed)
        self.tracker = OffsetTracker()
        #: the partitions assigned to the consumer
        self.assigned: set[tuple[str, int]] = set()
        #: stop_at_end: the end offset (high watermark at start) of every partition
        self.end: dict[tuple[str, int], int] = {}
        #: stop_at: where each partition's read ends (None: at the watermarks, or never)
        self.until: dict[tuple[str, int], int] | None = None
        #: partitions moved to a recreated topic's offsets (see the source's offset check)
        self.moved: set[tuple[str, int]] = set()
        #: when the partitions were last listed (``time.monotonic()``)
        self.last_refresh = 0.0
        #: whether a listing succeeded (the partitions found later were added while running)
        self.listed = False
        #: reading only these partitions (None: every partition of the topics)
        self.only: set[tuple[str, int]] | None = None
        self._missing_warned: dict[str, float] = {}
        self._ignored: set[tuple[str, int]] = set()
        self._committed_meta: dict[tuple[str, int], str] = {}
        self._id_lookup: TopicIds | None = None
        self._fresh_ids: dict[str, str] = {}

    def restore(self, offsets: dict[str, int], topic_ids: dict[str, str]) -> None:
        """Start every partition in ``offsets`` there on the next run (a restored position)."""
        self.seek_position = offsets
        self.topic_ids = dict(topic_ids)
        self.offsets = dict(offsets)

    def closed(self) -> None:
        """The source closed its consumer: nothing is assigned any more."""
        self._id_lookup = None
        self.assigned.clear()

    def _name(self) -> str:
        return self.source.display_name()

    def list_partitions(self) -> list[tuple[str, int]]:
        """The partitions to read now (blocking: runs in a thread)."""
        found: list[tuple[str, int]] = []
        listed: list[str] = []
        for topic in self.source.topics:
            md = self.source.consumer.list_topics(topic, timeout=5)
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None:
                self._warn_missing(topic, tmd.error if tmd is not None else None)
                continue
            self._missing_warned.pop(topic, None)
            listed.append(topic)
            parts = sorted(tmd.partitions)
            if self.source.npartitions is not None:
                parts = parts[: self.source.npartitions]
            found.extend((topic, p) for p in parts)
        lookup = self._id_lookup or TopicIds(self.source.consumer_params, self._name())
        self._id_lookup = lookup
        # compared with the recorded ids on the loop (``_check_topic_ids``)
        self._fresh_ids = lookup.lookup(listed)
        if self.only is not None:
            found = [tp for tp in found if tp in self.only]
        return found

    def _check_topic_ids(self) -> None:
        """Refuse (or, allowed, re-read from its start) an input topic whose id changed.

        Runs after each partition listing, before new partitions are assigned:
        at a restore, the ids come from the checkpoint.
        """
        fresh, self._fresh_ids = self._fresh_ids, {}
        for topic, new in fresh.items():
            old = self.topic_ids.get(topic)
            self.topic_ids[topic] = new
            moved = {tp for tp in self.moved if tp[0] == topic}
            self.moved -= moved
            if old is None or old == new:
                continue
            if not self.source.allow_offset_reset:
                self.topic_ids[topic] = old  # a checkpoint taken now still names the old one
                raise KafkaTopicError(recreated_message(self._name(), topic, old, new))
            logger.warning(
                "%s: input topic %r was deleted and recreated (topic id %r, now %r); "
                "allow_offset_reset=True: reading the new topic from its start",
                self._name(),
                topic,
                old,
                new,
            )
            self._forget_partitions(topic, moved)

    def _forget_partitions(self, topic: str, keep: set[tuple[str, int]]) -> None:
        """Drop ``topic``'s offsets so its partitions are assigned again from their start.

        ``keep``: partitions already moved to the new topic's offsets.
        """
        import confluent_kafka as ck

        drop = {tp for tp in self.assigned if tp[0] == topic} - keep
        if drop and self.source.consumer is not None:
            self.source.consumer.incremental_unassign([ck.TopicPartition(t, p) for t, p in drop])
        self.assigned -= drop
        for t, p in drop:
            self.end.pop((t, p), None)
        stale = {k for k in self.offsets if split_key(k)[0] == topic and split_key(k) not in keep}
        for key in stale:
            self.offsets.pop(key, None)
            if self.seek_position is not None:
                self.seek_position.pop(key, None)

    def _warn_missing(self, topic: str, error: Any) -> None:
        """WARNING when an input topic is missing: at once, then every minute."""
        now = time.monotonic()
        last = self._missing_warned.get(topic)
        if last is not None and now - last < 60.0:
            return
        self._missing_warned[topic] = now
        logger.warning(
            "%s: input topic %r does not exist on %r (%s); %s",
            self._name(),
            topic,
            self.source.consumer_params.get("bootstrap.servers"),
            error.str() if error is not None else "no metadata",
            "nothing to read (stop_at_end)"
            if self.source.stop_at_end
            else "the source waits for it: check the topic name",
        )

    def _check_group_owner(
        self, meta: dict[tuple[str, int], str], committed: dict[tuple[str, int], int] | None
    ) -> None:
        """Refuse to start while another live job commits to this group (see ``ownership``)."""
        if self.source.group_takeover or self.source.job_id is None:
            return
        found = live_owner(
            meta, self.source.job_id, committed, self.seek_position, self.source.group_live_window
        )
        if found is None:
            return
        other, t, p, ago = found
        raise KafkaGroupInUseError(
            f"{self._name()}: consumer group "
            f"{self.source.consumer_params.get('group.id')!r} is in use by another job "
            f"({other!r} committed {t}[{p}] {ago:.0f}s ago), and this job "
            f"is {self.source.job_id!r}: two jobs on one group both read every partition "
            "(duplicates). Use another group.id, stop the other job, or, if it has "
            f"stopped for good, wait {self.source.group_live_window:.0f}s or pass "
            "group_takeover=True to the source"
        )

    async def refresh(self) -> bool:
        """List the partitions and assign the new ones; False when the process is exiting."""
        import confluent_kafka as ck

        loop = asyncio.get_running_loop()
        try:
            parts = await loop.run_in_executor(None, self.list_partitions)
        except ck.KafkaException as e:
            logger.warning("%s: listing partitions failed (will retry): %s", self._name(), e)
            return True
        except RuntimeError:
            if not sys.is_finalizing() and "shutdown" not in str(sys.exc_info()[1]):
                raise
            # the process is exiting (e.g. after a job failed): end quietly
            return False
        finally:
            self.last_refresh = time.monotonic()
        self._check_topic_ids()
        # partitions of the first successful listing start at the configured
        # start; those found later were added while running
        initial, self.listed = not self.listed, True
        new = [tp for tp in parts if tp not in self.assigned]
        if self.source.stop_at_end and not initial and new:
            self._ignore_added(new)
        elif new:
            await self._assign_new(new, initial)
        return True

    def _ignore_added(self, new: list[tuple[str, int]]) -> None:
        """stop_at_end: partitions added after the start are not read (said once)."""
        if not set(new) <= self._ignored:
            logger.info(
                "%s: stop_at_end: ignoring partitions that appeared after the start: %s",
                self._name(),
                sorted(set(new) - self._ignored),
            )
            self._ignored |= set(new)

    async def _assign_new(self, new: list[tuple[str, int]], initial: bool) -> None:
        """Assign the consumer the partitions in ``new`` at their start offsets."""
        import confluent_kafka as ck

        loop = asyncio.get_running_loop()
        offsets = await loop.run_in_executor(None, self.start_offsets, new, initial)
        if self.source.stop_at_end:
            self.end.update(await loop.run_in_executor(None, self.end_offsets, new))
        if self.source.consumer is None:  # closed meanwhile (stopped)
            return
        assign = []
        for (t, p), off in zip(new, offsets):
            assign.append(ck.TopicPartition(t, p, off))
            if off >= 0:
                # every assigned partition has a position from the start, so a
                # checkpoint taken before its first record still pins it
                self.offsets[f"{t}:{p}"] = off
                self.tracker.reset(t, p, off)
            self.assigned.add((t, p))
        logger.info(
            "%s: assigning %s",
            self._name(),
            [(a.topic, a.partition, a.offset) for a in assign],
        )
        self.source.consumer.incremental_assign(assign)
        # the event-time nodes below wait for every partition that will deliver records
        # (a bounded read of a partition already at its end delivers none)
        self.source.announce_partitions(
            [tp for tp, off in zip(new, offsets) if off < self.end.get(tp, off + 1)]
        )

    def assign_again(self, parts: list[tuple[tuple[str, int], int]]) -> None:
        """Assign ``parts`` (each with its offset) once more: a partition the client stopped fetching.

        Unassigning and assigning resets the client's fetch state for the
        partition; records it still held for it are dropped and read again
        from the offset (see :mod:`rivermark.kafka.stalls`).
        """
        import confluent_kafka as ck

        consumer = self.source.consumer
        if consumer is None or not parts:
            return
        tps = [ck.TopicPartition(t, p, off) for (t, p), off in parts]
        consumer.incremental_unassign([ck.TopicPartition(t, p) for (t, p), _ in parts])
        consumer.incremental_assign(tps)
        # the source never pauses its own consumer: a partition paused there reads again
        consumer.resume(tps)

    def start_offsets(self, parts: list[tuple[str, int]], initial: bool) -> list[int]:
        """The offsets newly assigned partitions start at (concrete offsets when possible).

        * in the restored position: that offset (range-checked);
        * restored, of a topic the position does not know (added to the
          subscription since the checkpoint), at start: as on a first run;
        * restored, but not in the position: the partition appeared after the
          checkpoint, so from its first offset (said at INFO);
        * first run, at start: the group's committed offset, else
          ``auto.offset.reset``;
        * found while running: from its first offset.

        Falls back to a symbolic offset (resolved by the consumer) when the
        broker cannot be asked.  Runs in a thread (blocking calls).
        """
        import confluent_kafka as ck

        group_start = initial and self.seek_position is None
        committed = self._committed_offsets(parts) if initial else {}
        if initial:
            self._check_group_owner(self._committed_meta, committed)
        out: list[int] = []
        for t, p in parts:
            key = f"{t}:{p}"
            if self.seek_position is not None and key in self.seek_position:
                out.append(self._check_range(t, p, self.seek_position[key]))
                continue
            first_run = group_start or (initial and t in self.new_topics)
            if not first_run:
                if initial:
                    logger.info(
                        "%s: %s[%d] is not in the restored position (added since the "
                        "checkpoint): reading it from its first offset",
                        self._name(),
                        t,
                        p,
                    )
                out.append(self._first_offset(t, p))
                continue
            if committed is None:  # the group's offsets could not be read
                out.append(int(ck.OFFSET_STORED))
                continue
            if committed.get((t, p), -1) >= 0:
                out.append(self._check_range(t, p, committed[(t, p)]))
                continue
            try:
                low, high = self.source.consumer.get_watermark_offsets(
                    ck.TopicPartition(t, p), timeout=5
                )
            except (ck.KafkaException, RuntimeError) as e:
                logger.warning(
                    "%s: cannot resolve the start offset of %s[%d] (%s); the consumer resolves it",
                    self._name(),
                    t,
                    p,
                    e,
                )
                out.append(int(ck.OFFSET_STORED))
                continue
            reset = str(self.source.consumer_params.get("auto.offset.reset", "earliest")).lower()
            out.append(int(high if reset not in _EARLIEST else low))
        return out

    def _first_offset(self, t: str, p: int) -> int:
        """The first offset the broker holds of ``t[p]`` (symbolic if it cannot be asked)."""
        import confluent_kafka as ck

        try:
            low, _ = self.source.consumer.get_watermark_offsets(ck.TopicPartition(t, p), timeout=5)
        except (ck.KafkaException, RuntimeError) as e:
            logger.warning(
                "%s: cannot resolve the first offset of %s[%d] (%s); the consumer resolves it",
                self._name(),
                t,
                p,
                e,
            )
            return int(ck.OFFSET_BEGINNING)
        return int(low)

    def _committed_offsets(
        self, parts: list[tuple[str, int]], patience: float = 30.0
    ) -> dict[tuple[str, int], int] | None:
        """The group's committed offsets of ``parts`` (-1001 where none), or None.

        A fresh broker answers "not coordinator" for a while; retriable errors
        are retried for up to ``patience`` seconds.
        """
        import confluent_kafka as ck

        retry = {
            ck.KafkaError.NOT_COORDINATOR,
            ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            ck.KafkaError.COORDINATOR_NOT_AVAILABLE,
            ck.KafkaError._TRANSPORT,
            ck.KafkaError._TIMED_OUT,
        }
        deadline = time.monotonic() + patience
        while True:
            err: Any
            try:
                found = self.source.consumer.committed(
                    [ck.TopicPartition(t, p) for t, p in parts], timeout=5
                )
                errors = [f.error for f in found if f.error is not None]
                if not errors:
                    self._committed_meta = {
                        (f.topic, f.partition): f.metadata for f in found if f.metadata
                    }
                    return {(f.topic, f.partition): int(f.offset) for f in found}
                err = errors[0]
            except ck.KafkaException as e:
                err = e.args[0]
            except RuntimeError:  # the consumer was closed (stopped)
                return None
            retriable = err.retriable() or err.code() in retry
            if self.source.consumer is None or not retriable or time.monotonic() >= deadline:
                logger.warning(
                    "%s: cannot read the group's committed offsets (%s); the consumer resolves "
                    "the start offsets",
                    self._name(),
                    err,
                )
                return None
            time.sleep(0.2)

    def end_offsets(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """stop_at_end: each partition's high watermark now (where the read ends).

        After ``stop_at(position)``: the position's offsets instead; a
        partition it does not name is not read.
        """
        import confluent_kafka as ck

        if self.until is not None:
            return {tp: self.until.get(tp, 0) for tp in parts}
        out: dict[tuple[str, int], int] = {}
        for t, p in parts:
            _, high = self.source.consumer.get_watermark_offsets(
                ck.TopicPartition(t, p), timeout=10
            )
            out[(t, p)] = int(high)
        logger.info("%s: stop_at_end: reading up to %s", self._name(), out)
        return out

    def at_end(self) -> bool:
        """stop_at_end: every partition read up to its end offset."""
        import confluent_kafka as ck

        behind = [
            (t, p) for (t, p), end in self.end.items() if self.offsets.get(f"{t}:{p}", -1) < end
        ]
        if not behind:
            return True
        # transaction markers occupy offsets no record is read at: ask the
        # consumer where it would fetch next
        where = self.source.consumer.position([ck.TopicPartition(t, p) for t, p in behind])
        return all(tp.offset >= self.end[(tp.topic, tp.partition)] for tp in where)

    def _check_range(self, topic: str, partition: int, offset: int) -> int:
        """Apply the reset policy with a WARNING when ``offset`` is no longer on the broker."""
        import confluent_kafka as ck

        try:
            low, high = self.source.consumer.get_watermark_offsets(
                ck.TopicPartition(topic, partition), timeout=5
            )
        except ck.KafkaException as e:
            logger.warning(
                "%s: cannot read watermarks of %s[%d]: %s",
                self._name(),
                topic,
                partition,
                e,
            )
            return offset
        if low <= offset <= high:
            return offset
        reset = str(self.source.consumer_params.get("auto.offset.reset", "earliest")).lower()
        new = int(low if reset in _EARLIEST else high)
        logger.warning(
            "%s: checkpointed offset %d of %s[%d] is outside the broker's range [%d, %d] "
            "(retention?); applying auto.offset.reset=%r -> starting at %d. RECORDS MAY BE LOST.",
            self._name(),
            offset,
            topic,
            partition,
            low,
            high,
            reset,
            new,
        )
        return new
