"""SIGKILL while a savepoint is written: earlier checkpoints stay intact, the rerun is exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore

pytestmark = pytest.mark.crash

APP = Path(__file__).parent / "apps" / "savepoint_app.py"
N = 40_000


def reference() -> str:
    state: dict[int, int] = {}
    lines = []
    for i in range(N):
        k = (i * 13) % 211
        n = state.get(k, 0) + 1
        if n >= 9:
            del state[k]
        else:
            state[k] = n
        lines.append(f"{len(state)}\n")
    return "".join(lines)


def run(tmp: Path, fault: str | None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env.pop("RIVERMARK_FAULT", None)
    if fault is not None:
        env["RIVERMARK_FAULT"] = fault
    cmd = [sys.executable, str(APP), str(tmp / "out.txt"), str(tmp / "ckpt"), str(tmp / "r.json")]
    return subprocess.run(cmd, env=env, capture_output=True, timeout=120)


def test_a_kill_during_a_savepoint_leaves_earlier_checkpoints_and_the_rerun_is_exact(
    tmp_path: Path,
) -> None:
    # the process kills itself once the savepoint's state files are written
    res = run(tmp_path, "savepoint-after-state-files")
    assert res.returncode == -9, res.stderr.decode()[-2000:]
    store = LocalDirectoryStore(tmp_path / "ckpt")
    epochs = store.list_epochs()
    assert epochs, "no checkpoint survived"
    for e in epochs:
        store.verify(e)  # raises if damaged
    # the savepoint's state files are there, its manifest is not: it does not exist
    assert [d.name for d in store.list_incomplete()] == [f"{epochs[-1] + 1:012d}"]
    assert not any(store.read_manifest(e).savepoint for e in epochs)
    res = run(tmp_path, None)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["restored"] == epochs[-1]
    assert (tmp_path / "out.txt").read_text() == reference()
    sp = report["savepoint"]
    m = store.read_manifest(sp)
    assert m.savepoint and m.chains["counts"]["parent"] is None
    assert sp in store.list_epochs() and store.list_incomplete() == []
