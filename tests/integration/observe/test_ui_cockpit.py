"""The live page's operator view in a real headless chromium: where a job is slow, its
errors, state and checkpoints, a Graphviz layout that zooms and pans, and its final state."""

from __future__ import annotations

import errno
import re
import threading
import time
from pathlib import Path
from typing import Any

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
from selenium.webdriver.common.by import By

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.testing import run_in_thread, wait_for, wait_value

from .test_ui_page import browser

__all__ = ["browser"]


def slow(x: int) -> int:
    time.sleep(0.002)
    return x


def inverse(x: int) -> float:
    return 1 / (x % 3)


# The page redraws its parts while the job runs: an element found in one call may be
# gone by the next, so what a test reads it reads in one step of the page's script.


def text(driver: Any, css: str) -> str:
    """The text of the first element ``css`` selects ("" if none; an SVG element has no
    rendered text of its own: its text content)."""
    found = driver.execute_script(
        "const e = document.querySelector(arguments[0]);"
        "return e ? (e.innerText ?? e.textContent) : '';",
        css,
    )
    return str(found)


def attributes(driver: Any, css: str, name: str) -> list[str | None]:
    """Attribute ``name`` of every element ``css`` selects."""
    found = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((e) => e.getAttribute(arguments[1]));",
        css,
        name,
    )
    return list(found)


def cells(driver: Any, css: str) -> list[str] | None:
    """The cells' texts of the first table row ``css`` selects (None if none)."""
    found = driver.execute_script(
        "const tr = document.querySelector(arguments[0]);"
        "return tr ? [...tr.querySelectorAll('td')].map((td) => td.innerText) : null;",
        css,
    )
    return None if found is None else [str(c) for c in found]


def percent(driver: Any, node: str, what: str) -> int:
    line = text(driver, f'[data-node="{node}"] .busy')
    m = re.search(rf"{what} (\d+)%", line)
    return int(m.group(1)) if m else -1


def view_box(driver: Any) -> list[float]:
    box = driver.find_element(By.ID, "graph").get_dom_attribute("viewBox")
    return [float(v) for v in box.split()]


def test_busy_backpressure_errors_state_and_zoom(tmp_path: Path, browser: Any) -> None:
    source = Stream.from_iterable(range(1_000_000), name="numbers")
    slowed = source.map(slow, name="slow")
    slowed.map(inverse, name="inverse", on_error="skip").sink_to_list()
    slowed.accumulate(lambda acc, x: acc + x, start=0, name="total").sink(lambda x: None)
    job = Job(source, checkpoint=tmp_path, every="200ms", ui=0)
    runner, raised = run_in_thread(job)
    try:
        url = wait_value(lambda: job.ui_url if job.running else None, what="the page")
        browser.get(url)
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-node]"), what="the graph")
        assert browser.find_element(By.ID, "graph").get_attribute("data-layout") == "dot"
        # the node that sleeps is busy most of the time, and everything above it waits
        wait_for(lambda: percent(browser, "slow", "busy") >= 50, what="slow's busy time")
        wait_for(
            lambda: percent(browser, "numbers", "backpressure") >= 50,
            what="the source's backpressure",
        )
        assert 0 <= percent(browser, "inverse", "busy") < 50
        # the last failing record and its exception
        row = wait_value(
            lambda: cells(browser, '#errors tr[data-errors="inverse"]'),
            what="the errors table",
        )
        assert row[0] == "inverse"
        assert int(row[2]) % 3 == 0, row
        assert row[3] == "ZeroDivisionError: division by zero", row
        # state bytes from the last checkpoint, and the checkpoints' kind
        wait_for(
            lambda: re.fullmatch(
                r"Accumulate · state \d+ B", text(browser, '[data-node="total"] .kind')
            ),
            what="total's state size",
        )
        assert set(attributes(browser, "#checkpoints .ckpt", "data-kind")) == {"full"}
        # zoom with the wheel, pan by dragging, and fit again
        svg = browser.find_element(By.ID, "graph")
        full = view_box(browser)
        ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(svg), 0, -300).perform()
        zoomed = wait_value(lambda: view_box(browser) if view_box(browser)[2] < full[2] else None)
        ActionChains(browser).drag_and_drop_by_offset(svg, 120, 0).perform()
        wait_for(lambda: view_box(browser)[0] < zoomed[0], what="the pan")
        browser.find_element(By.ID, "fit").click()
        assert view_box(browser) == full
    finally:
        job.stop()
        runner.join(60)
    assert raised == []
    # the page outlives the run: it shows the final state and keeps the last figures;
    # a stop is "stopped" (never "finished": the input did not end), with who asked
    wait_for(
        lambda: browser.find_element(By.ID, "status").get_attribute("data-state") == "stopped",
        what="the final state",
    )
    assert text(browser, "#status").startswith("stopped (Job.stop()) · ")
    assert "in –" not in text(browser, '[data-node="total"] .counts')


def test_a_failed_job_says_why_on_the_page(tmp_path: Path, browser: Any) -> None:
    go = threading.Event()

    def fail_at(x: int) -> int:
        # fails once the page is open (the records before pass slowly)
        if go.is_set():
            raise ValueError(f"cannot parse {x}")
        return slow(x)

    source = Stream.from_iterable(range(1_000_000), name="numbers")
    source.map(fail_at, name="parse").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None, ui=0)
    runner, failures = run_in_thread(job)
    try:
        url = wait_value(lambda: job.ui_url if job.running else None, what="the page")
        browser.get(url)
        wait_for(lambda: "running" in text(browser, "#status"), what="the running state")
    finally:
        go.set()
        runner.join(60)
    assert failures
    wait_for(lambda: "failed" in text(browser, "#status"), what="the failed state")
    assert attributes(browser, "#status", "data-state") == ["failed"]
    assert "ValueError: cannot parse" in str(attributes(browser, "#status", "data-reason")[0])
    assert "disconnected" not in text(browser, "#status")


class _FullDisk(LocalDirectoryStore):
    """A real directory store whose writes fail with ENOSPC once ``full`` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.full = threading.Event()

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        if self.full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write_checkpoint(manifest, states)


def test_a_failed_checkpoint_is_in_the_history_with_its_reason(
    tmp_path: Path, browser: Any
) -> None:
    source = Stream.from_iterable(range(1_000_000), name="numbers")
    source.map(slow, name="work").sink_to_list()
    store = _FullDisk(tmp_path)
    job = Job(source, checkpoint=store, every="100ms", ui=0)
    runner, failures = run_in_thread(job)
    try:
        url = wait_value(lambda: job.ui_url if job.running else None, what="the page")
        browser.get(url)
        wait_for(
            lambda: attributes(browser, '#checkpoints .ckpt[data-kind="full"]', "data-epoch"),
            what="a written checkpoint on the page",
        )
    finally:
        store.full.set()
        runner.join(60)
    assert failures and not runner.is_alive()
    shown, at = wait_value(
        lambda: browser.execute_script(
            "const f = [...document.querySelectorAll('#checkpoints .ckpt[data-kind=\"failed\"]')];"
            "return f.length ? [f[f.length - 1].innerText, f[f.length - 1].dataset.epoch] : null;"
        ),
        what="the failed checkpoint on the page",
    )
    assert "failed" in shown and "No space left on device" in shown, shown
    epoch = int(at)
    assert epoch == job.checkpoint_failures[-1].epoch and epoch > max(store.list_epochs())
