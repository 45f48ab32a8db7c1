"""A table's bootstrap on a real broker: ``to_table(..., bootstrap=True)``.

The table's topic is read to the end offsets it had when the job started
before the join's other side starts: a lookup join (the newest version
present) then enriches every record with the table's values as of the
start, fresh and after a SIGKILL; an empty topic is caught up at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.checkpoint.stores.store import open_store
from rivermark.kafka import PartitionedJob, PartitionSource
from rivermark.kafka.topic_ids import offsets_of
from rivermark.observe.metrics import metrics_of
from rivermark.testing.kafka_broker import create_topic

from .helpers import produce_records, run_in_thread, wait_for
from .join_eos_app import event_time, parse, tier

APP = Path(__file__).with_name("table_bootstrap_app.py")
KEYS = 10


def _changes(versions: range) -> list[tuple[bytes | None, bytes]]:
    """Every key's changes, version by version (``v<n>`` at time ``n``), keyed by key."""
    return [
        (str(k).encode(), json.dumps({"k": k, "ts": n, "v": f"v{n}"}).encode())
        for n in versions
        for k in range(KEYS)
    ]


def _orders(ids: range) -> list[tuple[bytes | None, bytes]]:
    return [(None, json.dumps({"i": i, "k": i % KEYS}).encode()) for i in ids]


def _compacted(bootstrap: str) -> str:
    """A compacted topic of two partitions (a table's topic, as Kafka keeps them)."""
    name = f"tiers-{uuid.uuid4().hex[:12]}"
    create_topic(bootstrap, name, partitions=2, config={"cleanup.policy": "compact"})
    return name


def _by_key(key: bytes | None) -> int:
    """A record's partition of two: ``key % 2``, the first for a record without a key."""
    return 0 if key is None else int(key) % 2


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    """Write ``(key, value)`` records; a key's records go to partition ``key % 2``."""
    produce_records(bootstrap, topic, records, partition=_by_key)


def _slow(x: Any) -> Any:
    time.sleep(0.003)  # the table's changes take a while to read
    return x


def _lookup_job(
    bootstrap: str, tiers: str, orders: str, group: str, ckpt: Path, boot: bool
) -> tuple[Job, list[tuple[dict[str, Any], Any]]]:
    params = {"bootstrap.servers": bootstrap, "group.id": group}
    changes = Stream.from_kafka(tiers, params, poll_interval=0.02, name="kafka-tiers")
    left = Stream.from_kafka(orders, params, poll_interval=0.02, name="kafka-orders")
    # every node named: a second run of a new graph restores the first one's checkpoint
    table = (
        changes.map(parse, name="parse_tiers")
        .map(_slow, name="slow")
        .timestamps(event_time, name="tier_times")
        .to_table(key="k", value=tier, bootstrap=boot, name="table")
    )
    parsed = left.map(parse, name="parse_orders")
    out = parsed.join_asof(table, key="k", how="left", mode="lookup", name="join")
    got = out.sink_to_list(name="out")
    return Job(left, checkpoint=str(ckpt), every="0.2s", keep=1000), got


def _run_until(job: Job, done: Callable[[], bool], what: str) -> None:
    thread, raised = run_in_thread(job)
    try:
        wait_for(lambda: done() or not thread.is_alive(), 30, what)
    finally:
        job.stop(timeout=30)
        thread.join(30)
    assert not raised, [str(e).replace("\n", " | ") for e in raised]
    assert done(), what


