"""Joins in a PartitionedJob: a co-partitioned topic, and the check of partition counts."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.kafka import PartitionedJob, PartitionSource
from rivermark.testing import run_in_thread, wait_for

from .helpers import produce


def _build(tiers_topic: str, out: list[Any], lock: threading.Lock) -> Callable[..., Stream]:
    def build(source: PartitionSource) -> Stream:
        tiers = source.co_partitioned(tiers_topic).flatten().map(json.loads)
        table = tiers.timestamps(lambda r: r["ts"]).to_table(key="k", value=lambda r: r["v"])
        orders = source.flatten().map(json.loads).timestamps(lambda r: r["ts"])

        def keep(pair: Any) -> None:
            with lock:
                out.append((pair[0]["k"], pair[0]["ts"], pair[1]))

        return orders.join_asof(table, key="k", how="left", name="join").sink(keep)

    return build


def test_topics_of_other_partition_counts_are_refused_when_the_job_starts(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path, capsys: Any
) -> None:
    orders, tiers = new_topic(3, "orders"), new_topic(2, "tiers")
    job = PartitionedJob(
        orders,
        {"bootstrap.servers": bootstrap, "group.id": group},
        _build(tiers, [], threading.Lock()),
        checkpoint=tmp_path / "c",
    )
    with pytest.raises(SystemExit) as info:
        job.run()
    assert info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"topics '{orders}' (3 partitions) and '{tiers}' (2 partitions) are joined" in err[0]
    assert err[0].startswith("rivermark: PartitionedJob stopped: PartitionedJob: ")


def test_a_co_partitioned_as_of_join_in_every_task(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    orders, tiers = new_topic(2, "orders"), new_topic(2, "tiers")
    keys = range(6)
    # the key decides the partition (k % 2) on both topics; versions at 0 and 10, and a
    # last change at 1000 of every key, which moves each table partition's watermark past
    # every order
    for t in (0, 10, 1000):  # each partition in order of time
        for k in keys:
            produce(
                bootstrap, tiers, [json.dumps({"ts": t, "k": k, "v": f"{k}@{t}"})], partition=k % 2
            )
    for t in (5, 10, 15):
        for k in keys:
            produce(bootstrap, orders, [json.dumps({"ts": t, "k": k})], partition=k % 2)
    out: list[Any] = []
    lock = threading.Lock()
    job = PartitionedJob(
        orders,
        {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000},
        _build(tiers, out, lock),
        checkpoint=tmp_path / "c",
        every="200ms",
        source_options={"poll_interval": 0.05},
    )
    thread, raised = run_in_thread(job)
    try:
        wait_for(lambda: len(out) >= 18, timeout=90, what="every order joined")
    finally:
        job.stop()
        thread.join(60)
    assert raised == []
    expected = [(k, t, f"{k}@{0 if t < 10 else 10}") for k in keys for t in (5, 10, 15)]
    assert sorted(out) == sorted(expected)
