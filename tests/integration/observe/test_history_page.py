"""``rivermark ui DIR``: a job's checkpoint history from its store, in a real headless chromium."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.testing import wait_for, wait_value

from .test_ui_page import browser

__all__ = ["browser"]


def add(acc: int, x: int) -> int:
    return acc + x


def _files(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in root.rglob("*")}


def _rows(driver: Any) -> list[tuple[int, str]]:
    """(epoch, text) of each row of the table, newest first, read in one step of the page."""
    found = driver.execute_script(
        "return [...document.querySelectorAll('#rows tr')]"
        ".map((tr) => [Number(tr.dataset.epoch), tr.innerText]);"
    )
    return [(int(e), str(t)) for e, t in found]


def _url_of(proc: subprocess.Popen[str]) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout

    def read() -> None:
        for line in out:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    line = lines.get(timeout=60)
    assert " at http://" in line, line
    return line.rsplit(" at ", 1)[1].strip()


def test_history_of_a_finished_job(tmp_path: Path, browser: Any) -> None:
    ckpt = tmp_path / "ckpt"
    source = Stream.from_iterable(range(1000), name="numbers")
    source.accumulate(add, start=0, name="sum").sink_to_list()
    Job(source, checkpoint=ckpt, every=None, every_batches=300, keep=50).run()
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    assert len(epochs) >= 3
    # the oldest one is damaged: its row says so, the others are unaffected
    (store.epoch_dir(epochs[0]) / "manifest.json").write_text("{")
    before = _files(ckpt)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rivermark", "ui", str(ckpt), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = _url_of(proc)
        with urllib.request.urlopen(url + "api/checkpoints", timeout=30) as r:
            history = json.load(r)
        assert [c["epoch"] for c in history["checkpoints"]] == epochs
        browser.get(url)
        rows = wait_value(
            lambda: found if len(found := _rows(browser)) == len(epochs) else None,
            what="one row per checkpoint",
        )
        newest_epoch, newest = rows[0]
        assert newest_epoch == epochs[-1]
        assert "item 1000 of the iterable is the next to emit" in newest, newest
        assert "sum:" in newest and "full" in newest
        # how long it took and held the sources, as its manifest recorded
        timing = store.read_manifest(epochs[-1]).timing
        assert timing is not None and timing["duration"] > 0
        assert f"{timing['duration']:.3f} s" in newest and f"{timing['pause']:.3f} s" in newest
        assert rows[-1][0] == epochs[0] and "DAMAGED" in rows[-1][1]
        # the run's first checkpoint still readable says where the run began
        assert "started fresh" in rows[-2][1] and "started fresh" not in newest, rows
        assert f"{len(epochs)} checkpoint(s) retained" in browser.find_element(By.ID, "store").text
        # how the last run ended, in the job's own words; and the write figure
        assert history["last_run"]["state"] == "finished"
        last = browser.find_element(By.ID, "last-run")
        assert last.text.startswith("last run: finished (end of input) at "), last.text
        assert f"{timing['write']:.3f} s" in newest
        # reading the history wrote nothing: no lock, no file
        assert _files(ckpt) == before
        # the page follows the store: a checkpoint written meanwhile appears
        source = Stream.from_iterable(range(1500), name="numbers")
        source.accumulate(add, start=0, name="sum").sink_to_list()
        Job(source, checkpoint=ckpt, every=None, keep=50).run()
        wait_for(
            lambda: "item 1500 of the iterable" in _rows(browser)[0][1],
            what="the new checkpoint on the page",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_ui_of_something_that_is_not_a_checkpoint_directory(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "rivermark", "ui", str(tmp_path / "nope"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "no such checkpoint directory" in res.stderr and len(res.stderr.splitlines()) == 1
    assert not (tmp_path / "nope").exists()
