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
* otherwise at the group's committed offset, else per ``auto.offset.reset``
  (``"earliest"`` unless the caller's config says otherwise).

The start offset is resolved to a number when the partition is assigned
(:meth:`KafkaBatchedSource.prepare`, which a job awaits before its first
checkpoint), so ``position()`` names every assigned partition, including
empty ones, and a crash before the first interval checkpoint replays from
exactly where the run began.

Offsets and completion.  Every emitted batch carries metadata
``[{"ref": RefCounter, "topic": t, "partition": p, "offset": first}]``.
Without a checkpoint job (at-least-once), when the counter completes the
range is marked finished in an :class:`~rivermark.kafka.offsets.OffsetTracker`
and only the contiguous finished prefix of each partition is committed to the
group, so a commit never passes a batch still in flight.  Under a job
(``source.checkpointing = True``, set by the first ``pause()``, which a job
calls for the checkpoint it takes before starting the sources) the source
does not commit completed ranges; instead the position taken at each
checkpoint barrier is committed to the group when the barrier ends
(``resume``) or when the job's final checkpoint closes the source, so lag
tools see progress.  A job may also call
:meth:`KafkaBatchedSource.checkpoint_committed` itself.  Group offsets are
used only when there is no checkpoint.

Backpressure: each batch's emit is awaited before the next is read, and the
consumer's own prefetch is bounded (``queued.max.messages.kbytes``, default
here 16 MB unless the caller sets it).  The caller's config dict is copied,
never changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ..core.node import Stream
from ..core.refs import Metadata, RefCounter
from ..errors import ConfigurationError
from ..sources.base import Source
from .errors import KafkaConnectorError
from .offsets import OffsetTracker

logger = logging.getLogger(__name__)

__all__ = ["KafkaBatchedSource", "KafkaSource", "from_kafka", "from_kafka_batched"]

_EARLIEST = ("earliest", "smallest", "beginning")


def _parse_interval(value: Any, node_kind: str, arg: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str):
        try:
            import pandas as pd

            return float(pd.Timedelta(value).total_seconds())
        except (ValueError, ImportError):
            pass
    raise ConfigurationError(
        f"{node_kind}: {arg} must be a number of seconds or a duration string, got {value!r}; "
        f"pass e.g. {arg}=0.1 or {arg}='1s'"
    )


