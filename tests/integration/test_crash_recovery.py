"""Kill -9 the acceptance pipeline many times; its output must equal an uncrashed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing.crash import run_uncrashed, run_with_crashes
from rivermark.testing.faults import FAULT_POINTS

pytestmark = pytest.mark.crash

APP = Path(__file__).parent / "apps" / "pipeline_app.py"
N = 100_000


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("crash")
    with open(d / "in.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({"v": i}) + "\n")
    return d


def _cmd(ckpt: Path) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{APP}:source",
        "--checkpoint", str(ckpt), "--every", "0.2s", "--keep", "3",
    ]  # fmt: skip


def _holds_lock(ckpt: Path, pid: int) -> bool:
    try:
        return f"pid={pid} " in (ckpt / "LOCK").read_text()
    except OSError:
        return False


def _env(workdir: Path, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["RIVERMARK_APP_INPUT"] = str(workdir / "in.jsonl")
    env["RIVERMARK_APP_OUTPUT"] = str(out)
    return env


@pytest.fixture(scope="module")
def reference(workdir: Path) -> bytes:
    out = workdir / "reference.txt"
    run_uncrashed(_cmd(workdir / "ref-ckpt"), env=_env(workdir, out))
    data = out.read_bytes()
    assert data.count(b"\n") > N // 2
    return data


def test_random_kills_give_identical_output(workdir: Path, reference: bytes) -> None:
    out = workdir / "random.txt"
    ckpt = workdir / "random-ckpt"
    env = _env(workdir, out)
    env["RIVERMARK_APP_WORK"] = "60"  # same output, ~8 s of processing: killed mid-data
    progress: list[int] = []

    def record_progress(n: int) -> None:
        store = LocalDirectoryStore(ckpt) if ckpt.exists() else None
        epochs = store.list_epochs() if store else []
        if store and epochs:
            progress.append(store.read_manifest(epochs[-1]).positions["lines"])

    report = run_with_crashes(
        _cmd(ckpt),
        env=env,
        kills=20,
        min_delay=0.05,
        max_delay=0.6,
        timeout=150,
        seed=7,
        on_kill=record_progress,
        ready=lambda pid: _holds_lock(ckpt, pid),
    )
    assert report.completed
    assert report.kills == 20
    # the kills landed at many different points of the input, not all at the start
    assert len(set(progress)) >= 5, progress
    assert 0 < max(progress) < N
    assert out.read_bytes() == reference
    assert len(LocalDirectoryStore(ckpt).list_epochs()) <= 3


@pytest.mark.parametrize("point", [*FAULT_POINTS, "after-state-files:1", "after-manifest:1"])
def test_fault_points_give_identical_output(workdir: Path, reference: bytes, point: str) -> None:
    # ":3" = the third checkpoint of the run (the first is the start checkpoint), i.e. mid-data;
    # ":1" = during the start checkpoint, before any record
    name = point if ":" in point else f"{point}:3"
    tag = name.replace(":", "-")
    out = workdir / f"fault-{tag}.txt"
    report = run_with_crashes(
        _cmd(workdir / f"fault-{tag}-ckpt"),
        env=_env(workdir, out),
        kills=0,
        fault_points=[name],
        timeout=60,
    )
    assert report.fault_kills == {name: 1}
    assert out.read_bytes() == reference


def test_sigterm_stops_gracefully_and_resumes(workdir: Path, reference: bytes) -> None:
    out = workdir / "term.txt"
    ckpt = workdir / "term-ckpt"
    env = _env(workdir, out)
    proc = subprocess.Popen(_cmd(ckpt), env=env, stderr=subprocess.PIPE)
    store = LocalDirectoryStore(ckpt) if ckpt.exists() else None
    deadline = time.monotonic() + 120  # a wait on a condition; generous under load
    while time.monotonic() < deadline:
        if ckpt.exists():
            store = LocalDirectoryStore(ckpt)
            if len(store.list_epochs()) >= 2:
                break
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert store is not None
    last = store.read_manifest(store.list_epochs()[-1])
    # the final checkpoint matches the output written so far
    assert last.sinks and next(iter(last.sinks.values()))["length"] == out.stat().st_size
    run_uncrashed(_cmd(ckpt), env=env)
    assert out.read_bytes() == reference


def test_second_job_on_same_directory_is_refused(workdir: Path) -> None:
    ckpt = workdir / "locked-ckpt"
    env = _env(workdir, workdir / "locked.txt")
    env["RIVERMARK_APP_WORK"] = "100000"  # the first job is still running when the second starts
    first = subprocess.Popen(_cmd(ckpt), env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (ckpt / "LOCK").exists() or not (ckpt / "LOCK").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        second = subprocess.run(_cmd(ckpt), env=env, capture_output=True, timeout=30)
        assert second.returncode == 2
        assert f"pid={first.pid}" in second.stderr.decode()
    finally:
        first.kill()
        first.communicate()
