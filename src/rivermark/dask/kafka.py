"""``from_kafka_batched(..., dask=True)``: every partition's batch is read on a worker.

As in streamz, the source in the job process does not fetch records.  It
asks the broker for each assigned partition's end offset (for a
``read_committed`` consumer that is the last stable offset, so open
transactions are never split) and emits one :class:`KafkaRange`
``(topic, partition, start, end)`` per batch of at most ``max_batch_size``
offsets.  The range goes to the cluster inside the task of
:func:`read_kafka_range`, which reads exactly the records with offsets in
``[start, end)`` from the broker on a worker; the job process handles only
offsets and the results that ``gather`` brings back.

Checkpoints keep their meaning.  The source's position is the next offset
per partition, as for the local source: a range is emitted whole, and the
position moves past it only when it has been emitted.  The records of a
range are fixed by the log (Kafka never rewrites an offset), so after a
restore the same ranges are read again with the same records, on whichever
worker.  The barrier waits for the ``gather`` downstream, so a checkpoint's
position never passes a range whose records are not in the state.  A range
that cannot be read (broker unreachable for ``read_timeout`` seconds) fails
the job with :class:`~rivermark.dask.errors.KafkaRangeReadError`, whatever
the ``on_error`` policy, rather than drop its records.

Batch boundaries may differ from the local source's (which batches what one
``consume`` call returned): both cut at most ``max_batch_size`` records per
partition and batch, neither promises more.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rivermark.dask.core import DaskMap, DaskScatter, DaskStream
from rivermark.dask.errors import KafkaRangeReadError
from rivermark.errors import ConfigurationError
from rivermark.kafka.source import KafkaBatchedSource

if TYPE_CHECKING:
    import distributed

logger = logging.getLogger(__name__)

__all__ = ["KafkaRange", "KafkaRangeSource", "read_kafka_range", "from_kafka_batched_dask"]


@dataclass(frozen=True)
class KafkaRange:
    """The offsets ``[start, end)`` of one partition: what a worker reads as one batch.

    ``len()`` is the number of offsets (the records, minus any transaction
    markers or aborted records among them).

    >>> r = KafkaRange("t", 0, 10, 15, {"bootstrap.servers": "b:9092", "group.id": "g"})
    >>> len(r), r.key
    (5, 't:0')
    """

    topic: str
    partition: int
    start: int
    end: int
    consumer_params: dict[str, object] = field(repr=False, compare=False)
    keys: bool = False
    read_timeout: float = 60.0

    def __len__(self) -> int:
        return self.end - self.start

    @property
    def key(self) -> str:
        """``"topic:partition"``, as in the source's position."""
        return f"{self.topic}:{self.partition}"


# ------------------------------------------------------------------ on the worker
_pool_lock = threading.Lock()
#: idle consumers per configuration, reused by the tasks of one worker process
_idle: dict[str, list[Any]] = {}


def _take_consumer(params: dict[str, object]) -> tuple[str, Any]:
    import confluent_kafka as ck

    key = json.dumps(params, sort_keys=True, default=str)
    with _pool_lock:
        idle = _idle.get(key)
        if idle:
            return key, idle.pop()
    conf = dict(params)
    conf["enable.auto.commit"] = False
    conf["enable.auto.offset.store"] = False
    conf["enable.partition.eof"] = True
    conf.setdefault("group.id", "rivermark-range-reader")
    # a range is read at once: the broker should not hold a fetch back waiting
    # for more data (with the default 500 ms, every re-assignment waits for
    # the previous long poll to come back)
    conf.setdefault("fetch.wait.max.ms", 10)
    return key, ck.Consumer(conf)


def _give_back(key: str, consumer: Any) -> None:
    consumer.unassign()  # an idle consumer fetches nothing
    with _pool_lock:
        _idle.setdefault(key, []).append(consumer)


def read_kafka_range(r: KafkaRange) -> list[object]:
    """Read the records of ``r`` (run on a worker); values, or ``{"key", "value"}`` dicts.

    Reads until the consumer's position reaches ``r.end`` (transaction
    markers and aborted records leave gaps in the offsets); raises
    :class:`KafkaRangeReadError` after ``r.read_timeout`` seconds without
    getting there.
    """
    key, consumer = _take_consumer(r.consumer_params)
    try:
        values = _read(consumer, r)
    except BaseException:
        consumer.close()
        raise
    _give_back(key, consumer)
    return values


def _read(consumer: Any, r: KafkaRange) -> list[object]:
    import confluent_kafka as ck

    consumer.assign([ck.TopicPartition(r.topic, r.partition, r.start)])
    out: list[object] = []
    nxt = r.start  # every offset below this has been handed to us (or skipped by Kafka)
    deadline = time.monotonic() + r.read_timeout
    last_error: Any = None
    while nxt < r.end:
        msgs = consumer.consume(num_messages=min(r.end - nxt, 10_000), timeout=0.1)
        for m in msgs:
            if m.topic() != r.topic or m.partition() != r.partition:
                continue  # left over from an earlier assignment of this consumer
            err = m.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    nxt = max(nxt, min(m.offset(), r.end))
                    continue
                if err.fatal():
                    raise KafkaRangeReadError(
                        f"reading {r!r} on a worker: fatal Kafka error {err}; check the "
                        f"consumer configuration and the broker"
                    )
                last_error = err
                continue
            off = m.offset()
            if off < nxt:
                continue
            if off >= r.end:
                nxt = r.end
                break
            out.append({"key": m.key(), "value": m.value()} if r.keys else m.value())
            nxt = off + 1
        if nxt < r.end:
            nxt = _past_the_records(consumer, r, nxt, deadline, last_error)
    return out


