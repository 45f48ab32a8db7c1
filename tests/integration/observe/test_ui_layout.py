"""The live page in a real headless chromium at 1,000 and 1,600 px: readable node text,
the newest checkpoint in view, data in the first response, the end states with their
reason, the exception history, and one reading per interval however many tabs are open."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.testing import run_in_thread, wait_for, wait_value

from .test_prometheus_server import free_port
from .test_ui_page import browser

__all__ = ["browser"]

#: the rendered size of a node's text in CSS pixels (its font size times the drawing's scale)
TEXT_SIZE = """
const t = document.querySelector('[data-node] .counts');
return parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a;
"""

#: the first checkpoint of the strip: its epoch and whether it is inside the window
FIRST_CHECKPOINT = """
const d = document.querySelector('#checkpoints .ckpt');
if (!d) return null;
const r = d.getBoundingClientRect();
return [Number(d.getAttribute('data-epoch')),
        r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth];
"""


def slow(x: int) -> int:
    time.sleep(0.002)
    return x


def parse(x: int) -> int:
    if x % 50 == 7:
        raise ValueError(f"cannot parse {x}")
    return x


def _state(browser: Any) -> tuple[str, str]:
    status = browser.find_element(By.ID, "status")
    return status.get_attribute("data-state") or "", status.get_attribute("data-reason") or ""


@pytest.mark.parametrize("width", [1000, 1600])
def test_readable_text_newest_checkpoint_in_view_and_data_at_once(
    tmp_path: Path, browser: Any, width: int
) -> None:
    browser.set_window_size(width, 900)
    source = Stream.from_iterable(range(1_000_000), name="numbers")
    parsed = source.map(slow, name="slow").map(parse, name="parse", on_error="skip")
    # a wide graph: eight nodes in a row
    tail = parsed
    for i in range(5):
        tail = tail.map(lambda x: x, name=f"step-{i}")
    tail.accumulate(lambda a, x: a + x, start=0, name="total").sink(lambda x: None, name="drop")
    job = Job(source, checkpoint=tmp_path, every="200ms", ui=0)
    runner, raised = run_in_thread(job)
    try:
        url = wait_value(lambda: job.ui_url if job.running else None, what="the page")
        wait_for(lambda: job.checkpoints_written >= 3, what="checkpoints")
        # the first response holds the graph and a reading with the figures
        with urllib.request.urlopen(url, timeout=10) as resp:
            html = resp.read().decode()
        found = re.search(r'<script id="initial" type="application/json">(.*?)</script>', html)
        assert found, html[:500]
        initial = json.loads(found[1])
        assert initial["reading"]["state"] == "running"
        assert initial["reading"]["nodes"]["numbers"]["out"] > 0
        assert {n["id"] for n in initial["graph"]["nodes"]} >= {"numbers", "total", "drop"}
        browser.get(url)
        # drawn at once from the page itself: no wait for a request of the script's
        assert _state(browser)[0] == "running"
        assert browser.find_elements(By.CSS_SELECTOR, "#checkpoints .ckpt")
        assert browser.execute_script(TEXT_SIZE) >= 11
        # the newest checkpoint comes first, inside the window without scrolling
        wait_for(
            lambda: (
                (first := browser.execute_script(FIRST_CHECKPOINT))
                and first[0] >= max(c.epoch for c in list(job.checkpoints)[:-1])
                and first[1]
            ),
            what="the newest checkpoint in view",
        )
        # busy as colour: the sleeping node is drawn orange
        wait_for(
            lambda: (
                int(
                    browser.find_element(By.CSS_SELECTOR, '[data-node="slow"]').get_attribute(
                        "data-busy"
                    )
                )
                >= 30
            ),
            what="slow's busy time",
        )
        fill = browser.execute_script(
            "return getComputedStyle(document.querySelector('[data-node=\"slow\"] rect')).fill"
        )
        r, g, b = (int(v) for v in re.findall(r"\d+", fill)[:3])
        assert r > g > b, fill
        # the exception history: time, node, record and the traceback
        row = wait_value(
            lambda: browser.find_elements(
                By.CSS_SELECTOR, '#exceptions tr[data-exception="parse"]'
            ),
            what="the exception history",
        )[0]
        cells = row.find_elements(By.TAG_NAME, "td")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", cells[0].text), cells[0].text
        assert cells[3].text.startswith("ValueError: cannot parse ")
        trace = cells[3].find_element(By.TAG_NAME, "pre").get_attribute("textContent")
        assert "Traceback (most recent call last)" in trace and "in parse" in trace, trace
        # the tooltip names the node
        title = browser.find_element(By.CSS_SELECTOR, '[data-node="parse"] title')
        assert title.get_attribute("textContent").startswith("parse: last error ValueError")
    finally:
        job.stop()
        runner.join(60)
    assert raised == []


def test_the_end_of_input_is_finished_on_the_page(tmp_path: Path, browser: Any) -> None:
    go = threading.Event()
    # each record waits a little until the page was seen (never long: the page is
    # served by the job's loop between records), then the input runs to its end
    source = Stream.from_iterable(range(10_000), name="numbers")
    source.map(lambda x: (go.wait(0.05), x)[1], name="held").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None, ui=0)
    runner, raised = run_in_thread(job)
    try:
        browser.get(wait_value(lambda: job.ui_url if job.running else None, what="the page"))
        assert _state(browser)[0] == "running"
    finally:
        go.set()
        runner.join(60)
    assert raised == []
    wait_for(lambda: _state(browser) == ("finished", "end of input"), what="finished")


APP = """
import time
from rivermark import Stream

