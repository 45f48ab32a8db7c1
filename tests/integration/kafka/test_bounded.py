"""Bounded Kafka reads: ``stop_at_end=True`` reads up to the high watermarks seen
at start, then the job ends by itself (exit 0, final checkpoint)."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.kafka.topic_ids import offsets_of

from .helpers import committed, consume_all, produce, run_in_thread, start_app, wait_for

pytestmark = pytest.mark.kafka

KEYS = 10


def test_stop_at_end_reads_to_the_watermarks_seen_at_start_then_finishes(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=3)
    for p in range(3):
        produce(bootstrap, topic, [f"{p}-{i}" for i in range(40)], partition=p)
    seen: list[bytes] = []

    def slow(batch: list[bytes]) -> list[bytes]:
        time.sleep(0.02)
        return batch

    src = Stream.from_kafka_batched(
        topic,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        max_batch_size=5,
        stop_at_end=True,
    )
    src.map(slow).flatten().sink(seen.append)
    ckpt = tmp_path / "ckpt"
    job = Job(src, checkpoint=str(ckpt), every="0.2s")
    t, errors = run_in_thread(job)
    wait_for(lambda: len(seen) > 0, what="the first record")
    # written after the start: beyond the end of this bounded read
    produce(bootstrap, topic, [f"late-{i}" for i in range(10)], partition=0)
    t.join(120)
    assert not t.is_alive() and errors == []
    assert sorted(seen) == sorted(f"{p}-{i}".encode() for p in range(3) for i in range(40))
    store = LocalDirectoryStore(ckpt)
    final = store.read_manifest(store.list_epochs()[-1])
    assert [offsets_of(p) for p in final.positions.values()] == [
        {f"{topic}:{p}": 40 for p in range(3)}
    ]
    assert committed(bootstrap, group, topic, 3) == {0: 40, 1: 40, 2: 40}
    # the next bounded run reads what was written after the first one started
    again: list[bytes] = []
    src2 = Stream.from_kafka_batched(
        topic, {"bootstrap.servers": bootstrap, "group.id": group}, stop_at_end=True
    )
    src2.flatten().sink(again.append)
    Job(src2, checkpoint=str(ckpt), every=None).run()
    assert sorted(again) == sorted(f"late-{i}".encode() for i in range(10))


def test_a_bounded_exactly_once_job_killed_and_resumed_exits_0_with_exact_output(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    n = 3000
    inp, out = new_topic(partitions=2, prefix="in"), new_topic(prefix="out")
    records = [json.dumps({"k": i % KEYS}) for i in range(n)]
    produce(bootstrap, inp, records[0::2], partition=0)
    produce(bootstrap, inp, records[1::2], partition=1)
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_THROTTLE": "0.03",
        "FAULT_STOP_AT_END": "1",
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    store = LocalDirectoryStore(ckpt)
    rnd = random.Random(13)
    for _ in range(2):
        proc = start_app(ckpt, env, log)
        before = len(store.list_epochs()) if ckpt.exists() else 0
        # killed at a random moment after it made progress, before the end
        wait_for(
            lambda p=proc, b=before: p.poll() is not None or len(store.list_epochs()) > b + 1,
            what="a checkpoint of this run",
        )
        time.sleep(rnd.uniform(0.0, 0.4))
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    proc = start_app(ckpt, env, log)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    final = store.read_manifest(store.list_epochs()[-1])
    assert sum(sum(offsets_of(p).values()) for p in final.positions.values()) == n
    msgs = consume_all(bootstrap, out, expected=n, timeout=30, committed_only=True)
    results = Counter(tuple(json.loads(m.value())) for m in msgs)
    assert max(results.values()) == 1, "duplicates"
    assert results == Counter((str(k), c) for k in range(KEYS) for c in range(1, n // KEYS + 1))
