"""One vocabulary for how a run ended: stopped, finished, failed, killed, with the reason."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.observe.control import JobControl
from rivermark.observe.endstate import last_run, run_state
from rivermark.observe.progress import start_line, summary_lines
from rivermark.testing import run_in_thread, wait_for


def _ended(tmp_path: Path) -> dict[str, object]:
    return dict(json.loads((tmp_path / "job.json").read_text())["ended"])


def test_the_end_of_input_is_finished(tmp_path: Path) -> None:
    source = Stream.from_iterable(range(10), name="numbers")
    source.sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    assert run_state(job).state == "not started"
    job.run()
    assert run_state(job).text == "finished (end of input)"
    assert JobControl(job).status() == "finished"
    assert _ended(tmp_path)["state"] == "finished"
    head = summary_lines(job.metrics.read(), run_state(job))[0]
    assert re.fullmatch(r"finished after [\d.]+s: end of input", head), head


def test_a_stop_is_stopped_with_who_asked(tmp_path: Path) -> None:
    gate = threading.Event()
    source = Stream.from_iterable(range(1_000_000), name="numbers")
    source.map(lambda x: gate.wait(0.001) or x).sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    runner, raised = run_in_thread(job)
    wait_for(lambda: job.running, what="the run")
    assert run_state(job).state == "running"
    assert job.stop(reason="rivermark stop (POST /api/stop)", timeout=60)
    runner.join(60)
    assert raised == []
    state = run_state(job)
    assert (state.state, state.reason) == ("stopped", "rivermark stop (POST /api/stop)")
    assert JobControl(job).describe()["status"] == "stopped"
    assert _ended(tmp_path)["reason"] == "rivermark stop (POST /api/stop)"
    # a stop never reads as "finished" or "done"
    head = summary_lines(job.metrics.read(), state)[0]
    assert head.startswith("stopped after ") and "done" not in head, head


def test_a_raising_node_is_failed_with_the_exception(tmp_path: Path) -> None:
    def parse(x: int) -> int:
        if x == 3:
            raise ValueError(f"cannot parse {x}")
        return x

    source = Stream.from_iterable(range(10), name="numbers")
    source.map(parse, name="parse").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    with pytest.raises(Exception, match=re.escape("cannot parse 3")):
        job.run()
    state = run_state(job)
    assert state.state == "failed" and "cannot parse 3" in state.reason, state
    assert JobControl(job).describe()["reason"] == state.reason
    assert _ended(tmp_path) == {"state": "failed", "reason": state.reason, "time": job.ended_at}


APP = """
import sys, time
from rivermark import Stream
from rivermark.checkpoint import Job

def slow(x):
    if x == 5:
        print("ready", flush=True)
    time.sleep(0.01)
    return x

source = Stream.from_iterable(range(1_000_000), name="numbers")
source.map(slow).sink_to_list()
Job(source, checkpoint=sys.argv[1], every="50ms").run()
"""


def test_a_killed_run_is_killed_for_the_next_run_and_the_history(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(APP))
    ckpt = tmp_path / "ck"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, str(app), str(ckpt)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            wait_for(lambda: list(ckpt.glob("checkpoints/*/manifest.json")), what="a checkpoint")
            # a reader without the lock: the process lives, so the run is running
            info = json.loads((ckpt / "job.json").read_text())
            assert info["ended"] is None and info["pid"] == proc.pid
            assert last_run(info).state == "running"  # type: ignore[union-attr]
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    gone = last_run(json.loads((ckpt / "job.json").read_text()))
    assert gone is not None and gone.state == "killed", gone

    def slow(x: int) -> int:  # the same graph as the app's
        return x

    source = Stream.from_iterable(range(1_000_000), name="numbers")
    source.map(slow).sink_to_list()
    job = Job(source, checkpoint=ckpt, every=None)
    job.stop()  # asked before it runs: it restores, writes its final checkpoint and stops
    job.run()
    assert job.previous_run is not None and job.previous_run.state == "killed"
    assert "; the previous run: killed (it ended without a final checkpoint" in start_line(job)