@pytest.mark.parametrize("boot", [True, False], ids=["bootstrap", "no-bootstrap"])
def test_a_lookup_join_sees_the_whole_table_only_with_a_bootstrap(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    boot: bool,
) -> None:
    tiers, orders = _compacted(bootstrap), new_topic(prefix="orders")
    _produce(bootstrap, tiers, _changes(range(1, 31)))  # 300 changes, v30 the last
    _produce(bootstrap, orders, _orders(range(40)))
    job, out = _lookup_job(bootstrap, tiers, orders, group, tmp_path / "ck", boot)
    caplog.set_level(logging.INFO, logger="rivermark")
    metrics = metrics_of(job)
    seen: list[tuple[bool, bool, int]] = []

    def watch() -> bool:
        # how many orders were joined, then whether the job said it was bootstrapping
        joined = len(out)
        seen.append((job.bootstrapping, metrics.read().bootstrapping, joined))
        return joined >= 40

    _run_until(job, watch, "every order joined")
    assert not job.bootstrapping and not metrics.read().bootstrapping
    assert any(flag and snap for flag, snap, _ in seen) == boot
    assert boot or not any(flag or snap for flag, snap, _ in seen)
    assert all(joined == 0 for flag, _, joined in seen if flag)  # no order while it was
    values = [v for _, v in out]
    if boot:
        assert values == ["v30"] * 40
        done = [r.getMessage() for r in caplog.records if "bootstrap done" in r.getMessage()]
        assert len(done) == 1 and done[0].startswith("bootstrap done: 300 records read from "), done
        # the checkpoints taken during the bootstrap: the table's source moved on, the
        # orders' stayed where the run began
        store = open_store(str(tmp_path / "ck"))
        during = []
        for epoch in store.list_epochs():
            positions = store.read_manifest(epoch).positions
            read = sum(offsets_of(positions["kafka-tiers"]).values())
            if 0 < read < 300:
                during.append(offsets_of(positions["kafka-orders"]))
        assert during and all(p == {f"{orders}:0": 0} for p in during), during
    else:
        # the orders were joined while the table was still being read
        assert any(v != "v30" for v in values), values


