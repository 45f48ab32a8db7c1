"""RocksDB state on a full disk: the job stops within bounded time with one line, then resumes.

The state directory is on a real 20 MiB tmpfs (mounted here; the tests run as
root) and the app's keyed state (``apps/keyed_app.py`` with scattered keys and
2,000 bytes beside each count) outgrows it.  The job must not hang: it exits
with one line naming the state directory and ENOSPC, releases its store's
lock, and a run with the state directory on a roomy disk resumes from the
last checkpoint to the output of a run that never failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rivermark.checkpoint import open_store
from rivermark.testing.crash import run_uncrashed

KEYED_APP = Path(__file__).parent / "apps" / "keyed_app.py"
N = 40_000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "small-disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _cmd(ckpt: Path) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{KEYED_APP}:source",
        "--checkpoint", str(ckpt), "--every", "0.3s",
    ]  # fmt: skip


def _env(tmp_path: Path, out: Path, state: str | None, state_dir: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["RIVERMARK_APP_INPUT"] = str(tmp_path / "in.jsonl")
    env["RIVERMARK_APP_OUTPUT"] = str(out)
    env["RIVERMARK_APP_KEYS"] = str(10**9)  # every key new, in scattered order
    env["RIVERMARK_APP_PAD"] = "2000"  # ~1 KB of state per key once compressed
    if state is not None:
        env["RIVERMARK_STATE"] = state
    if state_dir is not None:
        env["RIVERMARK_STATE_DIR"] = str(state_dir)
        env["RIVERMARK_STATE_CACHE"] = "16MiB"
    return env


def _counts(ckpt: Path) -> dict[str, list[int]]:
    store = open_store(str(ckpt), create=False)
    return store.read_manifest(store.list_epochs()[-1]).counts


def test_a_full_state_disk_stops_the_job_with_one_line_and_it_resumes_on_a_roomy_one(
    tmp_path: Path, small_disk: Path
) -> None:
    with open(tmp_path / "in.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({"v": i}) + "\n")
    ref_out = tmp_path / "reference.txt"
    run_uncrashed(_cmd(tmp_path / "ref-ckpt"), env=_env(tmp_path, ref_out, None, None))

    ckpt, out = tmp_path / "ckpt", tmp_path / "out.txt"
    full = small_disk / "state"
    started = time.monotonic()
    proc = subprocess.run(
        _cmd(ckpt),
        env=_env(tmp_path, out, "rocksdb", full),
        capture_output=True,
        text=True,
        timeout=240,  # never a hang: the job stops by itself
    )
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rivermark: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert f"the RocksDB state in '{full}/" in errors[0], errors[0]
    assert "no space left on the device (ENOSPC)" in errors[0], errors[0]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    # it stopped before the end of its input (the disk filled)
    store = open_store(str(ckpt), create=False)
    last = store.list_epochs()[-1]
    assert int(store.read_manifest(last).positions["lines"]) < N, took

    # the same job (its store's lock free again) with its state directory on a
    # roomy disk resumes exactly
    roomy = tmp_path / "roomy-state"
    run_uncrashed(_cmd(ckpt), env=_env(tmp_path, out, "rocksdb", roomy))
    assert out.read_bytes() == ref_out.read_bytes()
    assert _counts(ckpt) == _counts(tmp_path / "ref-ckpt")
