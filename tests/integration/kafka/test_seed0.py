"""Seed 0 acceptance: a streaming DataFrame over Kafka batches, SIGKILLed, resumes in sync.

A producer thread keeps writing JSON records to a single-partition topic while
two copies of ``examples/seed0_kafka.py`` (through ``seed0_app.py``) read it:
one runs uncrashed, the other is SIGKILLed at random moments (and at every
fault point of the checkpoint protocol) and restarted until it finishes.
Their output files must be byte-identical, the final running sums must equal
pandas over every produced record, and every checkpoint manifest must hold
the Kafka offsets and the DataFrame state together.

The producer flushes every 10 records (one Kafka record batch, appended
atomically), so the source's batches of ``max_batch_size=10`` are the same
in every run whatever the timing, and so is every per-batch output line.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pandas as pd
import pytest

from rivermark.kafka.topic_ids import offsets_of
from rivermark.testing.crash import run_uncrashed, run_with_crashes

pytestmark = [pytest.mark.kafka, pytest.mark.crash]

APP = Path(__file__).with_name("seed0_app.py")
NAMES = ["Alice", "Tom", "Linda", "Bob", "Eve"]
N = 3000
CHUNK = 10
# self-kills inside the final checkpoint: the restart finds the input's end in the
# restored state (or reads the sentinel again) and must still stop
FAULT_POINTS = ("after-state-files", "after-manifest")


def _records(seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"Name": rng.choice(NAMES), "Amount": rng.randrange(1, 1000)} for _ in range(N)]


def _produce_slowly(
    bootstrap: str,
    topic: str,
    records: list[dict[str, Any]],
    paced_by: Callable[[int], None] = lambda part: None,
) -> None:
    """Write ``records`` in record batches of CHUNK over a few seconds, then the sentinel.

    ``paced_by(part)`` is called before each fifth of the records after the
    first: the crash test waits there for its kills, so that they land while
    records are still coming, however slowly a loaded machine restarts the job.
    """
    p = ck.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 10_000, "enable.idempotence": True}
    )
    stop = threading.Event()
    fifth = len(records) // 5
    for i in range(0, len(records), CHUNK):
        if i and i % fifth == 0:
            paced_by(i // fifth)
        for r in records[i : i + CHUNK]:
            p.produce(topic, json.dumps(r).encode(), partition=0)
        assert p.flush(30) == 0  # one record batch per chunk
        stop.wait(0.01)
    p.produce(topic, json.dumps({"Name": "__end__"}).encode(), partition=0)
    assert p.flush(30) == 0


def _newest_manifest(ckpt: Path) -> dict[str, Any] | None:
    found = []
    for m in (ckpt / "checkpoints").glob("*/manifest.json"):
        try:
            found.append((int(m.parent.name), json.loads(m.read_text())))
        except (ValueError, OSError):
            continue  # being pruned or written right now
    return max(found, key=lambda t: t[0])[1] if found else None


def _checkpointed(ckpt: Path) -> int | None:
    """The epoch of the newest checkpoint in ``ckpt`` (how far the crashed job got)."""
    epochs = [int(m.parent.name) for m in (ckpt / "checkpoints").glob("*/manifest.json")]
    return max(epochs, default=None)


def _check_manifest(manifest: dict[str, Any], topic: str) -> None:
    """Offsets and DataFrame state in the same manifest."""
    (pos,) = manifest["positions"].values()
    assert set(offsets_of(pos)) <= {f"{topic}:0"}
    fp = manifest["fingerprint"]
    aggregates = [nid for nid, sig in fp.items() if sig.startswith("Aggregate(")]
    assert len(aggregates) == 2, fp  # the window and the groupby sum
    for nid in aggregates:
        assert manifest["state"][nid]["size"] > 0, manifest
    assert manifest["sinks"], manifest


def _final_totals(path: Path) -> dict[str, int]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [d["totals"] for d in lines if "totals" in d][-1]


def test_seed0_dataframe_state_and_offsets_resume_in_sync(
    bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=1, prefix="seed0")
    records = _records()

    def cmd(name: str) -> list[str]:
        return [
            sys.executable,
            str(APP),
            bootstrap,
            topic,
            str(tmp_path / f"ckpt-{name}"),
            str(tmp_path / f"{name}.jsonl"),
        ]

    def env(name: str) -> dict[str, str]:
        e = dict(os.environ)
        e.update(SEED0_GROUP=f"seed0-{name}-{topic}", SEED0_BATCH_SLEEP="0.03")
        return e

    ref_error: list[BaseException] = []

    def reference() -> None:
        try:
            # the producer waits for the crash run's kills: the reference reads as long
            run_uncrashed(cmd("ref"), env=env("ref"), timeout=600)
        except BaseException as e:  # re-raised in the test thread
            ref_error.append(e)

    crash_ckpt = tmp_path / "ckpt-crash"
    manifests: list[dict[str, Any]] = []
    killed = threading.Condition()
    kills_seen = [0]

    def on_kill(n: int) -> None:
        m = _newest_manifest(crash_ckpt)
        if m is not None:
            manifests.append(m)
        with killed:
            kills_seen[0] += 1
            killed.notify_all()

    def paced_by(part: int) -> None:
        # two random kills per fifth of the input (the first fifth is written at once):
        # the kills land mid-run; a bound so that a stuck harness fails, not hangs
        with killed:
            killed.wait_for(lambda: kills_seen[0] >= 2 * part, timeout=240)

    def ready(pid: int) -> bool:
        try:
            return f"pid={pid} " in (crash_ckpt / "LOCK").read_text()
        except OSError:
            return False

    # both jobs read while the producer is still writing
    ref = threading.Thread(target=reference)
    producer = threading.Thread(
        target=_produce_slowly, args=(bootstrap, topic, records), kwargs={"paced_by": paced_by}
    )
    ref.start()
    producer.start()
    try:
        report = run_with_crashes(
            cmd("crash"),
            env=env("crash"),
            kills=10,
            min_delay=0.3,
            max_delay=1.2,
            fault_points=FAULT_POINTS,
            timeout=90,  # without a new checkpoint; a loaded machine may take longer in all
            seed=5,
            on_kill=on_kill,
            ready=ready,
            progress=lambda: _checkpointed(crash_ckpt),
        )
    finally:
        producer.join(300)
        ref.join(600)
    if ref_error:
        raise ref_error[0]
    assert report.completed
    assert report.kills == 10, report.summary()
    assert set(report.fault_kills) == set(FAULT_POINTS), report

    ref_out, crash_out = tmp_path / "ref.jsonl", tmp_path / "crash.jsonl"
    assert crash_out.read_bytes() == ref_out.read_bytes()

    # nothing lost, nothing doubled: the final running sums are pandas over all records
    expected = pd.DataFrame(records).groupby("Name").Amount.sum()
    assert _final_totals(crash_out) == {k: int(v) for k, v in expected.items()}
    # the last window is the last 5 rows
    last = pd.DataFrame(records[-5:]).groupby("Name").Amount.sum()
    lines = [json.loads(line) for line in crash_out.read_text().splitlines()]
    assert [d["window"] for d in lines if "window" in d][-1] == {k: int(v) for k, v in last.items()}
    # one window line and one totals line per batch of 10
    assert len(lines) == 2 * (N // CHUNK)

    # every checkpoint seen holds the offsets and the DataFrame state together
    final = _newest_manifest(crash_ckpt)
    assert final is not None
    manifests.append(final)
    assert len(manifests) >= 5
    for m in manifests:
        _check_manifest(m, topic)
    # the kills landed mid-run: checkpoints at several different offsets
    offsets = {next(iter(m["positions"].values())).get(f"{topic}:0") for m in manifests}
    assert len(offsets) >= 3, offsets
    (final_pos,) = final["positions"].values()
    assert offsets_of(final_pos) == {f"{topic}:0": N + 1}
