"""Jupyter outputs: a node's latest record and a job's progress, as live widgets."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.observe.notebook import job_output, node_output
from rivermark.testing import wait_for


def test_node_output_follows_the_records() -> None:
    s = Stream()
    doubled = s.map(lambda x: 2 * x)
    box = node_output(doubled, interval=0.01)
    assert "no record yet" in box.value
    s.emit(1)
    wait_for(lambda: box.value == "<pre>2</pre>")
    s.emit(21)
    wait_for(lambda: box.value == "<pre>42</pre>")


def test_node_output_sends_a_few_messages_per_second_and_the_last_record() -> None:
    s = Stream()
    box = node_output(s.map(lambda x: 2 * x), interval=0.25)
    sent: list[str] = []
    box.observe(lambda change: sent.append(change["new"]), names="value")
    started = time.monotonic()
    for i in range(2_697):
        s.emit(i)
    wait_for(lambda: sent and sent[-1] == "<pre>5392</pre>", what="the last record")
    elapsed = time.monotonic() - started
    # one message per 0.25 s at most (and the last one), not one per record
    assert len(sent) <= elapsed / 0.25 + 2, (len(sent), elapsed)


def test_a_failed_job_says_failed_and_why_in_its_output(tmp_path: Path) -> None:
    def parse(x: int) -> int:
        if x == 7:
            raise ValueError(f"cannot parse {x}")
        return x

    source = Stream.from_iterable(range(10), name="numbers")
    source.map(parse, name="parse").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    box = job_output(job, interval=0.05)
    with pytest.raises(Exception, match=re.escape("cannot parse 7")):
        job.run()
    wait_for(lambda: "failed" in box.value)
    assert "done" not in box.value and "finished" not in box.value, box.value
    assert "ValueError" in box.value, box.value


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
    wait_for(
        lambda: (
            "<td>numbers</td><td>100</td>" in box.value and "finished (end of input)" in box.value
        )
    )


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


def test_without_ipywidgets_outputs_are_html_displays_replaced_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pandas as pd

    from rivermark.dataframe import DataFrame

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if not installed
    InteractiveShell.instance()
    try:
        with capture_output() as captured:
            s = Stream()
            s.map(lambda x: 2 * x)._ipython_display_()
            frames = s.map(lambda x: pd.DataFrame({"x": [x]}))
            DataFrame(frames, example=pd.DataFrame({"x": [0]}))._ipython_display_()
            s.emit(21)
            # each display is replaced on its own schedule: wait for both
            wait_for(
                lambda: (
                    any(o.update and "<td>21</td>" in html(o) for o in captured.outputs)
                    and any(o.update and html(o) == "<pre>42</pre>" for o in captured.outputs)
                )
            )
        first, second, *updates = captured.outputs
        assert not first.update and "no record yet" in html(first)
        assert not second.update and "DataFrame: latest rows" in html(second)
        ids = {o.transient["display_id"] for o in (first, second)}
        assert len(ids) == 2 and {o.transient["display_id"] for o in updates} <= ids
        assert any(o.update and html(o) == "<pre>42</pre>" for o in updates)
    finally:
        InteractiveShell.clear_instance()


def html(output: Any) -> str:
    return str(output.data.get("text/html", ""))
