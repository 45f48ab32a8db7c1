from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.core.refs import release_refs, retain_refs
from rivermark.testing.kafka_broker import add_partitions

from .helpers import committed, produce, wait_for

pytestmark = pytest.mark.kafka


def conf(bootstrap: str, group: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group}


def flat(batches: list[list[bytes]]) -> list[bytes]:
    return [v for b in batches for v in b]


def test_batched_reads_everything_per_partition(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic(partitions=3)
    for p in range(3):
        produce(bootstrap, topic, [f"{p}-{i}" for i in range(50)], partition=p)
    params = conf(bootstrap, group)
    before = dict(params)
    src = Stream.from_kafka_batched(topic, params, poll_interval=0.05, max_batch_size=20)
    out = src.sink_to_list()
    src.start()
    try:
        wait_for(lambda: len(flat(out)) >= 150, what="150 records")
    finally:
        src.stop()
    assert params == before  # the caller's dict is not changed
    assert all(1 <= len(b) <= 20 for b in out)
    for b in out:  # one partition per batch, in offset order
        parts = {v.split(b"-")[0] for v in b}
        assert len(parts) == 1
        idx = [int(v.split(b"-")[1]) for v in b]
        assert idx == sorted(idx)
    assert sorted(flat(out)) == sorted(f"{p}-{i}".encode() for p in range(3) for i in range(50))
    assert src.position_now() == {f"{topic}:{p}": 50 for p in range(3)}
    # at-least-once commits reach the group (synchronously on close)
    wait_for(lambda: committed(bootstrap, group, topic, 3) == {0: 50, 1: 50, 2: 50}, what="commits")


def test_several_topics_and_keys(bootstrap: str, new_topic: Callable[..., str], group: str) -> None:
    a, b = new_topic(partitions=2), new_topic(partitions=1)
    produce(bootstrap, a, range(10), key=b"ka")
    produce(bootstrap, b, range(5), key=b"kb")
    src = Stream.from_kafka_batched([a, b], conf(bootstrap, group), poll_interval=0.05, keys=True)
    out = src.sink_to_list()
    src.start()
    try:
        wait_for(lambda: len(flat(out)) >= 15, what="15 records")
    finally:
        src.stop()
    recs = flat(out)
    assert sorted((r["key"], r["value"]) for r in recs) == sorted(
        [(b"ka", str(i).encode()) for i in range(10)] + [(b"kb", str(i).encode()) for i in range(5)]
    )


def test_from_kafka_one_record_at_a_time(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, range(20))
    src = Stream.from_kafka([topic], conf(bootstrap, group), poll_interval=0.01)
    out = src.sink_to_list()
    src.start()
    try:
        wait_for(lambda: len(out) >= 20, what="20 records")
    finally:
        src.stop()
    assert out == [str(i).encode() for i in range(20)]


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "single"])
def test_a_record_arriving_while_the_source_waits_is_handed_on_at_once(
    bootstrap: str, new_topic: Callable[..., str], group: str, batched: bool
) -> None:
    """Nothing to read: the source waits inside the consumer, not in a sleep of poll_interval."""
    topic = new_topic()
    make = Stream.from_kafka_batched if batched else Stream.from_kafka
    src = make(topic, conf(bootstrap, group), poll_interval=60)
    out = src.sink_to_list()
    src.start()
    try:
        wait_for(lambda: src.partitions.listed, what="the partitions listed")
        t0 = time.monotonic()
        produce(bootstrap, topic, ["late"])
        wait_for(lambda: len(out) >= 1, timeout=60, what="the record produced while waiting")
        took = time.monotonic() - t0
    finally:
        src.stop()
    assert out == ([[b"late"]] if batched else [b"late"])
    assert took < 10, f"the record waited {took:.1f}s (poll_interval is 60s)"
    # the waiting thread left with the consumer
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("rivermark-wait")],
        what="the waiting thread gone",
    )


