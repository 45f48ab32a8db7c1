"""The README's demo command: from_textfile -> accumulate -> sink_to_textfile,
killed with SIGKILL and resumed, must end byte-identical to an uncrashed run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.crash
def test_demo_kills_and_resumes_exactly(tmp_path: Path) -> None:
    env = dict(
        os.environ, RIVERMARK_DEMO_DIR=str(tmp_path / "demo"), RIVERMARK_DEMO_EVENTS="120000"
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    # kill points by progress: 120,000 events, 5 kills at every sixth of them
    assert (
        "crashed run: killed with SIGKILL 5 times (at progress 20,000, 40,000, 60,000, "
        "80,000, 100,000); 6 runs; finished" in out
    ), out
    assert "outputs are byte-identical after 5 kills" in out, out
    assert "CrashReport(" not in out  # a readable summary, not a repr
    reference = (tmp_path / "demo" / "reference.jsonl").read_bytes()
    # about a sixth of the events have a negative amount and are filtered out
    assert 90_000 < reference.count(b"\n") < 120_000
    # the closing hint works as printed, without an activated virtualenv
    hint = out.strip().splitlines()[-1].split()
    bare = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    listed = subprocess.run(
        hint, env={**bare, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split()[0] == "EPOCH"
