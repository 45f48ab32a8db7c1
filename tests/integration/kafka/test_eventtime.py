"""Event time from Kafka record timestamps: ``from_kafka(..., timestamps=True)`` and
``timestamps()`` without a function, against a real broker."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.operators.eventtime import WindowResult
from rivermark.testing import wait_for

from .helpers import produce_at, run_in_thread

pytestmark = pytest.mark.kafka

SIZE_MS = 10_000


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


def _replay_files(bootstrap: str, topic: str, group: str, out: Path, stop_at_end: bool) -> Stream:
    """Tumbling and session windows and the late records of a topic, a file each in ``out``."""
    src = Stream.from_kafka(
        topic,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.02,
        timestamps=True,
        stop_at_end=stop_at_end,
        name="kafka",
    )
    times = src.timestamps(max_delay=3, name="times")
    key = lambda v: v.split(b"-")[0].decode()  # noqa: E731
    tumble = times.tumbling_window(5, key=key, agg="collect", grace=1, name="tumble")
    sessions = times.session_window(2, key=key, agg="count", name="sessions")
    # a window's records reach collect in the order they came: written sorted
    tumble.map(
        lambda w: f"{w.start} {w.key} {b','.join(sorted(w.value)).decode()}"
    ).sink_to_textfile(str(out / "tumble.txt"), name="tumble-out")
    sessions.map(lambda w: f"{w.start} {w.end} {w.key} {w.value}").sink_to_textfile(
        str(out / "sessions.txt"), name="sessions-out"
    )
    tumble.late.map(bytes.decode).sink_to_textfile(str(out / "late.txt"), name="late-out")
    return src


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_topic_read_live_and_as_a_backfill_gives_the_same_windows(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path, partitions: int
) -> None:
    # with several partitions a backfill hands over one partition's records before the
    # next one's; every partition holds the watermark back from the start, and a record
    # is late by its own partition's watermark, so the windows are those of the live
    # read, in the same order
    topic = new_topic(partitions=partitions)
    base = (int(time.time()) - 3600) // 60 * 60 * 1000
    rnd = random.Random(23 + partitions)
    records = []
    for i in range(900):
        behind = rnd.choice([0, 0, 0, 500, 2_000, 2_900, 9_000])  # within and beyond 3 s
        value = f"{'abc'[rnd.randrange(3)]}-{i}".encode()
        records.append((i % partitions, value, base + i * 200 - behind))
    live, backfill = tmp_path / "live", tmp_path / "backfill"
    live.mkdir()
    backfill.mkdir()
    src = _replay_files(bootstrap, topic, group, live, stop_at_end=False)
    job = Job(src, checkpoint=str(tmp_path / "live-ckpt"), every="50ms")
    runner, errors = run_in_thread(job)
    for i in range(0, len(records), 30):  # the records trickle in while the job runs
        produce_at(bootstrap, topic, records[i : i + 30])
        time.sleep(0.05)
    read = lambda: sum(src.position_now().get(f"{topic}:{p}", 0) for p in range(partitions))  # noqa: E731
    wait_for(lambda: read() == len(records), 60, "all read live")
    wait_for(lambda: (live / "tumble.txt").exists(), 30, "windows closed live")
    job.stop()
    runner.join(60)
    assert not errors and not runner.is_alive()
    partial = (live / "tumble.txt").read_bytes()
    # the same job again, now bounded: it reads nothing new, ends its input, closes the rest
    src = _replay_files(bootstrap, topic, group, live, stop_at_end=True)
    Job(src, checkpoint=str(tmp_path / "live-ckpt"), every=None).run()
    # a backfill of the whole topic by a new group, at once
    src = _replay_files(bootstrap, topic, f"{group}-b", backfill, stop_at_end=True)
    Job(src, checkpoint=str(tmp_path / "backfill-ckpt"), every=None).run()
    for name in ("tumble.txt", "sessions.txt"):
        assert (live / name).read_bytes() == (backfill / name).read_bytes(), name
    whole = (backfill / "tumble.txt").read_bytes()
    assert whole.startswith(partial) and 0 < len(partial) < len(whole)  # some closed live
    # late records come as they arrive (one partition: in its order); the same are late
    late = (live / "late.txt").read_text().splitlines()
    late_backfill = (backfill / "late.txt").read_text().splitlines()
    assert late and sorted(late) == sorted(late_backfill)
    if partitions == 1:
        assert late == late_backfill