def test_partition_added_mid_run_is_read_from_zero(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic(partitions=1)
    produce(bootstrap, topic, ["p0"], partition=0)
    src = Stream.from_kafka_batched(
        topic, conf(bootstrap, group), poll_interval=0.05, refresh_partitions=True
    )
    out = src.sink_to_list()
    src.start()
    try:
        wait_for(lambda: len(flat(out)) >= 1, what="first record")
        add_partitions(bootstrap, topic, 2)
        # produced before the source can have seen the partition: read from offset 0
        produce(bootstrap, topic, ["new-0", "new-1"], partition=1)
        wait_for(lambda: len(flat(out)) >= 3, what="records of the new partition")
    finally:
        src.stop()
    assert sorted(flat(out)) == [b"new-0", b"new-1", b"p0"]
    assert src.position()[f"{topic}:1"] == 2


def test_commit_never_passes_a_batch_in_flight(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic(partitions=1)
    src = Stream.from_kafka_batched(
        topic, conf(bootstrap, group), poll_interval=0.02, max_batch_size=5
    )
    held: list[Any] = []
    seen: list[list[bytes]] = []

    def hold(x: Any, who: Any = None, metadata: Any = None) -> None:
        retain_refs(metadata)  # the batch stays in flight until released
        held.append(metadata)
        seen.append(x)

    node = Stream(upstream=src)
    node.update = hold  # type: ignore[method-assign]
    src.start()
    try:
        produce(bootstrap, topic, range(5))
        wait_for(lambda: len(held) == 1, what="first batch")
        produce(bootstrap, topic, range(5, 10))
        wait_for(lambda: len(held) == 2, what="second batch")
        # the second batch finishes first: nothing may be committed
        src.loop.call_soon_threadsafe(release_refs, held[1])
        time.sleep(0.3)
        assert committed(bootstrap, group, topic, 1)[0] < 0
        src.loop.call_soon_threadsafe(release_refs, held[0])
        wait_for(lambda: committed(bootstrap, group, topic, 1)[0] == 10, what="commit 10")
    finally:
        src.stop()
    assert [len(b) for b in seen] == [5, 5]


def test_restart_resumes_from_group_offsets(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, range(10))
    src = Stream.from_kafka_batched(topic, conf(bootstrap, group), poll_interval=0.02)
    out = src.sink_to_list()
    src.start()
    wait_for(lambda: len(flat(out)) >= 10, what="10")
    src.stop()
    asyncio.run_coroutine_threadsafe(src.wait_finished(), src.loop).result(10)
    produce(bootstrap, topic, range(10, 15))
    src2 = Stream.from_kafka_batched(topic, conf(bootstrap, group), poll_interval=0.02)
    out2 = src2.sink_to_list()
    src2.start()
    try:
        wait_for(lambda: len(flat(out2)) >= 5, what="5 more")
        time.sleep(0.2)
    finally:
        src2.stop()
    assert flat(out2) == [str(i).encode() for i in range(10, 15)]


def test_seek_out_of_range_warns_and_resets(
    bootstrap: str, new_topic: Callable[..., str], group: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, range(3))
    src = Stream.from_kafka_batched(topic, conf(bootstrap, group), poll_interval=0.02)
    src.seek({f"{topic}:0": 1000})
    out = src.sink_to_list()
    with caplog.at_level("WARNING"):
        src.start()
        try:
            wait_for(lambda: "outside the broker's range" in caplog.text, what="warning")
            wait_for(lambda: len(flat(out)) >= 3, what="records after reset")
        finally:
            src.stop()
    assert flat(out) == [b"0", b"1", b"2"]


def test_stop_lets_the_process_exit(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, range(100))
    script = textwrap.dedent(
        f"""
        import time
        import rivermark.kafka
        from rivermark import Stream
        src = Stream.from_kafka_batched({topic!r}, {conf(bootstrap, group)!r}, poll_interval=0.05)
        out = src.sink_to_list()
        src.start()
        deadline = time.monotonic() + 30
        while sum(map(len, out)) < 100 and time.monotonic() < deadline:
            time.sleep(0.02)
        print("read", sum(map(len, out)), "stopping at", time.time(), flush=True)
        src.stop()
        """
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "read 100" in proc.stdout
    assert time.monotonic() - t0 < 30


def test_after_a_kill_only_the_unfinished_batch_is_replayed(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, range(100))
    marker = tmp_path / "hung"
    script = textwrap.dedent(
        f"""
        import sys, time
        import rivermark.kafka
        from rivermark import Stream
        hang = sys.argv[1] == "hang"
        src = Stream.from_kafka_batched({topic!r}, {conf(bootstrap, group)!r},
                                        poll_interval=0.02, max_batch_size=10)
        def out(batch):
            print("batch", int(batch[0]), flush=True)
            if hang and int(batch[0]) == 50:
                open({str(marker)!r}, "w").close()
                time.sleep(600)  # never finishes: killed here
        src.sink(out)
        src.start()
        time.sleep(600 if hang else 3)
        src.stop()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script, "hang"], stdout=subprocess.DEVNULL)
    try:
        wait_for(marker.exists, what="the batch at offset 50")
        # every finished batch is committed; the one in progress is not
        wait_for(lambda: committed(bootstrap, group, topic, 1)[0] == 50, what="commit of offset 50")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    again = subprocess.run(
        [sys.executable, "-c", script, "run"], capture_output=True, text=True, timeout=60
    )
    firsts = [
        int(line.split()[1]) for line in again.stdout.splitlines() if line.startswith("batch")
    ]
    assert firsts and firsts[0] == 50  # the unfinished batch is replayed, nothing before it
    assert firsts == list(range(50, 100, 10))


def test_a_batch_whose_processing_raised_is_never_committed(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    """At-least-once without a job: the failed batch and everything after it are read again."""
    topic = new_topic()
    produce(bootstrap, topic, range(30))
    src = Stream.from_kafka_batched(
        topic, conf(bootstrap, group), poll_interval=0.02, max_batch_size=10
    )
    failed_at: list[int] = []

    def check(batch: list[bytes]) -> list[bytes]:
        if b"15" in batch:
            failed_at.append(int(batch[0]))
            raise ValueError("bad batch")
        return batch

    src.map(check).sink(lambda batch: None)
    src.start()
    wait_for(lambda: src.finished, what="the source to stop on the error")
    assert type(src.failure) is ValueError  # the user's own exception
    (first,) = failed_at
    # the consumer committed on close: up to the failed batch, not past it
    assert committed(bootstrap, group, topic, 1) == {0: first}
    assert src.position_now() == {f"{topic}:0": first}
