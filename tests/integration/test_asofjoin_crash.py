"""The as-of and interval joins after SIGKILLs at random and at every checkpoint fault point.

``apps/asofjoin_app.py`` joins the records of a file with a table built from
the changes in the same file (out of order, deletes, late records on both
sides), and pairs them with the changes at most 0.5 s apart.  Every run must write the bytes an uninterrupted run writes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from rivermark.checkpoint import CheckpointNotFoundError, open_store
from rivermark.testing.crash import run_uncrashed, run_with_crashes
from rivermark.testing.faults import FAULT_POINTS

pytestmark = pytest.mark.crash

APP = Path(__file__).parent / "apps" / "asofjoin_app.py"
N = 20_000


def _lines(n: int) -> list[str]:
    out = []
    for i in range(n):
        ts = i / 100 - ((i * 7919) % 300) / 100  # up to 3 s behind
        if i % 991 == 400:
            ts -= 30  # far behind its side's watermark: late
        k = (i * 31) % 17
        if i % 3 == 0:
            v = None if i % 37 == 0 else i
            rec = {"s": "T", "i": i, "ts": round(ts, 2), "k": k, "v": v}
        else:
            rec = {"s": "L", "i": i, "ts": round(ts, 2), "k": k}
        out.append(json.dumps(rec) + "\n")
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("asofjoin")
    (d / "in.jsonl").write_text("".join(_lines(N)))
    return d


def _cmd(ckpt: Path) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{APP}:source",
        "--checkpoint", str(ckpt), "--every", "0.2s", "--keep", "3",
    ]  # fmt: skip


def _env(workdir: Path, out: Path, work: int = 0) -> dict[str, str]:
    env = dict(os.environ)
    env["RIVERMARK_APP_INPUT"] = str(workdir / "in.jsonl")
    env["RIVERMARK_APP_OUTPUT"] = str(out)
    env["RIVERMARK_APP_WORK"] = str(work)
    env["RIVERMARK_COMPACT_EVERY"] = "3"
    return env


@pytest.fixture(scope="module")
def reference(workdir: Path) -> bytes:
    out = workdir / "reference.txt"
    run_uncrashed(_cmd(workdir / "ref-ckpt"), env=_env(workdir, out))
    data = out.read_bytes()
    lines = data.splitlines()
    joins = [line for line in lines if line.startswith(b"join ")]
    late_records = sum(1 for line in lines if line.startswith(b"late L"))
    # a late record goes to the .late of both joins
    assert len(joins) == sum(1 for line in _lines(N) if '"L"' in line) - late_records // 2
    assert any(line.startswith(b"late T") for line in lines)
    assert any(line.endswith(b" None") for line in joins)  # deleted or not there yet
    pairs = [line for line in lines if line.startswith(b"pair ")]
    assert any(line.endswith(b" None") for line in pairs)
    assert sum(not line.endswith(b" None") for line in pairs) > 1000
    return data


def _position(ckpt: Path) -> int | None:
    try:
        store = open_store(str(ckpt), create=False)
    except CheckpointNotFoundError:
        return None
    epochs = store.list_epochs()
    if not epochs:
        return None
    return int(store.read_manifest(epochs[-1]).positions["lines"]["offset"])


def _lock_text(ckpt: Path) -> str:
    try:
        return (ckpt / "LOCK").read_text()
    except OSError:
        return ""


def test_random_kills_give_identical_joins(workdir: Path, reference: bytes) -> None:
    ckpt = workdir / "random-ckpt"
    out = workdir / "random.txt"
    size = (workdir / "in.jsonl").stat().st_size
    progress: list[int] = []

    def record_progress(_: int) -> None:
        p = _position(ckpt)
        if p is not None:
            progress.append(p)

    report = run_with_crashes(
        [*_cmd(ckpt), "--every-batches", "500"],
        env=_env(workdir, out, 600),
        kills=12,
        min_delay=0.05,
        max_delay=0.6,
        timeout=200,
        seed=23,
        on_kill=record_progress,
        ready=lambda pid: f"pid={pid} " in _lock_text(ckpt),
    )
    assert report.completed
    assert report.kills >= 7, report
    assert sum(0 < p < size for p in progress) >= 3, progress  # killed mid-data
    assert out.read_bytes() == reference


@pytest.mark.parametrize("point", [f"{p}:3" for p in FAULT_POINTS])
def test_fault_points_give_identical_joins(workdir: Path, reference: bytes, point: str) -> None:
    tag = point.replace(":", "-")
    report = run_with_crashes(
        [*_cmd(workdir / f"fault-{tag}-ckpt"), "--every-batches", "2000"],
        env=_env(workdir, workdir / f"fault-{tag}.txt"),
        kills=0,
        fault_points=[point],
        timeout=90,
    )
    assert report.fault_kills == {point: 1}
    assert (workdir / f"fault-{tag}.txt").read_bytes() == reference
