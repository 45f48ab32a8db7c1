"""The README's demo command: from_textfile -> accumulate -> sink_to_textfile,
killed with SIGKILL and resumed, must end byte-identical to an uncrashed run."""

from __future__ import annotations

import os
import shlex
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
    assert "outputs are byte-identical" in proc.stdout
    kills = int(proc.stdout.split("CrashReport(kills=")[1].split(",")[0])
    assert kills >= 1, proc.stdout
    reference = (tmp_path / "demo" / "reference.jsonl").read_bytes()
    # about a sixth of the events have a negative amount and are filtered out
    assert 90_000 < reference.count(b"\n") < 120_000
    # the closing hint works as printed, without an activated virtualenv
    hint = next(line for line in proc.stdout.splitlines() if "inspect the checkpoints" in line)
    command = shlex.split(hint.split(": ", 1)[1])
    bare = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    listed = subprocess.run(
        command, env={**bare, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split()[0] == "EPOCH"