class KafkaBatchedSource(Source):
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

    def __init__(
        self,
        topics: str | list[str],
        consumer_params: dict[str, Any],
        poll_interval: Any = "1s",
        npartitions: int | None = None,
        refresh_partitions: bool = False,
        max_batch_size: int = 10000,
        keys: bool = False,
        engine: str | None = None,
        start: bool = False,
        batched: bool = True,
        metadata_refresh: float = 2.0,
        **kwargs: Any,
    ) -> None:
        kind = "from_kafka_batched" if batched else "from_kafka"
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
        self.poll_interval = _parse_interval(poll_interval, kind, "poll_interval")
        self.npartitions = npartitions
        self.refresh_partitions = refresh_partitions
        self.max_batch_size = max_batch_size if batched else 1
        self.keys = keys
        self.batched = batched
        self.metadata_refresh = metadata_refresh
        #: set by a checkpoint job: offsets are then committed only after checkpoints
        self.checkpointing = False
        self.consumer: Any = None
        self._offsets: dict[str, int] = {}
        self._seek_position: dict[str, int] | None = None
        self._assigned: set[tuple[str, int]] = set()
        self._tracker = OffsetTracker()
        self._last_refresh = 0.0
        self._listed = False
        self._barrier_position: dict[str, int] | None = None
        self.batches_emitted = 0
        self.records_emitted = 0
        super().__init__(start=start, **kwargs)

    # ---------------------------------------------------------------- positions
    def position(self) -> dict[str, int]:
        """``{"topic:partition": next_offset}`` for every partition read so far."""
        pos = dict(self._offsets)
        if self._pause_requested:
            # taken at a checkpoint barrier: committed to the group after it
            self._barrier_position = pos
        return pos

    def position_now(self) -> dict[str, int]:
        return dict(self._offsets)

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
        for key, offset in list(self._offsets.items()):
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

    def seek(self, position: Any) -> None:
        """Start every partition named in ``position`` at its offset on the next run."""
        if position is None:
            return
        if not isinstance(position, dict):
            raise ConfigurationError(
                f"{self._display_name()}: seek() needs a dict {{'topic:partition': offset}}, "
                f"got {position!r}"
            )
        self._seek_position = {str(k): int(v) for k, v in position.items()}
        self._offsets = dict(self._seek_position)
        # restored from a checkpoint: never commit uncheckpointed progress to the
        # group (a restored job takes no checkpoint before its sources start); a
        # partition missing from ``position`` appeared after the checkpoint and
        # is read from its first offset
        self.checkpointing = True

    def state_signature(self) -> str:
        return f"{type(self).__name__}(topics={sorted(self.topics)!r}, keys={self.keys!r})"

    def pause(self) -> None:
        """Hold the source at a checkpoint barrier; from then on it runs under a job.

        Under a job the source stops committing completed offsets by itself
        (the checkpoint holds the positions; see the module docs).
        """
        self.checkpointing = True
        super().pause()

    def resume(self) -> None:
        """Go on after a barrier; commit the barrier's position to the group (for lag tools)."""
        pos, self._barrier_position = self._barrier_position, None
        if pos:
            self.checkpoint_committed(pos)
        super().resume()

    def checkpoint_committed(self, position: Any) -> None:
        """Commit ``position`` (a checkpoint's source position) to the consumer group.

        A checkpoint job calls this after a checkpoint is durable.  The group
        offsets are informational under a job (a restore uses the
        checkpoint), but let lag tools see progress.
        """
        if not position or self.consumer is None:
            return
        self._commit({_split(k): int(v) for k, v in position.items()})

    # ---------------------------------------------------------------- consumer
    def _make_consumer(self) -> Any:
        import confluent_kafka as ck

        return ck.Consumer(dict(self.consumer_params))

    def _list_partitions(self) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        for topic in self.topics:
            md = self.consumer.list_topics(topic, timeout=5)
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None:
                logger.debug(
                    "%s: topic %r not available yet: %s",
                    self._display_name(),
                    topic,
                    tmd and tmd.error,
                )
                continue
            parts = sorted(tmd.partitions)
            if self.npartitions is not None:
                parts = parts[: self.npartitions]
            found.extend((topic, p) for p in parts)
        return found

    async def _refresh(self) -> None:
        import confluent_kafka as ck

        loop = asyncio.get_running_loop()
        try:
            parts = await loop.run_in_executor(None, self._list_partitions)
        except ck.KafkaException as e:
            logger.warning(
                "%s: listing partitions failed (will retry): %s", self._display_name(), e
            )
            return
        finally:
            self._last_refresh = time.monotonic()
        # partitions of the first successful listing start at the configured
        # start; those found later were added while running
        initial, self._listed = not self._listed, True
        new = [tp for tp in parts if tp not in self._assigned]
        if not new:
            return
        offsets = await loop.run_in_executor(None, self._start_offsets, new, initial)
        if self.consumer is None:  # closed meanwhile (stopped)
            return
        assign = []
        for (t, p), off in zip(new, offsets):
            assign.append(ck.TopicPartition(t, p, off))
            if off >= 0:
                # every assigned partition has a position from the start, so a
                # checkpoint taken before its first record still pins it
                self._offsets[f"{t}:{p}"] = off
                self._tracker.reset(t, p, off)
            self._assigned.add((t, p))
        logger.info(
            "%s: assigning %s",
            self._display_name(),
            [(a.topic, a.partition, a.offset) for a in assign],
        )
        self.consumer.incremental_assign(assign)

    def _start_offsets(self, parts: list[tuple[str, int]], initial: bool) -> list[int]:
        """The offsets newly assigned partitions start at (concrete offsets when possible).

        * in the restored position: that offset (range-checked);
        * restored, but not in the position: the partition appeared after the
          checkpoint, so from its first offset;
        * first run, at start: the group's committed offset, else
          ``auto.offset.reset``;
        * found while running: from its first offset.

        Falls back to a symbolic offset (resolved by the consumer) when the
        broker cannot be asked.  Runs in a thread (blocking calls).
        """
        import confluent_kafka as ck

        group_start = initial and self._seek_position is None
        committed = self._committed_offsets(parts) if group_start else {}
        out: list[int] = []
        for t, p in parts:
            key = f"{t}:{p}"
            if self._seek_position is not None and key in self._seek_position:
                out.append(self._check_range(t, p, self._seek_position[key]))
                continue
            if committed is None:  # the group's offsets could not be read
                out.append(int(ck.OFFSET_STORED))
                continue
            if committed.get((t, p), -1) >= 0:
                out.append(self._check_range(t, p, committed[(t, p)]))
                continue
            try:
                low, high = self.consumer.get_watermark_offsets(ck.TopicPartition(t, p), timeout=5)
            except (ck.KafkaException, RuntimeError) as e:
                logger.warning(
                    "%s: cannot resolve the start offset of %s[%d] (%s); the consumer resolves it",
                    self._display_name(),
                    t,
                    p,
                    e,
                )
                out.append(int(ck.OFFSET_STORED if group_start else ck.OFFSET_BEGINNING))
                continue
            reset = str(self.consumer_params.get("auto.offset.reset", "earliest")).lower()
            out.append(int(high if group_start and reset not in _EARLIEST else low))
        return out

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
                found = self.consumer.committed(
                    [ck.TopicPartition(t, p) for t, p in parts], timeout=5
                )
                errors = [f.error for f in found if f.error is not None]
                if not errors:
                    return {(f.topic, f.partition): int(f.offset) for f in found}
                err = errors[0]
            except ck.KafkaException as e:
                err = e.args[0]
            except RuntimeError:  # the consumer was closed (stopped)
                return None
            retriable = err.retriable() or err.code() in retry
            if self.consumer is None or not retriable or time.monotonic() >= deadline:
                logger.warning(
                    "%s: cannot read the group's committed offsets (%s); the consumer resolves "
                    "the start offsets",
                    self._display_name(),
                    err,
                )
                return None
            time.sleep(0.2)

    def _check_range(self, topic: str, partition: int, offset: int) -> int:
        """Apply the reset policy with a WARNING when ``offset`` is no longer on the broker."""
        import confluent_kafka as ck

        try:
            low, high = self.consumer.get_watermark_offsets(
                ck.TopicPartition(topic, partition), timeout=5
            )
        except ck.KafkaException as e:
            logger.warning(
                "%s: cannot read watermarks of %s[%d]: %s",
                self._display_name(),
                topic,
                partition,
                e,
            )
            return offset
        if low <= offset <= high:
            return offset
        reset = str(self.consumer_params.get("auto.offset.reset", "earliest")).lower()
        new = low if reset in _EARLIEST else high
        logger.warning(
            "%s: checkpointed offset %d of %s[%d] is outside the broker's range [%d, %d] "
            "(retention?); applying auto.offset.reset=%r -> starting at %d. RECORDS MAY BE LOST.",
            self._display_name(),
            offset,
            topic,
            partition,
            low,
            high,
            reset,
            new,
        )
        return new

    def _commit(self, offsets: dict[tuple[str, int], int]) -> None:
        import confluent_kafka as ck

        if not offsets or self.consumer is None:
            return
        tps = [ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            self.consumer.commit(offsets=tps, asynchronous=True)
        except ck.KafkaException as e:
            logger.warning(
                "%s: offset commit failed (will retry with the next): %s", self._display_name(), e
            )

    def _on_complete(self, topic: str, partition: int, start: int, end: int) -> None:
        self._tracker.finished(topic, partition, start, end)
        if not self.checkpointing:
            self._commit(self._tracker.committable())

    # ---------------------------------------------------------------- main loop
    async def prepare(self) -> None:
        """Create the consumer and resolve every partition's start offset.

        Called by a job before its first checkpoint (so that checkpoint holds
        concrete offsets even for ``auto.offset.reset="latest"`` or the group's
        offsets), else by :meth:`run`.
        """
        if self.consumer is None:
            self.consumer = self._make_consumer()
            await self._refresh()

    async def run(self) -> None:
        await self.prepare()
        while not self.stopped:
            every = self.poll_interval if self.refresh_partitions else self.metadata_refresh
            if time.monotonic() - self._last_refresh >= every:
                await self._refresh()
            msgs = self.consumer.consume(num_messages=max(self.max_batch_size, 500), timeout=0)
            if not msgs:
                await asyncio.sleep(
                    self.poll_interval if self.batched else min(self.poll_interval, 0.01)
                )
                continue
            await self._emit_messages(msgs)

    async def _emit_messages(self, msgs: list[Any]) -> None:
        groups: dict[tuple[str, int], list[Any]] = {}
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != -191:  # _PARTITION_EOF
                    logger.warning("%s: consumer error: %s", self._display_name(), err)
                    if err.fatal():
                        raise KafkaConnectorError(
                            f"{self._display_name()}: fatal consumer error: {err}"
                        )
                continue
            groups.setdefault((m.topic(), m.partition()), []).append(m)
        for (t, p), ms in groups.items():
            for i in range(0, len(ms), self.max_batch_size):
                chunk = ms[i : i + self.max_batch_size]
                if self.keys:
                    values: list[Any] = [{"key": m.key(), "value": m.value()} for m in chunk]
                else:
                    values = [m.value() for m in chunk]
                first, end = chunk[0].offset(), chunk[-1].offset() + 1
                await self._emit_one(t, p, first, end, values if self.batched else values[0])
                if self.stopped:
                    return
                # let the loop run between batches (a job's checkpoint barrier would
                # otherwise wait for the whole backlog when the graph is synchronous)
                await asyncio.sleep(0)

    async def _emit_one(self, t: str, p: int, first: int, end: int, x: Any) -> None:
        if self._pause_requested:
            await self._wait_resumed()
        self._tracker.started(t, p, first, end)
        ref = RefCounter(initial=1, callback=self._completion(t, p, first, end))
        metadata: Metadata = [{"ref": ref, "topic": t, "partition": p, "offset": first}]
        # if the emit raises (a user function under on_error="raise"), the batch
        # is neither completed (never committed to the group) nor passed by the
        # position: the source fails and a restart reads it again
        await self._emit_record(x, None, metadata)
        self._offsets[f"{t}:{p}"] = end
        self.batches_emitted += 1
        self.records_emitted += len(x) if self.batched else 1
        ref.release()

    def _completion(self, t: str, p: int, first: int, end: int) -> Callable[[], None]:
        def done() -> None:
            self._on_complete(t, p, first, end)

        return done

    def close(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is None:
            return
        try:
            import confluent_kafka as ck

            if self.checkpointing:
                # closed at a job's final checkpoint: its position is durable by now
                pos, self._barrier_position = self._barrier_position, None
                final = {_split(k): int(v) for k, v in (pos or {}).items()}
            else:
                final = self._tracker.committable()
            if final:
                tps = [ck.TopicPartition(t, p, o) for (t, p), o in final.items()]
                try:
                    consumer.commit(offsets=tps, asynchronous=False)
                except ck.KafkaException as e:
                    logger.warning("%s: final commit failed: %s", self._display_name(), e)
        finally:
            consumer.close()
            self._assigned.clear()
            logger.debug("%s: consumer closed", self._display_name())


def _split(key: str) -> tuple[str, int]:
    topic, _, part = key.rpartition(":")
    return topic, int(part)


class KafkaSource(KafkaBatchedSource):
    """Read Kafka topics and emit one record value at a time (see :func:`from_kafka`).

    >>> src = KafkaSource(["t"], {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> src.max_batch_size
    1
    """

    def __init__(
        self,
        topics: str | list[str],
        consumer_params: dict[str, Any],
        poll_interval: Any = 0.1,
        start: bool = False,
        keys: bool = False,
        **kwargs: Any,
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
    consumer_params: dict[str, Any],
    poll_interval: Any = 0.1,
    start: bool = False,
    **kwargs: Any,
) -> KafkaSource:
    """Emit the value of every record of ``topics``, one at a time.

    ``consumer_params`` is a confluent-kafka consumer config (copied, never
    changed) with ``bootstrap.servers`` and ``group.id``.

    >>> src = Stream.from_kafka(["t"], {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> type(src).__name__, src.replayable
    ('KafkaSource', True)
    """
    return KafkaSource(topics, consumer_params, poll_interval=poll_interval, start=start, **kwargs)


@Stream.register_api(staticmethod, attribute_name="from_kafka_batched")
def from_kafka_batched(
    topic: str | list[str],
    consumer_params: dict[str, Any],
    poll_interval: Any = "1s",
    npartitions: int | None = None,
    refresh_partitions: bool = False,
    start: bool = False,
    dask: bool = False,
    max_batch_size: int = 10000,
    keys: bool = False,
    engine: str | None = None,
    **kwargs: Any,
) -> Stream:
    """Emit lists of record values per partition (streamz's signature and argument order).

    ``topic`` is a name or a list of names; ``npartitions`` limits each topic
    to its first n partitions (None: all, also those added later);
    ``refresh_partitions`` looks for new partitions at every poll;
    ``max_batch_size`` caps a batch; with ``keys=True`` each element is
    ``{"key": key, "value": value}``; ``dask=True`` reads each partition's
    batches on Dask workers and returns the scattered stream of them (this
    process handles only offsets; see :mod:`rivermark.dask.kafka`).

    >>> src = Stream.from_kafka_batched("t", {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> src.topics, src.poll_interval
    (['t'], 1.0)
    """
    if dask:
        from ..dask.kafka import from_kafka_batched_dask

        return from_kafka_batched_dask(
            topic,
            consumer_params,
            start=start,
            poll_interval=poll_interval,
            npartitions=npartitions,
            refresh_partitions=refresh_partitions,
            max_batch_size=max_batch_size,
            keys=keys,
            engine=engine,
            **kwargs,
        )
    source = KafkaBatchedSource(
        topic,
        consumer_params,
        poll_interval=poll_interval,
        npartitions=npartitions,
        refresh_partitions=refresh_partitions,
        max_batch_size=max_batch_size,
        keys=keys,
        engine=engine,
        start=start,
        **kwargs,
    )
    return source
