"""Event time from Kafka record timestamps: ``from_kafka(..., timestamps=True)`` and
``timestamps()`` without a function, against a real broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.operators.eventtime import WindowResult

pytestmark = pytest.mark.kafka

SIZE_MS = 10_000


def produce_at(bootstrap: str, topic: str, records: list[tuple[int, bytes, int]]) -> None:
    """Write ``(partition, value, timestamp in ms)`` records, each with its explicit timestamp."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, value, ms in records:
        p.produce(topic, value=value, partition=partition, timestamp=ms)
    assert p.flush(30) == 0


def run_windows(
    bootstrap: str, topic: str, group: str, ckpt: Path, delay: float
) -> tuple[list[WindowResult], list[Any]]:
    src = Stream.from_kafka(
        topic,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        timestamps=True,
        stop_at_end=True,
    )
    w = src.timestamps(max_delay=delay, name="times").tumbling_window(
        SIZE_MS / 1000, key=lambda v: v.split(b"-")[0], agg="collect", name="windows"
    )
    out, late = w.sink_to_list(), w.late.sink_to_list()
    Job(src, checkpoint=str(ckpt), every=None).run()  # bounded: ends, emitting every window
    return out, late


def test_tumbling_windows_group_records_by_their_kafka_timestamps(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    base = (int(time.time()) - 3600) // 60 * 60 * 1000  # an hour ago, on a window boundary
    # out of order within and across partitions; a max_delay above the whole span makes no
    # record late however the partitions interleave (a partition counts from its first
    # record); the values say nothing about the time
    offsets_ms = {
        0: [0, 2_500, 1_000, 9_999, 10_000, 14_250, 12_500, 31_000, 29_500, 40_001],
        1: [500, 7_000, 6_000, 19_999, 18_500, 20_000, 55_000, 54_000, 70_250],
    }
    records = [
        (p, f"{'ab'[i % 2]}-{p}-{i}".encode(), base + ms)
        for p, ms_list in offsets_ms.items()
        for i, ms in enumerate(ms_list)
    ]
    produce_at(bootstrap, topic, records)
    out, late = run_windows(bootstrap, topic, group, tmp_path / "ckpt", 100.0)
    expected: dict[tuple[float, bytes], list[bytes]] = {}
    for _, value, ms in records:
        start = (ms - ms % SIZE_MS) / 1000
        expected.setdefault((start, value.split(b"-")[0]), []).append(value)
    got = {(r.start, r.key): sorted(r.value) for r in out}
    assert got == {k: sorted(v) for k, v in expected.items()}
    assert len(out) == len(expected) and late == []
    assert all(r.end == r.start + SIZE_MS / 1000 and r.final for r in out)


def test_a_record_behind_the_watermark_of_its_partition_is_late_by_its_kafka_timestamp(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    base = (int(time.time()) - 3600) // 60 * 60 * 1000
    ms_list = [1_000, 5_000, 12_000, 30_000, 3_000, 31_000]  # 3 s arrives at watermark 25 s
    records = [(0, f"a-{i}".encode(), base + ms) for i, ms in enumerate(ms_list)]
    produce_at(bootstrap, topic, records)
    out, late = run_windows(bootstrap, topic, group, tmp_path / "ckpt", 5.0)
    b = base / 1000
    assert [(r.start - b, r.value) for r in out] == [
        (0.0, (b"a-0", b"a-1")),
        (10.0, (b"a-2",)),
        (30.0, (b"a-3", b"a-5")),
    ]
    assert late == [b"a-4"]
