"""Jupyter outputs: a node's latest record and a job's progress, as live widgets."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.observe.notebook import job_output, node_output


def wait_for(cond: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_node_output_follows_the_records() -> None:
    s = Stream()
    doubled = s.map(lambda x: 2 * x)
    box = node_output(doubled)
    assert "no record yet" in box.value
    s.emit(1)
    assert box.value == "<pre>2</pre>"
    s.emit(21)
    assert box.value == "<pre>42</pre>"


def test_job_output_updates_while_the_job_runs(tmp_path: Path) -> None:
    gate = threading.Event()

    def hold(x: int) -> int:
        if x == 50:
            gate.wait(30)
        return x

    source = Stream.from_iterable(range(100), name="numbers")
    source.map(hold).sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    box = job_output(job, interval=0.05)
    assert "not started" in box.value
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        wait_for(lambda: "<td>numbers</td><td>51</td>" in box.value and "running" in box.value)
    finally:
        gate.set()
        runner.join(30)
    wait_for(lambda: "<td>numbers</td><td>100</td>" in box.value and "done" in box.value)


def test_displayed_in_ipython() -> None:
    shell = InteractiveShell.instance()
    try:
        with capture_output() as captured:
            result = shell.run_cell("from rivermark import Stream\ns = Stream()\ns.map(str)\n")
        assert result.success, result.error_in_exec
        assert [
            o.data for o in captured.outputs if "application/vnd.jupyter.widget-view+json" in o.data
        ]
    finally:
        InteractiveShell.clear_instance()
