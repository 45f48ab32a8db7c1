"""SIGINT/SIGTERM on ``rivermark run``: the first stops gracefully, a second at once.

Ctrl-C on a terminal says where the job stopped and how to resume, and
leaves the terminal as it found it; Ctrl-C while the app is still being
imported is one line and status 130.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing import wait_for

RIVERMARK = str(Path(sys.executable).parent / "rivermark")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_second_signal_stops_at_once_and_keeps_the_last_checkpoint(
    tmp_path: Path, signum: int
) -> None:
    marker = tmp_path / "stuck"
    app = tmp_path / "app.py"
    # record 50 blocks (a stuck user function): a graceful stop cannot finish
    app.write_text(
        textwrap.dedent(
            f"""\
            import time
            from rivermark import Stream

            def work(x):
                if x == 50:
                    open({str(marker)!r}, "w").close()
                    time.sleep(600)
                return x

            source = Stream.from_iterable(list(range(1000)), name="numbers")
            source.map(work).accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
            """
        )
    )
    ckpt = tmp_path / "ckpt"
    log = tmp_path / "stderr.txt"
    with log.open("w") as errfile:
        proc = subprocess.Popen(
            [RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt), "--every", "none"],
            stderr=errfile,
        )
    try:
        wait_for(marker.exists, timeout=120)
        store = LocalDirectoryStore(ckpt)
        before = store.list_epochs()
        assert before == [1]  # the checkpoint at start
        proc.send_signal(signum)
        # the first signal was handled: its graceful stop waits for record 50
        wait_for(lambda: "stopping with a final checkpoint" in log.read_text(), timeout=60)
        assert proc.poll() is None
        proc.send_signal(signum)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert rc == 128 + signum, err
    assert "Traceback" not in err
    assert "stopping at once without a final checkpoint" in err, err
    # no final checkpoint; the last one is intact
    assert store.list_epochs() == before
    store.verify(before[-1])


SLOW_APP = """\
import os
import time
from rivermark import Stream

PAUSE = float(os.environ.get("APP_PAUSE", "0.005"))  # per record: the run lasts 15 s

def slow(x):
    time.sleep(PAUSE)
    return x

source = Stream.from_iterable(list(range(3_000)), name="numbers")
source.map(slow).accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
"""


def _read_all(fd: int, out: bytearray) -> None:
    """Read what the pty holds now into ``out`` (never blocks)."""
    while select.select([fd], [], [], 0)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the other side closed
            return
        if not chunk:
            return
        out += chunk


def test_ctrl_c_on_a_terminal_says_where_it_stopped_and_leaves_the_terminal_clean(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app.py"
    app.write_text(SLOW_APP)
    ckpt = tmp_path / "ckpt"
    store = LocalDirectoryStore(ckpt)
    main_fd, child_fd = pty.openpty()
    err = tmp_path / "stderr.txt"
    cmd = [RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt), "--every", "100ms"]
    with err.open("w") as errfile:
        # stdout is a terminal: the live table is drawn (and hides the cursor)
        proc = subprocess.Popen(cmd, stdout=child_fd, stderr=errfile)
    os.close(child_fd)
    out = bytearray()
    try:
        # progress, not time: stop once an interval checkpoint was written
        wait_for(lambda: (_read_all(main_fd, out), len(store.list_epochs()) >= 2)[1], timeout=120)
        proc.send_signal(signal.SIGINT)
        # read the terminal until the process has ended (it blocks on a full pty)
        wait_for(lambda: (_read_all(main_fd, out), proc.poll() is not None)[1], timeout=120)
        _read_all(main_fd, out)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(main_fd)
    text = out.decode(errors="replace")
    stderr = err.read_text()
    last = store.list_epochs()[-1]
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    line = [ln for ln in stderr.splitlines() if ln.startswith("stopped by")]
    assert len(line) == 1, stderr
    assert line[0].startswith("stopped by the user (Ctrl-C) at numbers: "), stderr
    assert line[0].endswith(
        f"; last checkpoint epoch {last}; run the same command again to resume"
    ), stderr
    assert "done" not in text and "done" not in stderr, (text, stderr)
    assert "checkpoints written:" in text  # the figures of the run are still shown
    # the cursor the live table hid is shown again, after its last hiding
    assert "\x1b[?25l" in text
    assert text.rfind("\x1b[?25h") > text.rfind("\x1b[?25l"), repr(text[-300:])
    # and the same command resumes from that checkpoint (at full speed)
    res = subprocess.run(
        [*cmd, "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "APP_PAUSE": "0"},
    )
    assert res.returncode == 0, res.stderr
    assert store.list_epochs()[-1] > last


def test_ctrl_c_while_the_app_is_imported_is_one_line_and_status_130(tmp_path: Path) -> None:
    marker = tmp_path / "importing"
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            f"""\
            import time
            open({str(marker)!r}, "w").close()
            time.sleep(600)  # a slow import: loading a model, a large table...
            """
        )
    )
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(marker.exists, timeout=120)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == [
        f"rivermark run: interrupted (Ctrl-C) while importing {str(app)!r}; nothing was run"
    ], err
    assert not ckpt.exists()  # nothing was run


def test_sigterm_handed_to_another_thread_still_stops_the_job_gracefully(tmp_path: Path) -> None:
    # The kernel may deliver a process's SIGTERM to any of its threads; the
    # main thread, waiting for the job, must still run the stop handler.
    inp, out, log = tmp_path / "in", tmp_path / "out", tmp_path / "stderr.txt"
    inp.write_text("a\nb\n")
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            f"""\
            import os, signal, threading, time
            from rivermark import Stream

            def kick():
                # once the job runs (both lines written), SIGTERM to this thread only
                while not os.path.exists({str(out)!r}) or open({str(out)!r}).read().count("\\n") < 2:
                    time.sleep(0.01)
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

            threading.Thread(target=kick, daemon=True).start()
            source = Stream.from_textfile({str(inp)!r}, poll_interval="10ms", name="input")
            source.sink_to_textfile({str(out)!r}, end="")
            """
        )
    )
    ckpt = tmp_path / "ckpt"
    with log.open("w") as errfile:
        proc = subprocess.Popen(
            [RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt), "--every", "50ms"],
            stderr=errfile,
            stdout=subprocess.DEVNULL,
        )
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert rc == 0, err
    assert "stopping with a final checkpoint" in err, err
    assert "stopped by SIGTERM" in err, err
    assert out.read_text() == "a\nb\n"
