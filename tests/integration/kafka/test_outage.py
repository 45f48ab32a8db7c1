"""A broker outage under an exactly-once job: SIGTERM stops it within the
commit deadline, with one line saying the broker was unreachable, and a rerun
gives exactly-once output."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing.kafka_broker import KafkaBroker, start_broker, stop_broker

from .helpers import FAULT_APP, consume_all, produce, start_app, wait_for

pytestmark = pytest.mark.kafka

KEYS = 10
DEADLINE = 10  # the sink's flush and commit deadlines, seconds


def test_a_broker_outage_stops_on_sigterm_within_the_deadline_and_a_rerun_is_exact(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    n = 6000
    inp, out = new_topic(partitions=2, prefix="in"), new_topic(prefix="out")
    records = [json.dumps({"k": i % KEYS}) for i in range(n)]
    produce(bootstrap, inp, records[0::2], partition=0)
    produce(bootstrap, inp, records[1::2], partition=1)
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_THROTTLE": "0.05",
        "FAULT_TIMEOUT": str(DEADLINE),
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    store = LocalDirectoryStore(ckpt)
    proc = start_app(ckpt, env, log, every="0.5s")
    try:
        wait_for(lambda: ckpt.exists() and len(store.list_epochs()) >= 3, what="three checkpoints")
        assert proc.poll() is None, log.read_text()[-3000:]
        stop_broker(kafka_broker)
        down = time.monotonic()
        try:
            # a checkpoint's flush or commit is now waiting for the broker
            wait_for(lambda: time.monotonic() - down >= 3, what="the outage to begin")
            proc.send_signal(signal.SIGTERM)
            # stopped within the flush and commit deadlines plus a few seconds
            status = proc.wait(timeout=2 * DEADLINE + 20)
            # the broker comes back once the job has stopped (a longer outage would
            # change nothing the job sees: nothing of it runs)
        finally:
            start_broker(kafka_broker.directory)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert status in (0, 2), text[-3000:]  # 2: a deadline fired before the stop
    assert "Traceback" not in text, text[-3000:]
    if status == 2:
        (line,) = re.findall(r"^rivermark: .*$", text, re.M)
        assert "broker was unreachable" in line and "resumes exactly" in line, line
    # the rerun (default deadlines) reads to the end and stops by itself
    env.update({"FAULT_STOP_AT_END": "1", "FAULT_TIMEOUT": "60"})
    proc = start_app(ckpt, env, log)
    assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
    msgs = consume_all(bootstrap, out, expected=n, timeout=30, committed_only=True)
    results = Counter(tuple(json.loads(m.value())) for m in msgs)
    assert max(results.values()) == 1, "duplicates"
    assert results == Counter((str(k), c) for k in range(KEYS) for c in range(1, n // KEYS + 1))


def test_a_commit_pending_on_an_unreachable_broker_has_a_deadline(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    """Every record acknowledged, the job idle: the next epoch's commit meets the outage."""
    bootstrap = kafka_broker.bootstrap
    n = 200
    inp, out = new_topic(prefix="in"), new_topic(prefix="out")
    produce(bootstrap, inp, [json.dumps({"k": i % KEYS}) for i in range(n)])
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_THROTTLE": "0",
        "FAULT_TIMEOUT": str(DEADLINE),
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    store = LocalDirectoryStore(ckpt)
    proc = start_app(ckpt, env, log, every="0.5s")
    try:
        wait_for(
            lambda: (
                len(consume_all(bootstrap, out, expected=n, timeout=5, committed_only=True)) >= n
            ),
            what="all output committed",
        )
        epochs = len(store.list_epochs())
        wait_for(lambda: len(store.list_epochs()) > epochs, what="an idle checkpoint")
        stop_broker(kafka_broker)
        try:
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=DEADLINE + 20)
        finally:
            start_broker(kafka_broker.directory)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert status == 2 and "Traceback" not in text, text[-3000:]
    (line,) = re.findall(r"^rivermark: .*$", text, re.M)
    assert "broker was unreachable" in line and "resumes exactly" in line, line
    env.update({"FAULT_STOP_AT_END": "1", "FAULT_TIMEOUT": "60"})
    assert start_app(ckpt, env, log).wait(timeout=240) == 0, log.read_text()[-3000:]
    msgs = consume_all(bootstrap, out, expected=n, timeout=30, committed_only=True)
    results = Counter(tuple(json.loads(m.value())) for m in msgs)
    assert results == Counter((str(k), c) for k in range(KEYS) for c in range(1, n // KEYS + 1))


def test_an_outage_past_the_deadline_ends_the_job_with_status_2_and_one_line(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    """No signal: the first deadline that fires ends the job, always with status 2."""
    bootstrap = kafka_broker.bootstrap
    n = 6000
    inp, out = new_topic(prefix="in"), new_topic(prefix="out")
    produce(bootstrap, inp, [json.dumps({"k": i % KEYS}) for i in range(n)])
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_THROTTLE": "0.02",
        "FAULT_TIMEOUT": str(DEADLINE),
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    store = LocalDirectoryStore(ckpt)
    proc = start_app(ckpt, env, log, every="0.5s")
    try:
        wait_for(lambda: ckpt.exists() and len(store.list_epochs()) >= 2, what="two checkpoints")
        assert proc.poll() is None, log.read_text()[-3000:]
        stop_broker(kafka_broker)
        try:
            status = proc.wait(timeout=3 * DEADLINE + 30)
        finally:
            start_broker(kafka_broker.directory)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert status == 2 and "Traceback" not in text, text[-3000:]
    (line,) = re.findall(r"^rivermark: .*$", text, re.M)
    assert "broker was unreachable" in line and "resumes exactly" in line, line


def test_a_restore_cut_short_by_the_broker_does_not_claim_a_fresh_start(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    """The broker is away while the sink initialises its transactions: no "starting fresh"."""
    inp, out = new_topic(prefix="in"), new_topic(prefix="out")
    produce(bootstrap, inp, [json.dumps({"k": i % KEYS}) for i in range(200)])
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_THROTTLE": "0",
        "FAULT_STOP_AT_END": "1",
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    assert start_app(ckpt, env, log).wait(timeout=240) == 0, log.read_text()[-3000:]
    assert LocalDirectoryStore(ckpt).list_epochs()
    with socket.socket() as s:  # a port where no broker listens
        s.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{s.getsockname()[1]}"
    full = {**os.environ, **env, "FAULT_BOOTSTRAP": nobody, "FAULT_TIMEOUT": "3"}
    run = subprocess.run(
        [sys.executable, "-m", "rivermark.cli", "run", f"{FAULT_APP}:src"]
        + ["--checkpoint", str(ckpt)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr[-3000:]
    assert "starting fresh" not in run.stdout, run.stdout
    assert "the restore from" in run.stdout and "did not finish" in run.stdout, run.stdout
    (line,) = re.findall(r"^rivermark: .*$", run.stderr, re.M)
    assert "broker was unreachable" in line and "init_transactions" in line, line
