"""``from_kafka``'s emit loop: one record at a time, as the consumer hands them over.

A part of :class:`~rivermark.kafka.source.KafkaBatchedSource` (its base
class), which reads the records; this module emits them.

Every record carries metadata ``[{"ref": RefCounter, "topic": t,
"partition": p, "offset": o}]`` (plus ``"timestamp"`` with
``timestamps=True``) and runs with :data:`~rivermark.core.origin.record_origin`
naming it (for error messages and dead letters); once its downstream work
has finished, the source's position moves past it.

Two ways, with the same records, metadata, positions and counts:

* **Under a job** (``checkpointing``, no record-count budget) no offset
  range is tracked: the checkpoints hold the positions and the group's
  offsets follow them.  The records' ``ref`` is then one shared counter
  without a callback (nothing waits for it), and the loop emits each record
  itself, per partition naming the position's key once, with an ``await``
  only where there is something to wait for (asynchronous work below, a
  barrier's pause, the event loop's turn every ``TIME_SLICE``).
* **Otherwise** (at-least-once without a job, or a job with
  ``every_batches``) each record is one tracked offset range whose
  completion commits the group's offsets, through ``_emit_one``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rivermark.core import runtime
from rivermark.core.node import Stream
from rivermark.core.origin import record_origin
from rivermark.core.refs import Metadata, RefCounter, Untracked
from rivermark.kafka.errors import KafkaConnectorError, KafkaTopicError
from rivermark.sources.base import TIME_SLICE, Source

if TYPE_CHECKING:
    from confluent_kafka import Message

    from rivermark.kafka.assignment import PartitionAssignment

logger = logging.getLogger(__name__)

__all__ = ["SingleRecords", "record_time"]


#: ``Message.timestamp()``'s type of a record without a timestamp (TIMESTAMP_NOT_AVAILABLE)
_NO_TIMESTAMP = 0


def record_time(m: Message) -> float | None:
    """The record's Kafka timestamp (producer or broker time, per the topic) in epoch seconds."""
    kind, ms = m.timestamp()
    if kind == _NO_TIMESTAMP or ms < 0:
        return None
    return ms / 1000


#: the ``ref`` of every record of a source under a job (nothing waits for it)
_UNTRACKED = Untracked()


