"""The live pipeline page, loaded in a real headless chromium while a job runs."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.errors import ConfigurationError
from rivermark.testing import wait_for, wait_value


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        yield driver
    finally:
        driver.quit()


def slow(x: int) -> int:
    time.sleep(0.002)
    return x


def test_page_shows_every_node_and_live_numbers(tmp_path: Path, browser: Any) -> None:
    source = Stream.from_iterable(range(1_000_000), name="numbers")
    evens = source.map(slow, name="slow").filter(lambda x: x % 2 == 0, name="evens")
    evens.map(lambda x: 1 // (x % 3), name="inverse", on_error="skip").sink_to_list()
    evens.partition(10, name="tens").sink(lambda w: None, name="drop")
    job = Job(source, checkpoint=tmp_path, every="200ms", ui=0)
    ids = [job.id_of(n) for n in job.nodes]
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        url = wait_value(lambda: job.ui_url if job._running else None, what="the page")
        browser.get(url)
        # every node of the graph is drawn
        drawn = wait_value(
            lambda: (
                {
                    e.get_attribute("data-node")
                    for e in browser.find_elements(By.CSS_SELECTOR, "[data-node]")
                }
                if len(browser.find_elements(By.CSS_SELECTOR, "[data-node]")) == len(ids)
                else None
            ),
            what="the graph",
        )
        assert drawn == set(ids)
        # laid out left to right: the source in the first column, the sinks further right
        xs = {
            e.get_attribute("data-node"): float(
                e.get_attribute("transform").split("(")[1].split(",")[0]
            )
            for e in browser.find_elements(By.CSS_SELECTOR, "[data-node]")
        }
        assert xs["numbers"] < xs["slow"] < xs["evens"] < xs["tens"] < xs["drop"]
        assert len(browser.find_elements(By.CSS_SELECTOR, "path.edge")) == len(ids) - 1

        def counts(node: str) -> str:
            box = browser.find_element(By.CSS_SELECTOR, f'[data-node="{node}"] .counts')
            return str(box.text)

        first = wait_value(lambda: counts("evens") if "in –" not in counts("evens") else None)
        # the numbers change while the job runs (pushed by server-sent events)
        wait_for(lambda: counts("evens") != first, what="the numbers to change")
        rate = browser.find_element(By.CSS_SELECTOR, '[data-node="slow"] .rate').text
        assert rate.endswith("/s")
        wait_for(
            lambda: (
                "backlog" in browser.find_element(By.CSS_SELECTOR, '[data-node="tens"] .rate').text
            ),
            what="the window's backlog",
        )
        wait_for(
            lambda: (
                "skipped"
                in browser.find_element(By.CSS_SELECTOR, '[data-node="inverse"] .extra').text
            ),
            what="the skipped errors",
        )
        # the strip of recent checkpoints and the sources' table
        wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#checkpoints .ckpt")) >= 2)
        row = browser.find_element(By.CSS_SELECTOR, '#sources tr[data-source="numbers"]')
        assert row.find_elements(By.TAG_NAME, "td")[0].text == "numbers"
        # the page is self-contained: no script, style or image from elsewhere
        html = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in html
        graph = json.loads(urllib.request.urlopen(url + "graph.json", timeout=10).read())
        assert {n["id"] for n in graph["nodes"]} == set(ids)
    finally:
        job.stop()
        runner.join(60)
    assert not runner.is_alive()


def test_bad_ui_port_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="got -1"):
        Job(Stream.from_iterable([1]), checkpoint="unused", ui=-1)


def test_page_shows_watermarks_open_windows_late_records_and_joins(
    tmp_path: Path, browser: Any
) -> None:
    def event_time(i: int) -> float:
        return float(i - 50 if i % 100 == 50 and i > 100 else i)  # 150, 250, ...: late

    source = Stream.from_iterable(range(1_000_000), name="numbers")
    times = source.map(slow, name="slow").timestamps(event_time, max_delay=5, name="times")
    tumble = times.tumbling_window(10, key=lambda i: i % 3, agg="count", name="tumble")
    tumble.sink_to_list()
    # the same records as a table's changes and as the left side of an as-of join
    table = times.to_table(key=lambda i: i % 3, name="table")
    lefts = source.timestamps(event_time, max_delay=5, name="lefts")
    lefts.join_asof(table, key=lambda i: i % 3, name="asof").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every="200ms", ui=0)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        browser.get(wait_value(lambda: job.ui_url if job._running else None, what="the page"))

        def texts(css: str) -> list[str]:
            # the page redraws its tables every second: an element found may be gone
            # before its text is read, then it is looked up again
            for _ in range(50):
                try:
                    return [str(e.text) for e in browser.find_elements(By.CSS_SELECTOR, css)]
                except StaleElementReferenceException:
                    continue
            raise AssertionError(f"{css}: the page kept replacing it")

        def text(css: str) -> str:
            return next(iter(texts(css)), "")

        # per key (i % 3) the window of the newest records is open; a record 50 s
        # behind the others every 100 arrives after its window closed
        wait_for(
            lambda: re.search(r"open [1-9] · late [1-9]", text('[data-node="tumble"] .rate')),
            what="the window's open windows and late records",
        )
        when = r"1970-01-01 00:\d\d:\d\d UTC"  # the times are seconds after the epoch
        # the watermark on a line of its own, inside its box
        assert re.search(f"wm {when}", text('[data-node="times"] .time'))
        inside = browser.execute_script(
            "const g = document.querySelector('[data-node=\"times\"]');"
            "return g.querySelector('.time').getBBox().width + 8"
            " <= g.querySelector('rect').getBBox().width;"
        )
        assert inside
        cells = texts('#sources tr[data-source="numbers"] td')
        assert re.fullmatch(when, cells[5]), cells[5]
        assert cells[6].endswith(" s") and float(cells[6][:-2].replace(",", "")) > 1e9
        # a join's and a table's figures in their boxes and in their rows
        wait_for(
            lambda: re.search(r"late [1-9]\d* · waited [1-9]", text('[data-node="asof"] .time')),
            what="the as-of join's late records and waits",
        )
        assert re.search(r"/s · waiting \d+$", text('[data-node="asof"] .rate'))
        assert re.search(r"/s · keys 3$", text('[data-node="table"] .rate'))
        assert re.fullmatch(r"late [1-9]\d* · dropped \d+", text('[data-node="table"] .time'))
        row = texts('#joins tr[data-join="asof"] td')
        assert row[0] == "asof" and row[2] == "–" and int(row[5].replace(",", "")) > 0, row
        assert re.fullmatch(f"{when}|–", row[6]), row
        row = texts('#joins tr[data-join="table"] td')
        assert row[0] == "table" and row[7] == "3", row
        # the figures move with the watermark
        first = cells[5]
        wait_for(
            lambda: text('#sources tr[data-source="numbers"] td:nth-child(6)') != first,
            what="the watermark to move",
        )
    finally:
        job.stop()
        runner.join(60)
    assert not runner.is_alive()
