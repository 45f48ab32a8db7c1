"""What ``rivermark run`` prints: start line, progress lines or live table, summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rivermark.testing import wait_for, wait_value

RIVERMARK = [sys.executable, "-m", "rivermark.cli"]

APP = """\
import os, time
from rivermark import Stream

def held(line):
    # wait at line 150 until the test says go: progress lines get printed meanwhile
    while line == os.environ.get("HOLD", "150") + "\\n" and not os.path.exists(os.environ["GO"]):
        time.sleep(0.01)
    return line

lines = Stream.from_textfile(os.environ["IN"], stop_at_eof=True, name="lines")
parsed = lines.map(held).map(lambda l: 7 // (int(l) % 7), name="parsed", on_error="skip")
parsed.sink_to_textfile(os.environ["OUT"], name="out")
"""


@pytest.fixture
def app(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "app.py"
    path.write_text(APP)
    data = tmp_path / "in.txt"
    data.write_text("".join(f"{i}\n" for i in range(300)))
    env = {
        **os.environ,
        "IN": str(data),
        "OUT": str(tmp_path / "out.txt"),
        "GO": str(tmp_path / "go"),
    }
    return path, env


def test_plain_progress_lines_and_summary(app: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, env = app
    out_file = tmp_path / "stdout.txt"
    cmd = [*RIVERMARK, "run", f"{path}:lines", "-c", str(tmp_path / "ck"), "--every", "none"]
    with out_file.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "--progress-interval", "0.1"], env=env, stdout=out, stderr=subprocess.PIPE
        )
        try:
            # held at line 150: at least two progress lines show the same count
            wait_for(
                lambda: out_file.read_text().count("lines: 151 records") >= 2,
                what="progress lines",
            )
            Path(env["GO"]).write_text("")
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    lines = out_file.read_text().splitlines()
    assert (
        lines[0]
        == f"starting fresh: no checkpoint in LocalDirectoryStore({str(tmp_path / 'ck')!r})"
    )
    progress = [line for line in lines if line.startswith("progress: ")]
    assert progress and all(
        re.fullmatch(
            r"progress: lines: [\d,]+ records \([\d,]+/s\), byte [\d,]+ \(\d+% of file\); "
            r"(checkpoint \d+ \(\d+s ago, took [\d,]+ ms\)|no checkpoint yet); errors [\d,]+",
            line,
        )
        for line in progress
    ), progress
    # held inside line 151, "150" (offset 490 of 1090 bytes): the count is
    # exact; the position moves once per chunk of lines, so it is at most 490
    held = [p for p in progress if "lines: 151 records" in p]
    assert held and all(int(re.search(r"byte (\d+)", p)[1]) <= 490 for p in held), held
    skipped = len([i for i in range(300) if i % 7 == 0])
    summary = lines[lines.index(next(x for x in lines if x.startswith("finished after "))) :]
    assert re.fullmatch(r"finished after [\d.]+s: end of input", summary[0]), summary
    assert summary[1:] == [
        "  source lines: 300 records",
        f"  sink out: {300 - skipped} records",
        f"  skipped: {skipped}, dead-lettered (on_error handler): 0",
        "  checkpoints written: 2, last epoch 2",
    ]
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 300 - skipped

    # run again: it says where it resumes
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    first = again.stdout.splitlines()[0]
    assert re.fullmatch(
        r"resuming from checkpoint 2 written \d+s ago; positions: lines byte 1,090; "
        r"the previous run: finished \(end of input\)",
        first,
    ), first
    # nothing new to read; the counts carried over from the checkpoint
    assert "  source lines: 300 records" in again.stdout

    # more input, held inside line 400: before its first checkpoint the resumed run
    # says which checkpoint it resumed from
    with Path(env["IN"]).open("a") as f:
        f.write("".join(f"{i}\n" for i in range(300, 450)))
    env = {**env, "HOLD": "400", "GO": str(tmp_path / "go-again")}
    out_file.write_text("")
    with out_file.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "--progress-interval", "0.1"], env=env, stdout=out, stderr=subprocess.PIPE
        )
        try:
            wait_for(
                # 300 counted by the first run, carried over, and 101 read now
                lambda: "lines: 401 records" in out_file.read_text(),
                what="the resumed progress",
            )
            Path(env["GO"]).write_text("")
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    held = [x for x in out_file.read_text().splitlines() if "lines: 401 records" in x]
    assert held and all("; resumed from checkpoint 3; errors " in x for x in held), held


def test_quiet_prints_nothing(app: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, env = app
    Path(env["GO"]).write_text("")
    res = subprocess.run(
        [*RIVERMARK, "run", f"{path}:lines", "-c", str(tmp_path / "ck"), "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr


def test_live_table_on_a_terminal(app: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, env = app
    session = f"rivermark-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "exit-status"
    inner = (
        f"{' '.join(RIVERMARK)} run {path}:lines -c {tmp_path / 'ck'}; "
        # written whole, then renamed: the test never reads a half-written status
        f"echo $? > {done}.part; mv {done}.part {done}; sleep 600"
    )
    tmux_env = [f"{k}={env[k]}" for k in ("IN", "OUT", "GO")]
    subprocess.run(
        [
            "tmux",
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "120",
            "-y",
            "40",
            "env",
            *tmux_env,
            "sh",
            "-c",
            inner,
        ],
        check=True,
    )

    def screen() -> str:
        res = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        )
        return res.stdout

    def screen_with(text: str) -> str:
        shown = screen()
        return shown if text in shown else ""

    try:
        # held inside line 151: the count is exact (the position moves per chunk)
        shown = wait_value(
            lambda: shown if re.search(r"│ lines\s+│\s+151 │", shown := screen()) else "",
            what="the table",
        )
        assert shown.splitlines()[0].startswith("starting fresh")
        assert re.search(r"source\s+┃\s+records\s+┃\s+records/s\s+┃\s+position", shown), shown
        assert re.search(r"│ lines\s+│\s+151 │", shown), shown
        assert "progress: " not in shown  # a live table, not log lines
        # the busiest nodes: the map holding line 150 runs its function all the time
        busy = wait_value(
            lambda: re.search(r"│ (map-1:held)\s+│\s+151 │\s+\d+ │\s+(\d+)% │", screen()),
            what="the busiest nodes",
        )
        assert "busiest nodes" in screen()
        wait_for(
            lambda: (
                (m := re.search(rf"│ {busy[1]}\s+│\s+151 │\s+\d+ │\s+(\d+)% │", screen()))
                and int(m[1]) >= 50
            ),
            what="the held node's busy time",
        )
        Path(env["GO"]).write_text("")
        wait_for(done.exists, what="the job to end")
        final = wait_value(lambda: screen_with("checkpoints written"), what="the summary")
        assert done.read_text().strip() == "0"
        assert "  source lines: 300 records" in final
        assert re.search(r"│ lines\s+│\s+300 │", final), final
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


EVENT_TIME_APP = """\
import os, time
from rivermark import Stream

def held(i):
    # wait at record 500 until the test says go: records 0..499 went through the windows
    while i == 500 and not os.path.exists(os.environ["GO"]):
        time.sleep(0.01)
    return i

def event_time(i):
    return float(i - 50 if i in (150, 250, 350, 450) else i)  # 50 s behind: late

numbers = Stream.from_iterable(range(1000), name="numbers")
times = numbers.map(held, name="held").timestamps(event_time, max_delay=5, name="times")
tumble = times.tumbling_window(10, key=lambda i: i % 3, agg="count", name="tumble")
tumble.map(str).sink_to_textfile(os.environ["OUT"], name="out")
"""

#: held at record 500: the largest time seen is 499, less max_delay 5 (seconds after the epoch)
HELD_WATERMARK = "1970-01-01 00:08:14 UTC"


@pytest.fixture
def event_time_app(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "event_time_app.py"
    path.write_text(EVENT_TIME_APP)
    env = {**os.environ, "OUT": str(tmp_path / "out.txt"), "GO": str(tmp_path / "go")}
    return path, env


def test_plain_progress_lines_show_the_watermark_and_the_windows(
    event_time_app: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, env = event_time_app
    out_file = tmp_path / "stdout.txt"
    cmd = [*RIVERMARK, "run", f"{path}:numbers", "-c", str(tmp_path / "ck"), "--every", "none"]
    with out_file.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "--progress-interval", "0.1"], env=env, stdout=out, stderr=subprocess.PIPE
        )
        try:
            line = wait_value(
                lambda: next(
                    (x for x in out_file.read_text().splitlines() if HELD_WATERMARK in x), None
                ),
                what="a progress line at record 500",
            )
            Path(env["GO"]).write_text("")
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    assert re.search(
        rf"numbers: 501 records .*, watermark {HELD_WATERMARK} \(event-time lag [\d.]+ days\);",
        line,
    ), line
    # per key (i % 3) the window [490, 500) is open; four records came 50 s late
    assert line.endswith("; open windows 3, late records 4"), line


@contextmanager
def _numbers_on_a_terminal(
    path: Path, env: dict[str, str], tmp_path: Path, columns: int, lines: int
) -> Iterator[tuple[Callable[[], str], Path]]:
    """``rivermark run`` of the event-time app in a ``columns`` x ``lines`` terminal
    (rich reads COLUMNS and LINES before the terminal's size), on a tmux server of its
    own: what the screen shows, and the file its exit status is written to."""
    session = f"rivermark-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "exit-status"
    inner = (
        f"{' '.join(RIVERMARK)} run {path}:numbers -c {tmp_path / 'ck'}; "
        f"echo $? > {done}.part; mv {done}.part {done}; "
        "sleep 600"
    )
    size = [f"COLUMNS={columns}", f"LINES={lines}"]
    tmux_env = [f"{k}={env[k]}" for k in ("OUT", "GO")] + size
    tmux = ["tmux", "-L", session]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", session, "-x", str(columns), "-y", str(lines),
         "env", *tmux_env, "sh", "-c", inner],
        check=True,
    )  # fmt: skip

    def screen() -> str:
        res = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True
        )
        return res.stdout

    try:
        yield screen, done
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def _screen_with_all(screen: Callable[[], str], patterns: list[str], what: str) -> str:
    """The first screen on which every pattern is found."""

    def shows_all() -> str:
        s = screen()
        return s if all(re.search(r, s) for r in patterns) else ""

    return wait_value(shows_all, what=what)


def test_live_table_shows_the_watermark_and_the_windows(
    event_time_app: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, env = event_time_app
    held = [
        r"│ tumble\s+│\s+│\s+3 │\s+4 │",
        rf"│ numbers\s+│\s+501 │.*│ {HELD_WATERMARK} │\s+[\d.]+ days │",
        rf"│ times\s+│ {HELD_WATERMARK} │",
    ]
    # the table is wider than 80 columns: a terminal of 160
    with _numbers_on_a_terminal(path, env, tmp_path, 160, 50) as (screen, done):
        # the windows' row reads 3 and 4 from record 451 on: wait for the hold at 500,
        # where every row shows it (a slow machine may draw a screen before that)
        shown = _screen_with_all(screen, held, "the event-time table at record 500")
        assert re.search(r"┃ lag\s+┃ watermark\s+┃ event-time lag ┃", shown), shown
        assert "event time" in shown
        Path(env["GO"]).write_text("")
        wait_for(done.exists, what="the job to end")
        assert done.read_text().strip() == "0"


def test_an_80x24_terminal_shows_every_position_and_watermark_uncut(
    event_time_app: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, env = event_time_app
    held = [
        r"numbers  501 records",
        r"  position \d+\n",
        rf"  watermark {HELD_WATERMARK} \(event-time lag [\d.]+ days\)",
        rf"times: watermark {HELD_WATERMARK}",
        r"tumble\s+501\s+\d+\s+\d+%\s+\d+%\s+0\s+4\s+3",  # late records and open windows
    ]
    with _numbers_on_a_terminal(path, env, tmp_path, 80, 24) as (screen, done):
        shown = _screen_with_all(screen, held, "the compact display at record 500")
        assert all(len(line) <= 80 for line in shown.splitlines()), shown
        assert "…" not in shown, shown  # nothing cut
        Path(env["GO"]).write_text("")
        wait_for(done.exists, what="the job to end")
        assert done.read_text().strip() == "0"
