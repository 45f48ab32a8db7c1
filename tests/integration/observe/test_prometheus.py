"""The Prometheus endpoint, scraped over HTTP while real jobs run."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.errors import ConfigurationError


def scrape(url: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of every sample on the page."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def wait_for(cond: Any, timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_counters_move_and_equal_the_records_processed(tmp_path: Path) -> None:
    gates = {100: threading.Event(), 600: threading.Event()}

    out: list[str] = []

    def hold(x: str) -> None:
        if int(x) in gates:
            gates[int(x)].wait(60)  # the loop stops here; the endpoint answers from its thread
        out.append(x)

    source = Stream.from_iterable(range(1000), name="numbers")
    evens = source.filter(lambda x: x % 2 == 0, name="evens")
    evens.map(str, name="text").sink(hold, name="hold")
    job = Job(source, checkpoint=tmp_path, every="50ms", metrics_port=0)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        url = wait_for(lambda: job.metrics_url if job._running else None, what="the endpoint")
        key = 'rivermark_records_in_total{kind="Sink",node="hold"}'
        for held_at in (100, 600):
            # held inside record held_at: everything before it is counted, exactly
            wait_for(lambda h=held_at: len(out) == h // 2, what=f"the gate at {held_at}")
            m = wait_for(lambda h=held_at: (s := scrape(url))[key] == h // 2 + 1 and s)
            assert m['rivermark_source_records_total{source="numbers"}'] == held_at + 1
            assert m['rivermark_records_in_total{kind="Filter",node="evens"}'] == held_at + 1
            assert m['rivermark_records_out_total{kind="Filter",node="evens"}'] == held_at // 2 + 1
            assert m['rivermark_records_out_total{kind="Map",node="text"}'] == held_at // 2 + 1
            # the sink has received the record it is working on, and all before it
            assert m[key] == len(out) + 1
            assert m['rivermark_errors_total{node="hold",policy="raised"}'] == 0
            assert m["rivermark_job_running"] == 1 and m["rivermark_restores_total"] == 0
            assert m["rivermark_checkpoints_total"] >= 1
            assert m["rivermark_checkpoint_epoch"] >= 1
            gates[held_at].set()
    finally:
        for g in gates.values():
            g.set()
        runner.join(60)
    assert not runner.is_alive() and len(out) == 500
    # the endpoint is closed with the job
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


def test_file_lag(tmp_path: Path) -> None:
    data = tmp_path / "in.txt"
    data.write_text("".join(f"{i}\n" for i in range(100)))  # 290 bytes
    gate = threading.Event()

    def hold(line: str) -> str:
        if line == "50\n":
            gate.wait(60)
        return line

    source = Stream.from_textfile(str(data), stop_at_eof=True, name="lines")
    source.map(hold, name="hold").sink_to_list()
    job = Job(source, checkpoint=tmp_path / "ck", every=None, metrics_port=0)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        url = wait_for(lambda: job.metrics_url if job._running else None)
        lag_key = 'rivermark_source_lag{partition="",source="lines",unit="bytes"}'
        # held inside line 51: the source's position moves once per chunk of
        # lines, so the lag shown is at least the 150 bytes after line 50
        wait_for(lambda: (scrape(url).get(lag_key) or 0) >= 150, what="lag of at least 150")
    finally:
        gate.set()
        runner.join(60)
    assert job.metrics.read().sources[0].lag == {"": 0}


def test_bad_port_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("got 70000")):
        Job(Stream.from_iterable([1]), checkpoint="unused", metrics_port=70000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_metrics_port(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    gate = tmp_path / "go"
    app.write_text(
        "import os, time\n"
        "from rivermark import Stream\n"
        "def slow(x):\n"
        f"    while x == 150 and not os.path.exists({str(gate)!r}):\n"
        "        time.sleep(0.01)\n"
        "    return x\n"
        "src = Stream.from_iterable(list(range(300)), name='numbers')\n"
        "src.map(slow, name='slow').sink_to_list()\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rivermark.cli", "run", f"{app}:src", "-c", str(tmp_path / "ck")],
        env={**os.environ, "RIVERMARK_METRICS_PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        key = 'rivermark_records_in_total{kind="Map",node="slow"}'

        def held() -> bool:
            try:
                return scrape(url).get(key) == 151
            except OSError:
                return False

        wait_for(held, what="the job to reach record 150")
        gate.write_text("")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