def _past_the_records(consumer: Any, r: KafkaRange, nxt: int, deadline: float, error: Any) -> int:
    """The next offset to read once a poll ended before ``r.end``; raises past the deadline.

    The consumer's position at or past the end means the rest of the range
    was transaction markers or aborted records.
    """
    import confluent_kafka as ck

    (pos,) = consumer.position([ck.TopicPartition(r.topic, r.partition)])
    if pos.offset >= r.end:
        return r.end
    if time.monotonic() > deadline:
        raise KafkaRangeReadError(
            f"reading {r!r} on a worker: reached offset {nxt} of [{r.start}, {r.end}) "
            f"in {r.read_timeout} s (last Kafka error: {error}); check that the "
            f"broker at {r.consumer_params.get('bootstrap.servers')!r} is reachable "
            f"from the workers, or raise read_timeout"
        )
    return nxt


# ------------------------------------------------------------------ in the job process
class KafkaRangeSource(KafkaBatchedSource):
    """The source of ``from_kafka_batched(..., dask=True)``: emits :class:`KafkaRange` s.

    Its consumer only answers metadata and offset queries (its partitions
    are assigned but paused, so it never fetches records).  Positions,
    restore (``seek``), group commits and completion tracking are those of
    :class:`~rivermark.kafka.source.KafkaBatchedSource`.  The ranges of
    different partitions are emitted in turn, so their reads overlap on the
    cluster.

    >>> src = KafkaRangeSource("t", {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> src.replayable, src.read_timeout
    (True, 60.0)
    """

    def __init__(
        self,
        topics: str | list[str],
        consumer_params: dict[str, object],
        read_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        if (
            isinstance(read_timeout, bool)
            or not isinstance(read_timeout, (int, float))
            or read_timeout <= 0
        ):
            raise ConfigurationError(
                f"from_kafka_batched(dask=True): read_timeout must be a number of seconds > 0, "
                f"got {read_timeout!r}; pass e.g. read_timeout=60"
            )
        self.read_timeout = float(read_timeout)
        super().__init__(topics, consumer_params, **kwargs)
        #: what the workers connect with (the source's own settings are not for them)
        self.worker_params: dict[str, object] = dict(consumer_params)

    async def _refresh(self) -> None:
        await super()._refresh()
        if self.consumer is not None:
            assigned = self.consumer.assignment()
            if assigned:
                self.consumer.pause(assigned)

    async def run(self) -> None:
        await self.prepare()
        loop = asyncio.get_running_loop()
        while not self.stopped:
            every = self.poll_interval if self.refresh_partitions else self.metadata_refresh
            if time.monotonic() - self.partitions.last_refresh >= every:
                await self._refresh()
            ranges = await loop.run_in_executor(None, self._next_ranges)
            if not ranges:
                await asyncio.sleep(self.poll_interval)
                continue
            for r in ranges:
                if self.partitions.offsets.get(r.key) != r.start:
                    break  # moved meanwhile (a restore): ask the broker again
                origin = {
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.start,
                    "end": r.end,
                }
                await self._emit_one(r.topic, r.partition, r.start, r.end, r, origin)
                if self.stopped:
                    return
                await asyncio.sleep(0)

    def _next_ranges(self) -> list[KafkaRange]:
        """Ranges from each partition's position to its end, partitions taken in turn."""
        import confluent_kafka as ck

        per_partition: list[list[KafkaRange]] = []
        partitions = self.partitions
        for topic, partition in sorted(partitions.assigned):
            start = partitions.offsets.get(f"{topic}:{partition}")
            if start is None:
                # the broker could not be asked when it was assigned: resolve it now
                (start,) = partitions.start_offsets([(topic, partition)], True)
                if start < 0:
                    continue
                partitions.offsets[f"{topic}:{partition}"] = start
                partitions.tracker.reset(topic, partition, start)
            try:
                _, end = self.consumer.get_watermark_offsets(
                    ck.TopicPartition(topic, partition), timeout=5, cached=False
                )
            except ck.KafkaException as e:
                logger.warning(
                    "%s: cannot read the end offset of %s[%d] (will retry): %s",
                    self.display_name(),
                    topic,
                    partition,
                    e,
                )
                continue
            chunks = []
            while start < end:
                stop = min(end, start + self.max_batch_size)
                chunks.append(
                    KafkaRange(
                        topic,
                        partition,
                        start,
                        stop,
                        self.worker_params,
                        keys=self.keys,
                        read_timeout=self.read_timeout,
                    )
                )
                start = stop
            per_partition.append(chunks)
        return [r for turn in itertools.zip_longest(*per_partition) for r in turn if r is not None]

    def state_signature(self) -> str:
        return f"KafkaRangeSource(topics={sorted(self.topics)!r}, keys={self.keys!r})"


def from_kafka_batched_dask(
    topic: str | list[str],
    consumer_params: dict[str, object],
    start: bool = False,
    client: distributed.Client | None = None,
    read_timeout: float = 60.0,
    **kwargs: object,
) -> DaskStream:
    """The scattered stream of batches read on workers (``from_kafka_batched(..., dask=True)``).

    ``kwargs`` are those of ``from_kafka_batched``.  Returns the stream of
    futures of the batches (lists of values, or of ``{"key", "value"}`` with
    ``keys=True``); the source is its upstream's upstream (``.upstreams``),
    and ``start()`` on any node of the graph starts it.

    >>> s = from_kafka_batched_dask("t", {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    >>> type(s).__name__, type(s.upstreams[0].upstreams[0]).__name__
    ('DaskMap', 'KafkaRangeSource')
    """
    source = KafkaRangeSource(topic, consumer_params, read_timeout=read_timeout, **kwargs)
    batches = DaskMap(DaskScatter(source, client=client), read_kafka_range)
    if start:
        source.start()
    return batches
