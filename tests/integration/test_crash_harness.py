"""The kill loop keeps a job running until every kill it owes has landed.

A job that finishes faster than the harness's random delays (a fast machine,
a small input) holds at its end, before its final checkpoint, and is killed
there; so a crash test that asks for N kills gets N on any machine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rivermark.testing.crash import CrashHarnessError, run_uncrashed, run_with_crashes

pytestmark = pytest.mark.crash

# a checkpointed Job: running sums of 0..199; with "stop" it stops itself
# (Job.stop, as a job that sees an end marker does) at the record 150
_JOB = """
import sys
from rivermark import Job, Stream

ckpt, out, how = sys.argv[1], sys.argv[2], sys.argv[3]
source = Stream.from_iterable(range(200), name="numbers")
sums = source.accumulate(lambda a, b: a + b, start=0, name="sum")
sums.map(str).sink_to_textfile(out, name="out")
job = Job(source, checkpoint=ckpt, every="0.05s")
if how == "stop":
    source.filter(lambda x: x == 150).sink(lambda _: job.stop())
job.run()
"""


def _cmd(tmp_path: Path, name: str, how: str) -> list[str]:
    ckpt, out = tmp_path / f"{name}-ckpt", tmp_path / f"{name}.txt"
    return [sys.executable, "-c", _JOB, str(ckpt), str(out), how]


@pytest.mark.parametrize("how", ["end-of-input", "stop"])
def test_a_job_faster_than_its_kills_is_held_until_they_landed(tmp_path: Path, how: str) -> None:
    run_uncrashed(_cmd(tmp_path, "reference", how))
    reference = (tmp_path / "reference.txt").read_bytes()
    assert reference  # (stopped early with "stop": the records before the stop)
    report = run_with_crashes(
        _cmd(tmp_path, "crashed", how),
        kills=3,
        min_delay=600,  # far longer than the job takes: only its end can meet a kill
        max_delay=600,
        timeout=120,
    )
    assert report.completed
    assert (report.kills, report.kills_at_end, report.runs) == (3, 3, 4), report.summary()
    assert "3 held at the end of the job" in report.summary()
    assert (tmp_path / "crashed.txt").read_bytes() == reference


def test_a_command_that_ends_while_kills_are_owed_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(
        CrashHarnessError,
        match=re.escape(
            "exited 0 after 0 of 2 kills instead of holding at its end: run it as a rivermark "
            "Job, or call rivermark.testing.crash.hold_before_end() where it ends"
        ),
    ):
        run_with_crashes([sys.executable, "-c", "pass"], kills=2, min_delay=600, max_delay=600)