def slow(x):
    time.sleep(0.005)
    return x

numbers = Stream.from_iterable(range(10**9), name="numbers")
numbers.map(slow, name="slow").sink(lambda x: None, name="drop")
"""


def test_ctrl_c_is_stopped_on_the_page(tmp_path: Path, browser: Any) -> None:
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(APP))
    port = free_port()
    cmd = [sys.executable, "-m", "rivermark", "run", f"{app}:numbers", "-c", str(tmp_path / "ck")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [*cmd, "--ui", str(port), "-q"], env=env, stderr=subprocess.PIPE, text=True
    ) as proc:
        url = f"http://127.0.0.1:{port}/"

        def loaded() -> bool:
            try:
                browser.get(url)
            except Exception:
                return False
            return _state(browser)[0] == "running"

        try:
            wait_for(loaded, what="the page")
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    wait_for(lambda: _state(browser) == ("stopped", "Ctrl-C (SIGINT)"), what="stopped")
    assert "stopped (Ctrl-C (SIGINT))" in browser.find_element(By.ID, "status").text


def test_one_reading_per_interval_however_many_pages_are_open(tmp_path: Path) -> None:
    source = Stream.from_iterable(range(10**9), name="numbers")
    source.map(slow, name="slow").sink(lambda x: None, name="drop")
    job = Job(source, checkpoint=tmp_path, every="1s", ui=0)
    reads = []
    read = job.metrics.read

    def counted() -> Any:
        reads.append(time.monotonic())
        return read()

    job.metrics.read = counted  # type: ignore[method-assign]
    runner, raised = run_in_thread(job)
    streams = []
    try:
        url = wait_value(lambda: job.ui_url if job.running else None, what="the page")
        for _ in range(30):
            streams.append(urllib.request.urlopen(url + "events", timeout=30))
        for s in streams:  # every page has its first reading
            assert s.readline().startswith(b"data: ")
        started, before = time.monotonic(), len(reads)
        for s in streams:  # and the next ones
            for _ in range(2):
                s.readline()
                s.readline()
        elapsed = time.monotonic() - started
        # about one reading per second (the interval), not one per page
        assert len(reads) - before <= elapsed / 0.9 + 2, (len(reads) - before, elapsed)
    finally:
        for s in streams:
            s.close()
        job.stop()
        runner.join(60)
    assert raised == []
