"""Every bad input to ``rivermark run`` through the real command: one clear error.

Each case runs the installed ``rivermark`` script in a subprocess and checks
the exit code (2 for usage and configuration errors, 1 for failures of a
running job), that stderr is a few lines, and that it holds no traceback.

Disk full and a read-only file system are real where this process may mount
a small tmpfs (root); elsewhere the store's ``checkpoint-write`` fault point
raises the same ``OSError``.  A directory without permission is real: as
root, the command runs in a user namespace where it owns the files but has
no capabilities, so the mode bits apply.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rivermark.testing import wait_for

RIVERMARK = str(Path(sys.executable).parent / "rivermark")
MAX_LINES = 4


def run(
    *args: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
    cwd: Path | None = None,
    command: tuple[str, ...] = (RIVERMARK,),
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *command, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def assert_clear(res: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    err = res.stderr
    assert res.returncode == code, (res.returncode, err)
    assert "Traceback" not in err, err
    assert "Task was destroyed" not in err, err
    assert "Invalid file descriptor" not in err, err
    assert 1 <= len(err.strip().splitlines()) <= MAX_LINES, err
    for n in needles:
        assert n in err, (n, err)
    return err


def write_app(tmp_path: Path, body: str) -> Path:
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(body))
    return app


GOOD = """\
from rivermark import Stream
source = Stream.from_iterable(list(range({n})), name="numbers")
source.map(lambda x: x * 2).sink_to_textfile({out!r})
"""


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[bool]:
    """Mount a tmpfs at ``path`` if this process may (yields whether it did)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = False
    if shutil.which("mount") and os.geteuid() == 0:
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
            capture_output=True,
            timeout=30,
        )
        mounted = res.returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def test_app_with_a_syntax_error(tmp_path: Path) -> None:
    app = write_app(tmp_path, "from rivermark import Stream\nsource = Stream(\nx = = 1\n")
    err = assert_clear(run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c")), 2)
    assert f"{app}:" in err and "SyntaxError" in err


def test_app_raising_at_import_shows_the_users_frame_only(tmp_path: Path) -> None:
    app = write_app(tmp_path, "import json\n\nsettings = json.loads('{bad')\n")
    err = assert_clear(
        run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c")),
        2,
        "JSONDecodeError",
        f"at {app}:3 in <module>",
        "settings = json.loads('{bad')",
    )
    assert "json/decoder.py" not in err and "runpy" not in err


def test_checkpoint_path_that_is_a_file(tmp_path: Path) -> None:
    app = write_app(tmp_path, GOOD.format(n=10, out=str(tmp_path / "out.txt")))
    ckpt = tmp_path / "ckpt"
    ckpt.write_text("not a directory")
    assert_clear(
        run("run", f"{app}:source", "--checkpoint", str(ckpt)),
        2,
        f"checkpoint directory {str(ckpt)!r} is a file",
    )


def test_checkpoint_directory_without_permission(tmp_path: Path) -> None:
    app = write_app(tmp_path, GOOD.format(n=10, out=str(tmp_path / "out.txt")))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        # root ignores mode bits; as the files' owner without capabilities they apply
        prefix = ("unshare", "-U", "--map-user=1000", "--map-group=1000")
    try:
        assert_clear(
            run("run", f"{app}:source", "--checkpoint", str(locked / "ckpt"), prefix=prefix),
            2,
            "cannot be written (Permission denied",
            str(locked / "ckpt"),
        )
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("how", ["tmpfs", "fault-point"])
def test_read_only_file_system(tmp_path: Path, how: str) -> None:
    app = write_app(tmp_path, GOOD.format(n=10, out=str(tmp_path / "out.txt")))
    ro = tmp_path / "ro"
    ro.mkdir()
    mount = tmpfs(ro, "ro,size=64k") if how == "tmpfs" else contextlib.nullcontext(False)
    with mount as mounted:
        if mounted:
            res = run("run", f"{app}:source", "--checkpoint", str(tmp_path / "ro"))
            assert_clear(res, 2, "cannot be written (Read-only file system")
        else:
            fault = {"RIVERMARK_FAULT_ERROR": "checkpoint-write:EROFS"}
            res = run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c"), env=fault)
            assert_clear(res, 1, "Read-only file system")


@pytest.mark.parametrize("how", ["tmpfs", "fault-point"])
def test_disk_full_while_writing_a_checkpoint(tmp_path: Path, how: str) -> None:
    # the state grows by about 1 KiB a record: a few hundred records fill 512 KiB
    out = tmp_path / "out.txt"
    app = write_app(
        tmp_path,
        f"""\
        from rivermark import Stream
        def keep(acc, x):
            return acc + [str(x) * 200]
        source = Stream.from_iterable(list(range(5000)), name="numbers")
        source.accumulate(keep, start=[], name="all").map(len).sink_to_textfile({str(out)!r})
        """,
    )
    ckpt = tmp_path / "small"
    with tmpfs(ckpt, "size=512k") if how == "tmpfs" else contextlib.nullcontext(False) as mounted:
        env = {} if mounted else {"RIVERMARK_FAULT_ERROR": "checkpoint-write:ENOSPC"}
        res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "--every", "0", env=env)
        assert_clear(res, 1, "No space left on device", "could not be written")
        # the torn checkpoint's files are removed: only complete checkpoints remain
        leftovers = [
            d for d in (ckpt / "checkpoints").iterdir() if not (d / "manifest.json").exists()
        ]
        assert leftovers == []
        if mounted:
            st = os.statvfs(ckpt)
            assert st.f_bfree * st.f_frsize > 256 * 1024  # the space was given back


