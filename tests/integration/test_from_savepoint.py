"""Moving a job: stop with a savepoint (SIGTERM), start from it in a new location.

Real ``rivermark run`` processes; the output is compared with plain Python.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing import wait_for

from .apps.keyedcount import reference

RIVERMARK = str(Path(sys.executable).parent / "rivermark")
APP = Path(__file__).parent / "apps" / "moving_app.py"
N = 12_000


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    inp = tmp_path / "in.txt"
    inp.write_text("".join(f"{i}\n" for i in range(N)))
    e = dict(os.environ)
    for k in ("RIVERMARK_FAULT", "RIVERMARK_CHECKPOINT", "MOVING_MARK"):
        e.pop(k, None)
    e.update(MOVING_IN=str(inp), MOVING_OUT=str(tmp_path / "out.txt"))
    return e


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [RIVERMARK, "run", f"{APP}:source", "-q", "--every-batches", "1000", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_stop_with_a_savepoint_and_start_from_it_in_an_empty_location(
    tmp_path: Path, env: dict[str, str]
) -> None:
    old, new, mark = tmp_path / "old", tmp_path / "new", tmp_path / "mark"
    cmd = [RIVERMARK, "run", f"{APP}:source", "-q", "--every-batches", "1000"]
    cmd += ["--checkpoint", str(old), "--savepoint-on-stop", "--keep", "1"]
    log = tmp_path / "stderr.txt"
    with log.open("w") as errfile:
        proc = subprocess.Popen(cmd, env={**env, "MOVING_MARK": str(mark)}, stderr=errfile)
    try:
        wait_for(mark.exists, timeout=120)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert rc == 0, err
    found = re.search(r"^stopped with savepoint (\d+)$", err, re.M)
    assert found, err
    sp = int(found.group(1))
    store = LocalDirectoryStore(old)
    assert store.list_epochs()[-1] == sp and store.read_manifest(sp).savepoint
    done = len((tmp_path / "out.txt").read_text().splitlines())
    assert 3000 <= done < N  # stopped part way

    res = run(env, "--checkpoint", str(new), "--from-savepoint", str(old))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out.txt").read_text() == reference(N)
    moved = LocalDirectoryStore(new)
    assert moved.list_epochs()[0] == sp and moved.verify(sp).savepoint
    assert store.list_epochs()[-1] == sp  # the old location was only read

    # refusals: one line, exit 2, nothing written
    other = tmp_path / "other"
    for args, says in [
        (["--checkpoint", str(other), "--from-savepoint", f"{old}@999"], "no checkpoint 999"),
        (["--checkpoint", str(other), "--from-savepoint", f"{old}@x"], "must be an epoch"),
        (["--checkpoint", str(other), "--from-savepoint", str(old), "--from-scratch"], "exclude"),
    ]:
        res = run(env, *args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and says in lines[0], (args, res.stderr)
    assert not any(other.glob("checkpoints/*"))
    assert (tmp_path / "out.txt").read_text() == reference(N)
