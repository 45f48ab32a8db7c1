"""What the Kafka benchmarks share: a broker of their own, its input topic filled.

``bench_kafka.py`` and ``bench_kafka_1to1.py`` import it from their own
directory.  Not a test.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["broker_with_input", "produce_input"]


def produce_input(bootstrap: str, topic: str, messages: list[bytes], partitions: int) -> None:
    """``messages`` into ``topic``, round-robin over its ``partitions``."""
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, m in enumerate(messages):
        while True:
            try:
                p.produce(topic, m, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


@contextmanager
def broker_with_input(
    prefix: str, messages: list[bytes], partitions: int
) -> Iterator[tuple[str, Path, float]]:
    """A single-node broker in a temporary directory, with ``messages`` in topic ``input``.

    Yields the bootstrap address, the temporary directory (for checkpoints)
    and the seconds the input took to produce; stops the broker at the end.
    """
    from rivermark.testing.kafka_broker import create_topic, start_broker, stop_broker

    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        tmp = Path(d)
        broker = start_broker(tmp / "kafka")
        try:
            bs = broker.bootstrap
            create_topic(bs, "input", partitions=partitions)
            t0 = time.perf_counter()
            produce_input(bs, "input", messages, partitions)
            yield bs, tmp, time.perf_counter() - t0
        finally:
            stop_broker(broker)
