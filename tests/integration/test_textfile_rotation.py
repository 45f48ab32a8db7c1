"""A job tailing a file that is rotated under it, stopped with SIGTERM and resumed: every line once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rivermark.testing import wait_for

RIVERMARK = str(Path(sys.executable).parent / "rivermark")


def numbered(a: int, b: int, tag: str) -> str:
    return "".join(f"{tag} {i}\n" for i in range(a, b))


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def start(app: Path, ckpt: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("a") as errfile:
        return subprocess.Popen(
            [RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt), "--every", "50ms"],
            stderr=errfile,
            stdout=subprocess.DEVNULL,
        )


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, log.read_text()  # a graceful stop, with a final checkpoint


@pytest.mark.parametrize("poll", ["10ms", "30s"], ids=["noticed-running", "noticed-at-resume"])
def test_rotation_then_sigterm_then_resume_processes_every_line_once(
    tmp_path: Path, poll: str
) -> None:
    inp, out, ckpt, log = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt", tmp_path / "log"
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            f"""\
            from rivermark import Stream

            source = Stream.from_textfile({str(inp)!r}, poll_interval={poll!r}, name="input")
            source.map(str.upper).sink_to_textfile({str(out)!r}, end="")
            """
        )
    )
    inp.write_text(numbered(0, 2000, "old"))
    proc = start(app, ckpt, log)
    try:
        wait_for(lambda: line_count(out) == 2000, timeout=120)
        os.rename(inp, tmp_path / "in.1")
        inp.write_text(numbered(0, 3000, "new"))
        if poll == "10ms":  # the running job moved on to the new file
            wait_for(lambda: line_count(out) > 2000, timeout=120)
    finally:
        stop(proc, log)
    with inp.open("a") as f:  # lines only the resumed job can have read
        f.write(numbered(3000, 3500, "new"))
    proc = start(app, ckpt, log)
    try:
        wait_for(lambda: line_count(out) >= 5500, timeout=120)
    finally:
        stop(proc, log)
    expected = numbered(0, 2000, "old") + numbered(0, 3500, "new")
    assert out.read_text() == expected.upper()
    assert "Traceback" not in log.read_text()