def test_disk_full_under_rocksdb_state_leaves_no_part_of_a_shared_file(tmp_path: Path) -> None:
    # RocksDB state uploads its files to shared/ through temporary files: a write
    # the disk refuses leaves none of them (nor of job.json) taking the space
    out = tmp_path / "out.txt"
    app = write_app(
        tmp_path,
        f"""\
        import os
        from rivermark import KeyedState, Stream
        def put(acc, x):
            acc[x] = os.urandom(3000)  # incompressible: the SST files grow with it
            return acc
        source = Stream.from_iterable(list(range(20000)), name="numbers")
        kept = source.accumulate(put, start=KeyedState(), name="kv")
        kept.map(lambda acc: 1).sink_to_textfile({str(out)!r})
        """,
    )
    ckpt = tmp_path / "small"
    with tmpfs(ckpt, "size=5m") as mounted:
        assert mounted, "a tmpfs is needed (run as root)"
        args = ["--every", "200ms", "--state", "rocksdb", "--state-dir", str(tmp_path / "sd")]
        res = run("run", f"{app}:source", "--checkpoint", str(ckpt), *args)
        assert_clear(res, 1, "No space left on device", "could not be written")
        parts = [p.name for p in ckpt.rglob("*") if p.name.endswith(".tmp")]
        assert parts == []
        st = os.statvfs(ckpt)
        assert st.f_bfree * st.f_frsize > 256 * 1024  # the space was given back


def test_state_that_cannot_be_pickled(tmp_path: Path) -> None:
    app = write_app(
        tmp_path,
        """\
        import threading
        from rivermark import Stream
        source = Stream.from_iterable(list(range(10)), name="numbers")
        source.accumulate(lambda acc, x: threading.Lock(), start=0, name="holder").sink_to_list()
        """,
    )
    assert_clear(
        run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c"), "--every", "none"),
        1,
        "node holder",
        "state['state'] is a _thread.lock",
        "cannot pickle '_thread.lock' object",
    )


@pytest.mark.parametrize("every", ["0", "0s", "none"])
def test_every_zero_in_any_unit_means_no_interval(tmp_path: Path, every: str) -> None:
    out = tmp_path / "out.txt"
    app = write_app(tmp_path, GOOD.format(n=50, out=str(out)))
    res = run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c"), "--every", every)
    assert res.returncode == 0, res.stderr
    assert out.read_text() == "".join(f"{2 * i}\n" for i in range(50))
    # only the start and the final checkpoint
    assert len(list((tmp_path / "c" / "checkpoints").iterdir())) == 2


def test_every_negative_is_a_usage_error(tmp_path: Path) -> None:
    app = write_app(tmp_path, GOOD.format(n=5, out=str(tmp_path / "out.txt")))
    assert_clear(
        run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c"), "--every=-1s"),
        2,
        "--every",
        "'-1s'",
    )


