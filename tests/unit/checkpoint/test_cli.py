from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.cli import main

from .conftest import build


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    source, *_ = build(500)
    Job(source, checkpoint=tmp_path, every=None, every_batches=100).run()
    return tmp_path


def test_list_show_diff(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    epochs = LocalDirectoryStore(ckpt).list_epochs()
    assert main(["checkpoints", "list", str(ckpt)]) == 0
    listed = capsys.readouterr().out
    assert all(str(e) in listed for e in epochs) and "bytes" in listed
    assert main(["checkpoints", "show", str(ckpt)]) == 0
    shown = capsys.readouterr().out
    assert "position numbers = 500" in shown and "state sum:" in shown
    assert main(["checkpoints", "diff", str(ckpt), str(epochs[0]), str(epochs[-1])]) == 0
    diff = capsys.readouterr().out
    assert "position numbers: moved +500 items (0 -> 500)" in diff and "state sum:" in diff


def test_verify_exit_status(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", "verify", str(ckpt)]) == 0
    store = LocalDirectoryStore(ckpt)
    newest = store.list_epochs()[-1]
    (store.epoch_dir(newest) / "state" / "sum.pkl").write_bytes(b"x")
    assert main(["checkpoints", "verify", str(ckpt)]) == 1
    assert "DAMAGED" in capsys.readouterr().out


def test_run_bad_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "nocolon", "--checkpoint", str(tmp_path)]) == 2
    assert "app.py:name" in capsys.readouterr().err
    app = tmp_path / "app.py"
    app.write_text("from rivermark import Stream\nx = 1\nsource = Stream()\n")
    assert main(["run", f"{app}:x", "--checkpoint", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "must be a stream node" in err and "has: source" in err
    assert main(["run", f"{app}:sourc", "--checkpoint", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert f"{str(app)!r} defines no 'sourc'" in err and "has: source" in err
    assert len(err.strip().splitlines()) == 1


def test_run_a_state_cache_out_of_range_is_one_line_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = tmp_path / "app.py"
    app.write_text("from rivermark import Stream\nsource = Stream.from_iterable([1])\n")
    for size in ["abc", "4MiB", "nan", "1e30", "1e999", "2TiB"]:
        args = ["run", f"{app}:source", "-c", str(tmp_path / "c"), "--state", "rocksdb"]
        assert main([*args, "--state-cache", size]) == 2, size
        err = capsys.readouterr().err
        assert err.splitlines() == [
            "rivermark run: --state-cache must be a number of bytes from 8 MiB to 1 TiB "
            f"(e.g. '256MiB'), got {size!r}"
        ], err


def test_run_app_to_completion(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    out = tmp_path / "out.txt"
    app.write_text(
        "from rivermark import Stream\n"
        "src = Stream.from_iterable(list(range(100)))\n"
        f"src.map(lambda x: x * 2).sink_to_textfile({str(out)!r})\n"
    )
    assert main(["run", f"{app}:src", "--checkpoint", str(tmp_path / "c"), "--every", "50ms"]) == 0
    assert out.read_text() == "".join(f"{2 * i}\n" for i in range(100))


def test_fault_point_kills_the_process(tmp_path: Path) -> None:
    code = (
        "from rivermark.testing.faults import fault_point\n"
        "fault_point('x'); print('first', flush=True); fault_point('x'); print('second')\n"
    )
    env = {**os.environ, "RIVERMARK_FAULT": "x:2"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=30)
    assert res.returncode == -signal.SIGKILL
    assert res.stdout == b"first\n"