def test_an_empty_table_topic_is_caught_up_at_once(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tiers, orders = _compacted(bootstrap), new_topic(prefix="orders")
    _produce(bootstrap, orders, _orders(range(5)))
    job, out = _lookup_job(bootstrap, tiers, orders, group, tmp_path / "ck", True)
    caplog.set_level(logging.INFO, logger="rivermark")
    started = time.monotonic()
    _run_until(job, lambda: len(out) >= 5, "every order joined")
    assert [v for _, v in out] == [None] * 5
    assert time.monotonic() - started < 20
    assert any(r.getMessage().startswith("bootstrap done: 0 records") for r in caplog.records)


def test_a_job_stopped_in_the_middle_of_a_bootstrap_resumes_it(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tiers, orders = _compacted(bootstrap), new_topic(prefix="orders")
    _produce(bootstrap, tiers, _changes(range(1, 31)))  # 300 changes, v30 the last
    _produce(bootstrap, orders, _orders(range(40)))
    ckpt = tmp_path / "ck"
    job, out = _lookup_job(bootstrap, tiers, orders, group, ckpt, True)
    thread, raised = run_in_thread(job)
    try:
        store = open_store(str(ckpt))

        def tiers_read() -> int:
            epochs = store.list_epochs()
            positions = store.read_manifest(epochs[-1]).positions if epochs else {}
            return sum(offsets_of(positions.get("kafka-tiers", {})).values())

        # a checkpoint with part of the table read, while the orders wait
        wait_for(lambda: tiers_read() > 0 or not thread.is_alive(), 30, "a checkpoint")
        assert job.bootstrapping
    finally:
        assert job.stop(timeout=30)  # the waiting source never started: no hang
        thread.join(30)
    assert not raised and out == []
    final = store.read_manifest(store.list_epochs()[-1]).positions
    read = sum(offsets_of(final["kafka-tiers"]).values())
    assert 0 < read < 300 and offsets_of(final["kafka-orders"]) == {f"{orders}:0": 0}, final
    # the next run restores the part of the table read and reads the rest first
    caplog.set_level(logging.INFO, logger="rivermark")
    job, out = _lookup_job(bootstrap, tiers, orders, group, ckpt, True)
    _run_until(job, lambda: len(out) >= 40, "every order joined")
    assert [v for _, v in out] == ["v30"] * 40
    done = [r.getMessage() for r in caplog.records if "bootstrap done" in r.getMessage()]
    assert done and done[0].startswith(f"bootstrap done: {300 - read} records read"), done


def _start(env: dict[str, str], ckpt: Path, log: Path) -> subprocess.Popen[bytes]:
    full = {**os.environ, **env}
    with open(log, "ab") as f:
        f.write(b"--- run\n")
        return subprocess.Popen(
            [sys.executable, "-m", "rivermark.cli", "run", f"{APP}:orders"]
            + ["--checkpoint", str(ckpt), "--every", "0.2s", "--log-level", "INFO"],
            env=full,
            stdout=subprocess.DEVNULL,
            stderr=f,
        )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_restored_job_bootstraps_again_to_the_ends_of_its_own_start(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    tiers, orders = _compacted(bootstrap), new_topic(prefix="orders")
    out, ckpt, log = tmp_path / "out.txt", tmp_path / "ck", tmp_path / "runs.log"
    env = {
        "TB_BOOTSTRAP": bootstrap,
        "TB_TIERS": tiers,
        "TB_ORDERS": orders,
        "TB_GROUP": group,
        "TB_OUT": str(out),
    }
    _produce(bootstrap, tiers, _changes(range(1, 21)))  # 200 changes, v20 the last
    _produce(bootstrap, orders, _orders(range(10)))
    proc = _start(env, ckpt, log)
    try:
        wait_for(lambda: len(_lines(out)) >= 10 or proc.poll() is not None, 60, "first orders")
        assert proc.poll() is None, log.read_text()[-3000:]
        # a checkpoint taken after the orders were joined holds the table read to v20
        store = open_store(str(ckpt))
        seen = max(store.list_epochs())
        wait_for(lambda: max(store.list_epochs()) > seen, 30, "a later checkpoint")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert sorted(_lines(out)) == sorted(f"{i} v20" for i in range(10))
    # while the job is down: 200 more changes (v40 the last) and 10 more orders
    _produce(bootstrap, tiers, _changes(range(21, 41)))
    _produce(bootstrap, orders, _orders(range(10, 20)))
    proc = _start(env, ckpt, log)
    try:
        wait_for(lambda: len(_lines(out)) >= 20 or proc.poll() is not None, 60, "every order")
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    lines = _lines(out)
    assert sorted(lines) == sorted(
        [f"{i} v20" for i in range(10)] + [f"{i} v40" for i in range(10, 20)]
    )
    second = log.read_text().split("--- run\n")[2]
    # the restored run read the changes since its checkpoint before the orders started
    assert re.search(
        r"bootstrap done: 200 records read from KafkaSource\('kafka-tiers'\)", second
    ), second[-3000:]


def test_a_global_table_is_bootstrapped_in_every_task_of_a_partitioned_job(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    tiers, orders = _compacted(bootstrap), new_topic(2, "orders")
    _produce(bootstrap, tiers, _changes(range(1, 21)))  # 200 changes, v20 the last
    # orders of every key in both partitions of the job's topic: order i in partition i % 2
    for part in (0, 1):
        produce_records(bootstrap, orders, _orders(range(part, 20, 2)), partition=part)
    out: list[tuple[int, Any]] = []
    lock = threading.Lock()

    def build(source: PartitionSource) -> Stream:
        table = (
            source.global_topic(tiers)
            .flatten()
            .map(json.loads)
            .map(_slow)
            .timestamps(lambda c: c["ts"])
            .to_table(key="k", value=lambda c: c["v"], bootstrap=True, name="table")
        )

        def keep(pair: tuple[dict[str, Any], Any]) -> None:
            with lock:
                out.append((pair[0]["i"], pair[1]))

        left = source.flatten().map(json.loads)
        return left.join_asof(table, key="k", how="left", mode="lookup", name="join").sink(keep)

    job = PartitionedJob(
        orders,
        {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000},
        build,
        checkpoint=tmp_path / "c",
        every="200ms",
        source_options={"poll_interval": 0.05},
    )
    thread, raised = run_in_thread(job)
    try:
        wait_for(lambda: len(out) >= 20 or not thread.is_alive(), 90, "every order joined")
    finally:
        job.stop()
        thread.join(60)
    assert raised == []
    assert sorted(out) == [(i, "v20") for i in range(20)]
