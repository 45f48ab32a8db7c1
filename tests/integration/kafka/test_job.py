from __future__ import annotations

import json
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
from rivermark.checkpoint import Job
from rivermark.kafka.topic_ids import offsets_of

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
    # every partition gets records (an unkeyed producer may put all in one)
    for p in range(3):
        produce(bootstrap, a, [f"a{i}" for i in range(p, 60, 3)], partition=p)
    for p in range(2):
        produce(bootstrap, b, [f"b{i}" for i in range(p, 40, 2)], partition=p)
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
    pos_a = {int(k.rsplit(":", 1)[1]): v for k, v in sa.position_now().items()}
    assert pos_a == {0: 20, 1: 20, 2: 20}
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
    positions = sa2.position_now()
    assert sum(positions.values()) == 70 and set(positions) == {f"{a}:{p}" for p in range(3)}


def test_crash_before_first_interval_checkpoint_replays_from_the_start_of_the_run(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    """auto.offset.reset="latest": the start checkpoint pins the offsets the run began at.

    Records written after the job started and before its first interval
    checkpoint must be read again after a SIGKILL, not skipped because
    "latest" has moved on (and the empty partition is pinned too).
    """
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, [f"old{i}" for i in range(5)], partition=0)
    ckpt = tmp_path / "ckpt"
    script = textwrap.dedent(
        f"""
        import time
        import rivermark.kafka
        from rivermark import Stream, Job
        params = {{"bootstrap.servers": {bootstrap!r}, "group.id": {group!r},
                   "auto.offset.reset": "latest"}}
        src = Stream.from_kafka_batched({topic!r}, params, poll_interval=0.02)
        src.flatten().sink(lambda v: print("got", v.decode(), flush=True))
        Job(src, checkpoint={str(ckpt)!r}, every=None).run()
        """
    )

    def start() -> tuple[subprocess.Popen[str], list[str]]:
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, bufsize=1
        )
        lines: list[str] = []
        assert proc.stdout is not None
        out = proc.stdout

        def read() -> None:
            with out:  # closed once the process is gone and everything was read
                lines.extend(out)

        threading.Thread(target=read, daemon=True).start()
        return proc, lines

    proc, lines = start()
    try:
        wait_for(
            lambda: (ckpt / "checkpoints" / f"{1:012d}" / "manifest.json").exists(),
            what="the start checkpoint",
        )
        manifest = json.loads((ckpt / "checkpoints" / f"{1:012d}" / "manifest.json").read_text())
        (position,) = manifest["positions"].values()
        assert offsets_of(position) == {f"{topic}:0": 5, f"{topic}:1": 0}
        produce(bootstrap, topic, [f"new{i}" for i in range(0, 20, 2)], partition=0)
        produce(bootstrap, topic, [f"new{i}" for i in range(1, 20, 2)], partition=1)
        wait_for(lambda: sum(1 for x in lines if x.startswith("got")) >= 20, what="20 records")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    first = sorted(x.split()[1] for x in lines if x.startswith("got"))
    assert first == sorted(f"new{i}" for i in range(20))

    proc, lines = start()
    try:
        wait_for(lambda: sum(1 for x in lines if x.startswith("got")) >= 20, what="the replay")
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    again = sorted(x.split()[1] for x in lines if x.startswith("got"))
    assert again == first  # replayed from the start of the first run, old records never read
