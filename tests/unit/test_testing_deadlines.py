"""The test helpers' deadlines follow progress: a slow run that moves is waited for, a stuck one is not."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from rivermark.testing import WaitTimeout, wait_progress
from rivermark.testing.crash import CrashHarnessError, run_with_crashes

# writes one more line to a file every 0.3 s, 12 lines (about 3.6 s) in all, then
# holds at its end while the harness owes it a kill (the protocol of
# rivermark.testing.crash.hold_before_end, without importing rivermark); a
# restart finds its 12 lines and ends
_SLOW_BUT_MOVING = """
import os, sys, time
done = open(sys.argv[1]).read().count("\\n") if os.path.exists(sys.argv[1]) else 0
with open(sys.argv[1], "a") as f:
    for _ in range(12 - done):
        f.write("x\\n"); f.flush(); time.sleep(0.3)
if os.environ.get("RIVERMARK_HOLD_END"):
    open(os.environ["RIVERMARK_HOLD_END"], "w").close()
    time.sleep(600)
"""


def _lines(path: Path) -> int | None:
    try:
        return path.read_text().count("\n")
    except FileNotFoundError:
        return None


def test_a_run_that_keeps_moving_outlives_the_timeout(tmp_path: Path) -> None:
    out = tmp_path / "progress.txt"
    started = time.monotonic()
    report = run_with_crashes(
        [sys.executable, "-c", _SLOW_BUT_MOVING, str(out)],
        kills=1,
        min_delay=30,  # the one kill comes when the run holds at its end
        max_delay=30,
        timeout=2.5,  # less than the run takes: only progress keeps it alive
        progress=lambda: _lines(out),
    )
    assert report.completed
    assert (report.kills, report.kills_at_end) == (1, 1)
    assert _lines(out) == 12
    assert time.monotonic() - started > 2.5


def test_a_stuck_run_fails_after_the_timeout_without_progress(tmp_path: Path) -> None:
    out = tmp_path / "progress.txt"
    out.write_text("x\n")
    stuck = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(CrashHarnessError, match="without progress"):
        run_with_crashes(
            stuck, kills=1, min_delay=30, max_delay=30, timeout=1.5, progress=lambda: _lines(out)
        )


def test_wait_progress_names_where_it_stopped() -> None:
    values = iter([1, 2, 3])
    last = [0]

    def count() -> int:
        last[0] = next(values, last[0])
        return last[0]

    with pytest.raises(WaitTimeout, match="records reached 3 of 10"):
        wait_progress(count, 10, stall=0.3, what="records")
