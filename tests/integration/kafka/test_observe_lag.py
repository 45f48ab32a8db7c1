"""Kafka lag in the metrics: high watermark minus position, per partition, scraped over HTTP."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job

from .helpers import input_producer, produce, wait_for

pytestmark = pytest.mark.kafka


def lag_samples(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("rivermark_source_lag{", "rivermark_source_partition_lag{")):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_lag_is_high_watermark_minus_position(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    produce(bootstrap, topic, range(100), partition=0)
    gate = threading.Event()

    def hold(value: bytes) -> bytes:
        if value == b"30":
            gate.wait(60)  # held inside offset 30: offsets 0-29 are done
        return value

    params = {"bootstrap.servers": bootstrap, "group.id": group}
    source = Stream.from_kafka([topic], params, poll_interval=0.05, name="events")
    seen = source.map(hold, name="hold").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None, metrics_port=0)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        wait_for(lambda: job._running and job.metrics_url is not None, what="the endpoint")
        url = str(job.metrics_url)
        key = f'rivermark_source_partition_lag{{partition="{topic}:0",source="events",unit="records"}}'
        total = 'rivermark_source_lag{source="events",unit="records"}'
        wait_for(lambda: lag_samples(url).get(key) == 70, what="lag 70")
        assert lag_samples(url)[total] == 70
        assert len(seen) == 30
        gate.set()
        wait_for(lambda: len(seen) == 100, what="the rest")
        wait_for(lambda: lag_samples(url).get(key) == 0, what="lag 0")
    finally:
        gate.set()
        job.stop()
        runner.join(60)
    assert not runner.is_alive()


def watermark_samples(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if "watermark_timestamp_seconds{" in line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_watermarks_per_partition_from_kafka_timestamps(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    base = 1_700_000_000_000  # ms
    p = input_producer(bootstrap)
    for i in range(50):
        p.produce(topic, value=b"x", partition=0, timestamp=base + i * 1000)  # up to +49 s
        p.produce(topic, value=b"y", partition=1, timestamp=base + i * 400)  # up to +19.6 s
    assert p.flush(30) == 0
    params = {"bootstrap.servers": bootstrap, "group.id": group}
    source = Stream.from_kafka([topic], params, poll_interval=0.05, timestamps=True, name="events")
    source.timestamps(max_delay=2, name="times").tumbling_window(5, agg="count").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None, metrics_port=0)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        wait_for(lambda: job._running and job.metrics_url is not None, what="the endpoint")
        url = str(job.metrics_url)
        wm = base / 1000 - 2  # each partition's largest time less max_delay
        want = {
            f'rivermark_source_partition_watermark_timestamp_seconds{{partition="{topic}:0",source="events"}}': wm + 49,
            f'rivermark_source_partition_watermark_timestamp_seconds{{partition="{topic}:1",source="events"}}': wm + 19.6,
            # the source's: the minimum over its partitions
            'rivermark_source_watermark_timestamp_seconds{source="events"}': wm + 19.6,
            'rivermark_node_watermark_timestamp_seconds{node="times"}': wm + 19.6,
        }  # fmt: skip
        wait_for(lambda: watermark_samples(url) == pytest.approx(want), what="every record read")
        snap = job.metrics.read()
        assert snap.sources[0].event_time_lag == pytest.approx(snap.time - (wm + 19.6))
    finally:
        job.stop()
        runner.join(60)
    assert not runner.is_alive()