class SingleRecords(Source[dict[str, Any]]):
    """The per-record emit of a Kafka source (``from_kafka``); see the module docs."""

    # the reading source's (KafkaBatchedSource sets them)
    partitions: PartitionAssignment
    keys: bool
    record_timestamps: bool
    checkpointing: bool
    stop_at_end: bool
    allow_offset_reset: bool
    batches_emitted: int
    records_emitted: int
    batched: bool
    #: when the emit loop next gives the event loop a turn (perf_counter)
    _turn_at: float

    async def _turn(self) -> None:
        """Let the loop run every TIME_SLICE seconds of emitting.

        A job's checkpoint barrier (and any other task on the loop) would
        otherwise wait for the whole backlog when the graph is synchronous.
        """
        if time.perf_counter() >= self._turn_at:
            await asyncio.sleep(0)
            self._turn_at = time.perf_counter() + TIME_SLICE

    async def _emit_one(
        self, t: str, p: int, first: int, end: int, x: Any, origin: dict[str, Any]
    ) -> None:
        """Emit ``x`` (one record, or a batch of offsets ``[first, end)``) as one tracked range."""
        if self._pause_requested:
            await self._wait_resumed()
        if self.checkpointing:
            # offsets are committed after checkpoints only: no range to track
            ref: RefCounter = _UNTRACKED
        else:
            self.partitions.tracker.started(t, p, first, end)
            ref = RefCounter(initial=1, callback=self._completion(t, p, first, end))
        metadata: Metadata = [{"ref": ref, "topic": t, "partition": p, "offset": first}]
        if self.record_timestamps:
            metadata[0]["timestamp"] = origin["timestamp"]
        # if the emit raises (a user function under on_error="raise"), the batch
        # is neither completed (never committed to the group) nor passed by the
        # position: the source fails and a restart reads it again.  The origin
        # names the record's position in error messages and dead letters.
        token = record_origin.set(origin)
        try:
            await self._emit_record(x, None, metadata)
        finally:
            record_origin.reset(token)
        self.partitions.offsets[f"{t}:{p}"] = end
        self.batches_emitted += 1
        self.records_emitted += len(x) if self.batched else 1
        ref.release()

    async def _emit_singles(self, msgs: list[Any]) -> None:
        """One record at a time, in the order the consumer handed them over."""
        # (a subclass's own ``_emit`` is called by the tracked way)
        if self.checkpointing and self.budget is None and type(self)._emit is Stream._emit:
            await self._emit_untracked(msgs)
        else:
            await self._emit_tracked(self._readable(msgs))

    async def _emit_tracked(self, msgs: list[Any]) -> None:
        """Each record an offset range of its own, completed by its ``ref``."""
        keys, stamps = self.keys, self.record_timestamps
        for m in msgs:
            t, p, off, key = m.topic(), m.partition(), m.offset(), m.key()
            value = {"key": key, "value": m.value()} if keys else m.value()
            origin: dict[str, Any] = {"topic": t, "partition": p, "offset": off, "key": key}
            if stamps:
                origin["timestamp"] = record_time(m)
            await self._emit_one(t, p, off, off + 1, value, origin)
            if self.stopped:
                return
            await self._turn()

    async def _emit_untracked(self, msgs: list[Any]) -> None:
        """Under a job: the records without offset tracking, awaiting only what needs it.

        Each record's emit sets its origin; the origin before the first is
        put back once, at the end (the task's own context: no other task sees
        it meanwhile, and a task started by an emit keeps its record's).
        """
        token = record_origin.set(None)
        try:
            await self._emit_run(msgs)
        finally:
            record_origin.reset(token)

    async def _emit_run(self, msgs: list[Any]) -> None:
        keys, stamps = self.keys, self.record_timestamps
        offsets = self.partitions.offsets
        last_t: str | None = None
        last_p = -1
        where = ""
        end: int | None = None
        for m in msgs:
            err = m.error()
            if err is not None:
                self._consumer_error(err)
                continue
            t, p, off = m.topic(), m.partition(), m.offset()
            if p != last_p or t != last_t:  # the consumer hands over runs of one partition
                last_t, last_p, where, end = t, p, f"{t}:{p}", self._end_of(t, p)
            if (off < offsets.get(where, off) or end is not None) and self._skip(m, end):
                continue
            if self._pause_requested:
                await self._wait_resumed()
                offsets = self.partitions.offsets
            key = m.key()
            origin: dict[str, Any] = {"topic": t, "partition": p, "offset": off, "key": key}
            metadata: Metadata = [{"ref": _UNTRACKED, "topic": t, "partition": p, "offset": off}]
            if stamps:
                origin["timestamp"] = metadata[0]["timestamp"] = record_time(m)
            results = self._send(
                {"key": key, "value": m.value()} if keys else m.value(), metadata, origin
            )
            if results:
                await self._downstream(results)
                offsets = self.partitions.offsets
            offsets[where] = off + 1
            self.batches_emitted += 1
            self.records_emitted += 1
            if self.stopped:
                return
            if time.perf_counter() >= self._turn_at:
                await self._turn()
                offsets = self.partitions.offsets

    def _skip(self, m: Any, end: int | None) -> bool:
        """Refuse ``m`` if its offsets went backwards; whether a bounded read leaves it out."""
        self._check_forward(m)
        # written after the start of a bounded read: not read
        return end is not None and m.offset() >= end

    def _end_of(self, t: str, p: int) -> int | None:
        """Where a bounded read of partition ``p`` of ``t`` ends (None: not bounded)."""
        return self.partitions.end.get((t, p)) if self.stop_at_end else None

    def _send(
        self, x: Any, metadata: Metadata, origin: dict[str, Any]
    ) -> list[Awaitable[object]] | None:
        """Emit one record, its origin set; the asynchronous work it left below, if any.

        If the emit raises (a user function under ``on_error="raise"``), the
        record is not passed by the position: the source fails and a restart
        reads it again (and no checkpoint follows: ``failure``).
        """
        self._emitting = True
        self.emitted += 1
        record_origin.set(origin)
        try:
            return self._push(x, metadata)  # what ``_emit`` calls
        except Exception as e:
            if self.failure is None:
                self.failure = e
            raise
        finally:
            self._emitting = False

    async def _downstream(self, results: list[Awaitable[object]]) -> None:
        """Wait for the asynchronous work a record left below (backpressure)."""
        self._emitting = True
        try:
            await runtime.gather_results(results)
        except Exception as e:
            if self.failure is None:
                self.failure = e
            raise
        finally:
            self._emitting = False

    # ---------------------------------------------------------------- reading
    def _consumer_error(self, err: Any) -> None:
        """A message that carries an error: logged, fatal ones raised (end of partition: nothing)."""
        if err.code() != -191:  # _PARTITION_EOF
            logger.warning("%s: consumer error: %s", self.display_name(), err)
            if err.fatal():
                raise KafkaConnectorError(f"{self.display_name()}: fatal consumer error: {err}")

    def _readable(self, msgs: list[Any]) -> list[Any]:
        """The records of ``msgs`` to emit (errors reported, a bounded read's overshoot left out)."""
        out = []
        for m in msgs:
            err = m.error()
            if err is not None:
                self._consumer_error(err)
                continue
            self._check_forward(m)
            end = self._end_of(m.topic(), m.partition())
            if end is not None and m.offset() >= end:
                continue  # written after the start of a bounded read: not read
            out.append(m)
        return out

    def _check_forward(self, m: Any) -> None:
        """Refuse a record below the partition's position (its offsets went backwards)."""
        t, p, off = m.topic(), m.partition(), m.offset()
        expected = self.partitions.offsets.get(f"{t}:{p}")
        if expected is None or off >= expected:
            return
        what = (
            f"{self.display_name()}: the offsets of topic {t!r} partition {p} went backwards "
            f"(the next offset was {expected}, the broker returned {off}): the topic was "
            "deleted and recreated, or truncated"
        )
        if not self.allow_offset_reset:
            raise KafkaTopicError(
                f"{what}; refusing to continue, since its records would be read as if they "
                "were new (or skipped). Check the topic; to read the partition from its new "
                "offsets, pass allow_offset_reset=True to the source and run again"
            )
        logger.warning("%s; allow_offset_reset=True: continuing from offset %d", what, off)
        self.partitions.moved.add((t, p))
        self.partitions.offsets[f"{t}:{p}"] = off
        self.partitions.tracker.reset(t, p, off)

    def _completion(self, t: str, p: int, first: int, end: int) -> Callable[[], None]:
        """What completes the range ``[first, end)`` of partition ``p`` of ``t``."""

        def done() -> None:
            self._on_complete(t, p, first, end)

        return done

    def _on_complete(self, topic: str, partition: int, start: int, end: int) -> None:
        raise NotImplementedError  # the reading source's
