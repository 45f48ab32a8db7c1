"""What the Kafka benchmarks share: a broker of their own, their input topics filled.

``bench_kafka.py``, ``bench_kafka_1to1.py`` and ``bench_joins_kafka.py``
import it from their own directory.  Not a test.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

__all__ = ["Message", "broker", "broker_with_input", "produce", "produce_input"]


class Message(NamedTuple):
    """One record to produce: its topic, value and partition; a key and a timestamp (ms) if any."""

    topic: str
    value: bytes
    partition: int
    key: bytes | None = None
    timestamp: int = 0  # 0: the time it is produced


def produce(bootstrap: str, messages: Iterable[Message], flush_timeout: float = 60) -> None:
    """Every message, written (flushed) when this returns; a full buffer waits for the broker."""
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, (topic, value, partition, key, timestamp) in enumerate(messages):
        while True:
            try:
                p.produce(topic, value, key, partition, timestamp=timestamp)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(flush_timeout) == 0


def produce_input(bootstrap: str, topic: str, messages: list[bytes], partitions: int) -> None:
    """``messages`` into ``topic``, round-robin over its ``partitions``."""
    produce(bootstrap, (Message(topic, m, i % partitions) for i, m in enumerate(messages)))


@contextmanager
def broker(prefix: str) -> Iterator[tuple[str, Path]]:
    """A single-node broker in a temporary directory: its bootstrap address and the directory.

    The directory (named with ``prefix``) is there for checkpoints too; the
    broker is stopped and the directory removed at the end.
    """
    from rivermark.testing.kafka_broker import start_broker, stop_broker

    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        tmp = Path(d)
        running = start_broker(tmp / "kafka")
        try:
            yield running.bootstrap, tmp
        finally:
            stop_broker(running)


@contextmanager
def broker_with_input(
    prefix: str, messages: list[bytes], partitions: int
) -> Iterator[tuple[str, Path, float]]:
    """:func:`broker`, with ``messages`` in topic ``input``.

    Yields the bootstrap address, the temporary directory (for checkpoints)
    and the seconds the input took to produce; stops the broker at the end.
    """
    from rivermark.testing.kafka_broker import create_topic

    with broker(prefix) as (bs, tmp):
        create_topic(bs, "input", partitions=partitions)
        t0 = time.perf_counter()
        produce_input(bs, "input", messages, partitions)
        yield bs, tmp, time.perf_counter() - t0
