"""The local state directory of RocksDB state: one job at a time, private, removed when made by default.

Real ``rivermark run`` processes: a job that keeps RocksDB state locks its
state directory; a second job on it is refused with one line naming the
holder, while jobs on directories of their own (a ``PartitionedJob``'s
tasks: ``<state_dir>/<topic>-<partition>``) run side by side.  Without
``state_dir`` a job creates nothing when no node keeps RocksDB state, and
otherwise a directory of its own under ``<tmp>/rivermark-state-<uid>``
(mode 0700, refused when another user owns it or may write to it), removed
when the job ends.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job
from rivermark.checkpoint.errors import CheckpointLockedError
from rivermark.checkpoint.state.rocks import backend
from rivermark.errors import ConfigurationError
from rivermark.testing import wait_for

RIVERMARK = str(Path(sys.executable).parent / "rivermark")

APP = textwrap.dedent(
    """
    import os
    from rivermark import KeyedState, Stream

    def count(acc, w):
        acc[w] = acc.get(w, 0) + 1
        return acc

    source = Stream.from_textfile(
        os.environ["APP_INPUT"], name="lines", stop_at_eof=bool(os.environ.get("APP_STOP"))
    )
    counts = source.accumulate(count, start=KeyedState(), name="counts")
    counts.map(lambda s: f"{len(s)} {sum(s.values())}").sink_to_textfile(os.environ["APP_OUTPUT"])
    """
)


def count(acc: KeyedState, w: Any) -> KeyedState:
    acc[w] = acc.get(w, 0) + 1
    return acc


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    app = tmp_path / "app.py"
    app.write_text(APP)
    data = tmp_path / "in.txt"
    data.write_text("a\nb\na\n")
    return app, data


def _env(
    tmp_path: Path, data: Path, out: str, stop: bool, tmpdir: Path | None = None
) -> dict[str, str]:
    env = dict(os.environ, APP_INPUT=str(data), APP_OUTPUT=str(tmp_path / out))
    env.pop("RIVERMARK_STATE_DIR", None)
    if stop:
        env["APP_STOP"] = "1"
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return env


def _run(
    app: Path, ckpt: Path, env: dict[str, str], *extra: str, state: str = "rocksdb"
) -> dict[str, Any]:
    """The keyword arguments of a ``subprocess`` call running the app."""
    args = [
        RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt), "--every", "50ms",
        "--state", state, *extra,
    ]  # fmt: skip
    return {"args": args, "env": env, "text": True}


def _ckpts(sd: Path) -> list[Path]:
    return sorted((sd / "counts" / "state").glob("ckpt-*"))


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return out, err


def _wrote(path: Path, last: str) -> bool:
    """Whether the app's committed output ends with line ``last``."""
    return path.exists() and path.read_text().splitlines()[-1:] == [last]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def test_a_second_job_on_a_state_directory_in_use_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    app, data = _setup(tmp_path)
    sd = tmp_path / "state"
    first = subprocess.Popen(
        **_run(app, tmp_path / "ck1", _env(tmp_path, data, "out1", False), "--state-dir", str(sd)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: _wrote(tmp_path / "out1", "2 3") or first.poll() is not None, timeout=120)
        assert first.poll() is None, first.communicate()[1][-3000:]
        # another job (its own store, the same node ids) on the same state directory
        second = subprocess.run(
            **_run(
                app, tmp_path / "ck2", _env(tmp_path, data, "out2", True), "--state-dir", str(sd)
            ),
            capture_output=True,
            timeout=120,
        )
        assert second.returncode != 0
        line = _one_line(second.stderr)
        assert f"state directory {str(sd)!r} is in use by another job (pid={first.pid} " in line
        assert "give each job its own state directory" in line
        # the first job's local checkpoint is untouched, and it goes on checkpointing
        seen = _ckpts(sd)
        assert seen and all(p.is_dir() for p in seen)
        with data.open("a") as f:
            f.write("c\nc\n")
        wait_for(lambda: _wrote(tmp_path / "out1", "3 5"), timeout=120)
        assert first.poll() is None and _ckpts(sd)
        _stop(first)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert (tmp_path / "out1").read_text().splitlines()[-1] == "3 5"
    # the first job ended: its lock is free, the second runs
    second = subprocess.run(
        **_run(app, tmp_path / "ck2", _env(tmp_path, data, "out2", True), "--state-dir", str(sd)),
        capture_output=True,
        timeout=120,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert (tmp_path / "out2").read_text().splitlines()[-1] == "3 5"


def test_jobs_on_state_directories_of_their_own_run_side_by_side(tmp_path: Path) -> None:
    """A ``PartitionedJob``'s tasks: ``<state_dir>/<topic>-<partition>`` each, one lock each."""
    app, data = _setup(tmp_path)
    sd = tmp_path / "state"
    procs = [
        subprocess.Popen(
            **_run(
                app,
                tmp_path / f"ck{i}",
                _env(tmp_path, data, f"out{i}", False),
                "--state-dir",
                str(sd / f"topic-{i}"),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    try:
        for i, p in enumerate(procs):
            out = tmp_path / f"out{i}"
            wait_for(lambda o=out, q=p: _wrote(o, "2 3") or q.poll() is not None, timeout=120)
        assert [p.poll() for p in procs] == [None, None]
        for p in procs:
            _stop(p)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i in range(2):
        assert (tmp_path / f"out{i}").read_text().splitlines()[-1] == "2 3"


def test_a_job_without_rocksdb_state_creates_no_state_directory(tmp_path: Path) -> None:
    app, data = _setup(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = _env(tmp_path, data, "out", True, tmpdir)
    res = subprocess.run(
        **_run(app, tmp_path / "ck", env, state="memory"), capture_output=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "out").read_text().splitlines()[-1] == "2 3"
    assert list(tmpdir.iterdir()) == []


def test_the_default_state_directory_is_private_and_removed_when_the_job_ends(
    tmp_path: Path,
) -> None:
    app, data = _setup(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    base = tmpdir / f"rivermark-state-{os.getuid()}"
    proc = subprocess.Popen(
        **_run(app, tmp_path / "ck", _env(tmp_path, data, "out", False, tmpdir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: _wrote(tmp_path / "out", "2 3") or proc.poll() is not None, timeout=120)
        assert proc.poll() is None
        st = os.lstat(base)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        (job_dir,) = base.iterdir()
        assert stat.S_IMODE(os.lstat(job_dir).st_mode) == 0o700
        assert (job_dir / ".lock").read_text().startswith(f"pid={proc.pid} ")
        _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (tmp_path / "out").read_text().splitlines()[-1] == "2 3"
    assert list(base.iterdir()) == []  # the job's directory is gone, databases and all
    # the next run resumes from the store (no local checkpoint left), and cleans up again
    with data.open("a") as f:
        f.write("b\n")
    res = subprocess.run(
        **_run(app, tmp_path / "ck", _env(tmp_path, data, "out", True, tmpdir)),
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "out").read_text().splitlines()[-1] == "2 4"
    assert list(base.iterdir()) == []


@pytest.mark.parametrize("case", ["other-user", "mode-0777", "symlink"])
def test_a_default_state_parent_that_is_not_this_users_alone_is_refused(
    tmp_path: Path, case: str
) -> None:
    app, data = _setup(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    base = tmpdir / f"rivermark-state-{os.getuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if case == "symlink":
        base.symlink_to(elsewhere)
        expected = f"the default state directory {str(base)!r} is a symbolic link; remove it"
    else:
        base.mkdir(mode=0o700)
        if case == "other-user":
            os.chown(base, 65534, 65534)  # nobody
            expected = (
                f"the default state directory {str(base)!r} belongs to uid 65534, not to this "
                f"user (uid {os.getuid()})"
            )
        else:
            os.chmod(base, 0o777)
            expected = f"the default state directory {str(base)!r} has mode 0777"
    res = subprocess.run(
        **_run(app, tmp_path / "ck", _env(tmp_path, data, "out", True, tmpdir)),
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr[-3000:]
    line = _one_line(res.stderr)
    assert expected in line and "Job(state_dir=...), --state-dir" in line
    assert list(elsewhere.iterdir()) == []
    if case != "symlink":
        assert list(base.iterdir()) == []  # nothing written into it


def test_in_process_the_state_stays_readable_until_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    base = backend.default_state_base()
    src = Stream.from_iterable(["a", "b", "a"], name="words")
    counts = src.accumulate(count, start=KeyedState(), name="counts")
    job = Job(src, checkpoint=str(tmp_path / "ck"), every=None, state="rocksdb")
    job.run()
    # the job ended: its local checkpoints are gone, the open database stays readable
    assert dict(counts.state) == {"a": 2, "b": 1}
    assert not list(base.rglob("ckpt-*")) and len(list(base.rglob("db-*"))) == 1
    # a second job on the same directory while the first is running is refused
    job.state_backend.directory()  # locked again, as by a running job
    src2 = Stream.from_iterable(["c"], name="words")
    src2.accumulate(count, start=KeyedState(), name="counts")
    other = Job(src2, checkpoint=str(tmp_path / "ck2"), every=None, state="rocksdb")
    other.state_backend.job_id = job.job_id
    other.state_backend.store = other.store
    with pytest.raises(CheckpointLockedError, match=re.escape(f"(pid={os.getpid()} ")):
        other.state_backend.directory()
    job.state_backend.release()
    job.state_backend.close()
    assert list(base.iterdir()) == []
    os.chmod(base, 0o755)
    with pytest.raises(ConfigurationError, match=re.escape("has mode 0755: other users may")):
        backend.private_base()
