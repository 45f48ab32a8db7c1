"""The as-of, interval and window joins after SIGKILLs at random and at every fault point.

``apps/asofjoin_app.py`` joins the records of a file with a table built from
the changes in the same file (out of order, deletes, late records on both
sides), pairs them with the changes at most 0.5 s apart, and co-groups both
in 1 s windows.  Every run must write the bytes an uninterrupted run writes:
each join alone under random kills, all three at every fault point, and the
as-of join against a RocksDB table larger than its cache.
"""

from __future__ import annotations

import hashlib
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


def _env(
    workdir: Path,
    out: Path,
    work: int = 0,
    joins: str = "asof,interval,window",
    source: str = "in.jsonl",
) -> dict[str, str]:
    env = dict(os.environ)
    env["RIVERMARK_APP_INPUT"] = str(workdir / source)
    env["RIVERMARK_APP_JOINS"] = joins
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
    # a late record goes to the .late of all three joins
    assert len(joins) == sum(1 for line in _lines(N) if '"L"' in line) - late_records // 3
    assert any(line.startswith(b"late T") for line in lines)
    assert any(line.endswith(b" None") for line in joins)  # deleted or not there yet
    pairs = [line for line in lines if line.startswith(b"pair ")]
    assert any(line.endswith(b" None") for line in pairs)
    assert sum(not line.endswith(b" None") for line in pairs) > 1000
    windows = [line for line in lines if line.startswith(b"window ")]
    assert any(line.endswith(b" []") for line in windows)  # records, no change
    assert any(b" [] [" in line for line in windows)  # changes, no record
    assert sum(not line.endswith(b" []") and b" [] [" not in line for line in windows) > 100
    return data


def _reference_of(workdir: Path, joins: str) -> bytes:
    """An uninterrupted run's output with only ``joins``."""
    out = workdir / f"reference-{joins}.txt"
    run_uncrashed(_cmd(workdir / f"ref-{joins}-ckpt"), env=_env(workdir, out, joins=joins))
    return out.read_bytes()


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


_FIRST_WORD = {"asof": b"join ", "interval": b"pair ", "window": b"window "}


@pytest.mark.parametrize("joins", ["asof", "interval", "window"])
def test_random_kills_give_identical_joins(workdir: Path, reference: bytes, joins: str) -> None:
    expected = _reference_of(workdir, joins)
    # the run of one join writes that join's lines of the run of all three
    first = _FIRST_WORD[joins]
    assert [x for x in expected.splitlines() if x.startswith(first)] == [
        x for x in reference.splitlines() if x.startswith(first)
    ]
    ckpt = workdir / f"random-{joins}-ckpt"
    out = workdir / f"random-{joins}.txt"
    size = (workdir / "in.jsonl").stat().st_size
    progress: list[int] = []

    def record_progress(_: int) -> None:
        p = _position(ckpt)
        if p is not None:
            progress.append(p)

    env = _env(workdir, out, 600, joins)
    env["RIVERMARK_APP_WORK_WHILE_KILLED"] = "1"  # the run after the last kill at full speed
    report = run_with_crashes(
        [*_cmd(ckpt), "--every-batches", "500"],
        env=env,
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
    assert out.read_bytes() == expected


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


# The table of the RocksDB test: 200,000 keys of 128-byte values, about 20 MB
# in RocksDB, 2.4 times the smallest cache (8 MiB) and 50 times the keys it
# keeps as Python objects (state_cache / 2048 = 4,096).  A million keys
# (275 MB of state) pass too, but the test then takes about 4 minutes on a
# busy machine instead of 1.
TABLE_KEYS = 200_000
STATE_CACHE = 8 * 1024 * 1024


def _table_lines(keys: int) -> list[str]:
    """One change per key (every 500th a delete), each followed by a record of an older key."""
    out = []
    for i in range(2 * keys):
        ts = i / 1000 - ((i * 7919) % 500) / 1000  # up to 0.5 s behind
        if i % 2 == 0:
            v = None if i % 1000 == 2 else hashlib.sha256(str(i).encode()).hexdigest() * 2
            rec = {"s": "T", "i": i, "ts": round(ts, 3), "k": i // 2, "v": v}
        else:
            k = (i * 104729) % (i // 2 + 1)  # any key seen so far, scattered
            rec = {"s": "L", "i": i, "ts": round(ts, 3), "k": k}
        out.append(json.dumps(rec) + "\n")
    return out


def _rocks_cmd(ckpt: Path, state_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{APP}:source",
        "--checkpoint", str(ckpt), "--every", "0.5s", "--keep", "3",
        "--state", "rocksdb", "--state-cache", str(STATE_CACHE), "--state-dir", str(state_dir),
    ]  # fmt: skip


def _size(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def test_random_kills_rocksdb_table_larger_than_cache(workdir: Path) -> None:
    (workdir / "table.jsonl").write_text("".join(_table_lines(TABLE_KEYS)))
    ref = workdir / "table-reference.txt"
    ref_state = workdir / "table-ref-state"
    run_uncrashed(
        _rocks_cmd(workdir / "table-ref-ckpt", ref_state),
        env=_env(workdir, ref, joins="asof", source="table.jsonl"),
    )
    assert _size(ref_state) > 2 * STATE_CACHE, _size(ref_state)
    expected = ref.read_bytes()
    joins = expected.splitlines()
    assert len(joins) == TABLE_KEYS  # every record joined once, none late
    assert sum(line.endswith(b" None") for line in joins) < TABLE_KEYS // 50  # deletes, waits
    ckpt = workdir / "table-random-ckpt"
    out = workdir / "table-random.txt"
    size = (workdir / "table.jsonl").stat().st_size
    progress: list[int] = []

    def record_progress(_: int) -> None:
        p = _position(ckpt)
        if p is not None:
            progress.append(p)

    report = run_with_crashes(
        _rocks_cmd(ckpt, workdir / "table-random-state"),
        env=_env(workdir, out, joins="asof", source="table.jsonl"),
        kills=5,
        min_delay=0.3,
        max_delay=2.5,
        timeout=120,
        seed=29,
        on_kill=record_progress,
        ready=lambda pid: f"pid={pid} " in _lock_text(ckpt),
        progress=lambda: _position(ckpt),
    )
    assert report.completed
    assert report.kills >= 5, report
    assert sum(0 < p < size for p in progress) >= 3, progress  # killed mid-table
    assert out.read_bytes() == expected