def test_app_that_runs_its_own_job(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    app = write_app(
        tmp_path,
        GOOD.format(n=5, out=str(out))
        + f"from rivermark import Job\nJob(source, checkpoint={str(tmp_path / 'own')!r}).run()\n",
    )
    assert_clear(
        run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c")),
        2,
        "calls Job.run() itself",
        f"python {app}",
        "rivermark run",
    )
    assert not out.exists() or out.read_text() == ""


@pytest.mark.parametrize("kind", ["map", "map_async"])
def test_failing_user_function_names_the_node_once(tmp_path: Path, kind: str) -> None:
    # map raises in the source's emit; map_async fails the node in background work
    asynchronous = "async " if kind == "map_async" else ""
    app = write_app(
        tmp_path,
        f"""\
        from rivermark import Stream
        {asynchronous}def parse(x):
            if x == 7:
                raise ValueError("bad record seven")
            return x
        source = Stream.from_iterable(list(range(20)), name="numbers")
        source.{kind}(parse, name="parse").sink_to_textfile({str(tmp_path / "out.txt")!r})
        """,
    )
    err = assert_clear(
        run("run", f"{app}:source", "--checkpoint", str(tmp_path / "c")),
        1,
        "node parse failed",
        "user function 'parse' raised ValueError: bad record seven on record 7",
        f"at {app}:4 in parse",
    )
    assert err.count("bad record seven") == 1, err
    assert "numbers" not in err and "ERROR" not in err


def test_input_truncated_below_the_checkpoint(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("".join(f"{i}\n" for i in range(100)))
    app = write_app(
        tmp_path,
        f"""\
        from rivermark import Stream
        source = Stream.from_textfile({str(inp)!r}, stop_at_eof=True, name="input")
        source.map(str.strip).sink_to_textfile({str(out)!r})
        """,
    )
    args = ("run", f"{app}:source", "--checkpoint", str(tmp_path / "c"))
    assert run(*args).returncode == 0
    size = inp.stat().st_size
    inp.write_text("0\n")
    assert_clear(
        run(*args), 2, f"{str(inp)!r} has 2 bytes", f"checkpointed position {size}", "on_changed"
    )


@pytest.mark.parametrize("code", [3, 0])
def test_app_calling_sys_exit_at_import_says_so_and_keeps_the_status(
    tmp_path: Path, code: int
) -> None:
    app = write_app(tmp_path, f"import sys\nsys.exit({code})\n")
    ckpt = tmp_path / "c"
    err = assert_clear(
        run("run", f"{app}:source", "--checkpoint", str(ckpt)),
        code,
        f"rivermark run: {str(app)!r} called sys.exit({code}) while being imported; "
        f"nothing was run (exit status {code})",
    )
    assert len(err.strip().splitlines()) == 1, err
    assert not ckpt.exists()


def test_module_target_and_python_dash_m(tmp_path: Path) -> None:
    pkg = tmp_path / "jobs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    out = tmp_path / "out.txt"
    (pkg / "doubling.py").write_text(GOOD.format(n=50, out=str(out)))
    # package.module:name, found from the working directory, via 'python -m rivermark'
    res = run(
        "run",
        "jobs.doubling:source",
        "--checkpoint",
        str(tmp_path / "c"),
        "--quiet",
        cwd=tmp_path,
        command=(sys.executable, "-m", "rivermark"),
    )
    assert res.returncode == 0, res.stderr
    assert out.read_text().split() == [str(2 * i) for i in range(50)]
    err = assert_clear(
        run("run", "jobs.nosuch:source", "--checkpoint", str(tmp_path / "c"), cwd=tmp_path),
        2,
        "no module named 'jobs.nosuch'",
    )
    assert "package.module:name" in err
    res = run("--help", command=(sys.executable, "-m", "rivermark"))
    assert res.returncode == 0 and "Usage: rivermark" in res.stdout, res


BOXED = """\
from rivermark import Stream
class Box:
    def __init__(self, total, seen):
        self.total, self.seen = total, seen
    def add(self, x):
        return Box(self.total + x, self.seen + [x])
source = Stream.from_textfile({inp!r}, stop_at_eof=True, name="lines")
boxed = source.map(int).accumulate(Box.add, start=Box(0.5, []), name="boxed")
boxed.map(lambda b: f"{{b.total}} {{b.seen}}").sink_to_textfile({out!r})
"""


def test_script_app_whose_state_holds_an_object_of_its_own_class(tmp_path: Path) -> None:
    # the script's classes are pickled by the script's module name, as a module's are
    inp, out, ckpt = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "c"
    app = write_app(tmp_path, BOXED.format(inp=str(inp), out=str(out)))
    signed = {"RIVERMARK_CHECKPOINT_KEY": "k" * 32}

    def run_app(
        script: Path, store: Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run("run", f"{script}:source", "--checkpoint", str(store), "-q", env=env)

    inp.write_text("1\n2\n")
    res = run_app(app, ckpt, signed)
    assert res.returncode == 0, res.stderr
    inp.write_text("1\n2\n3\n")
    res = run_app(app, ckpt, signed)  # a new process restores the Box of the last checkpoint
    assert res.returncode == 0, res.stderr
    assert out.read_text().splitlines() == ["1.5 [1]", "3.5 [1, 2]", "6.5 [1, 2, 3]"]
    # another script with a class of the same name does not take the object for its own
    other = tmp_path / "other.py"
    other.write_text(app.read_text().replace("self.seen + [x]", "self.seen"))
    inp.write_text("1\n2\n3\n4\n")
    res = run_app(other, ckpt, signed)
    assert_clear(res, 2, "holds objects of a class this code does not have",
                 "No module named '__rivermark_app__.app'", "--from-scratch")  # fmt: skip
    assert out.read_text().splitlines()[-1] == "6.5 [1, 2, 3]"
    # without a key the pickled part is not loaded, as for any app
    out.unlink()
    res = run_app(app, tmp_path / "unsigned")
    assert res.returncode == 0, res.stderr
    assert_clear(run_app(app, tmp_path / "unsigned"), 2, "node boxed", "--trust-store")


def test_logging_options_are_described_once_and_accepted_everywhere(tmp_path: Path) -> None:
    top = run("--help")
    assert "--log-level" in top.stdout and "--log-format" in top.stdout
    for sub in (("run",), ("graph",), ("checkpoints", "list")):
        res = run(*sub, "--help")
        assert res.returncode == 0, res.stderr
        assert "--log-level" not in res.stdout and "--verbose" not in res.stdout, res.stdout
    # after the subcommand's name as well as before it
    app = write_app(tmp_path, GOOD.format(n=3, out=str(tmp_path / "out.txt")))
    for args in (
        ("graph", f"{app}:source", "--log-level", "DEBUG"),
        ("-v", "graph", f"{app}:source"),
    ):
        res = run(*args)
        assert res.returncode == 0 and "digraph" in res.stdout, res.stderr


SLOW = """\
import time
from rivermark import Stream

def slow(x):
    time.sleep(0.01)
    return x

source = Stream.from_iterable(list(range({n})), name="numbers")
source.map(slow).accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
"""


def test_json_checkpoint_lines_carry_duration_pause_and_size(tmp_path: Path) -> None:
    app = write_app(tmp_path, SLOW.format(n=20))
    res = run("run", f"{app}:source", "-c", str(tmp_path / "c"), "-q", "-v", "--log-format", "json")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stderr.splitlines()]
    written = [r for r in lines if r["message"].startswith("checkpoint ")]
    assert [r["epoch"] for r in written] == [1, 2], res.stderr  # at start, at the end
    for r in written:
        assert r["size_bytes"] > 0 and r["duration_seconds"] >= 0 and r["pause_seconds"] >= 0
        assert f"{r['size_bytes']} bytes" in r["message"]


@pytest.mark.parametrize("asked", [False, True])
def test_live_page_access_log_only_when_asked(tmp_path: Path, asked: bool) -> None:
    app = write_app(tmp_path, SLOW.format(n=100_000))
    errlog = tmp_path / "stderr.txt"
    cmd = [RIVERMARK, "run", f"{app}:source", "-c", str(tmp_path / "c"), "-q", "-v", "--ui", "0"]
    with errlog.open("w") as errfile:
        proc = subprocess.Popen([*cmd, *(["--ui-access-log"] if asked else [])], stderr=errfile)
    try:
        url: list[str] = []

        def served() -> bool:
            m = re.search(r"serving the live pipeline page at (\S+)", errlog.read_text())
            if m:
                url.append(m.group(1))
            return bool(m)

        wait_for(served, timeout=120)
        with urllib.request.urlopen(url[0], timeout=60) as page:
            assert page.status == 200
        if asked:
            wait_for(lambda: '"GET / HTTP' in errlog.read_text(), timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, errlog.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = errlog.read_text()
    assert ('"GET / HTTP' in err) is asked, err
    assert "checkpoint 1 written" in err  # -v was on in both runs
