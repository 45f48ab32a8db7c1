from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job

from .helpers import committed, produce, wait_for

pytestmark = pytest.mark.kafka


def _run(job: Job) -> threading.Thread:
    t = threading.Thread(target=job.run, daemon=True)
    t.start()
    return t


def _graph(bootstrap: str, a: str, b: str, group: str) -> tuple[Any, Any, list[bytes]]:
    params = {"bootstrap.servers": bootstrap, "group.id": group}
    sa = Stream.from_kafka_batched(a, params, poll_interval=0.05, name="a")
    sb = Stream.from_kafka_batched(b, params, poll_interval=0.05, name="b")
    seen: list[bytes] = []
    sa.union(sb).flatten().sink(seen.append)
    return sa, sb, seen


def test_two_topics_union_one_checkpoint_restart_resumes_exactly(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    a, b = new_topic(partitions=3, prefix="a"), new_topic(partitions=2, prefix="b")
    produce(bootstrap, a, [f"a{i}" for i in range(60)])
    produce(bootstrap, b, [f"b{i}" for i in range(40)])
    sa, _, seen = _graph(bootstrap, a, b, group)
    job = Job(sa, checkpoint=str(tmp_path / "ckpt"), every="0.3s")
    t = _run(job)
    wait_for(lambda: len(seen) >= 100, what="first 100")
    job.stop()
    t.join(30)
    assert sorted(seen) == sorted(
        [f"a{i}".encode() for i in range(60)] + [f"b{i}".encode() for i in range(40)]
    )
    # under a job the group offsets are the checkpointed positions (for lag tools)
    pos_a = {int(k.rsplit(":", 1)[1]): v for k, v in sa.position().items()}
    assert sum(pos_a.values()) == 60
    assert committed(bootstrap, group, a, 3) == pos_a

    produce(bootstrap, a, [f"a{i}" for i in range(60, 70)])
    produce(bootstrap, b, [f"b{i}" for i in range(40, 45)])
    sa2, _, seen2 = _graph(bootstrap, a, b, group)
    job2 = Job(sa2, checkpoint=str(tmp_path / "ckpt"), every="0.3s")
    t2 = _run(job2)
    wait_for(lambda: len(seen2) >= 15, what="the 15 new records")
    job2.stop()
    t2.join(30)
    assert job2.restored_epoch is not None
    assert sorted(seen2) == sorted(
        [f"a{i}".encode() for i in range(60, 70)] + [f"b{i}".encode() for i in range(40, 45)]
    )
    positions = sa2.position()
    assert sum(positions.values()) == 70 and set(positions) == {f"{a}:{p}" for p in range(3)}
