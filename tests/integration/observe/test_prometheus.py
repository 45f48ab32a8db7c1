"""The Prometheus endpoint, scraped over HTTP while real jobs run."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.errors import ConfigurationError
from rivermark.observe.prometheus import collect_families
from rivermark.testing import wait_for, wait_value


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
        url = wait_value(lambda: job.metrics_url if job._running else None, what="the endpoint")
        key = 'rivermark_records_in_total{kind="Sink",node="hold"}'
        for held_at in (100, 600):
            # held inside record held_at: everything before it is counted, exactly
            wait_for(lambda h=held_at: len(out) == h // 2, what=f"the gate at {held_at}")
            m = wait_value(lambda h=held_at: (s := scrape(url))[key] == h // 2 + 1 and s)
            assert m['rivermark_source_records_total{source="numbers"}'] == held_at + 1
            assert m['rivermark_records_in_total{kind="Filter",node="evens"}'] == held_at + 1
            assert m['rivermark_records_out_total{kind="Filter",node="evens"}'] == held_at // 2 + 1
            assert m['rivermark_records_out_total{kind="Map",node="text"}'] == held_at // 2 + 1
            # the sink has received the record it is working on, and all before it
            assert m[key] == len(out) + 1
            assert m['rivermark_errors_total{node="hold",policy="raised"}'] == 0
            assert m["rivermark_job_running"] == 1 and m["rivermark_restores_total"] == 0
            assert m["rivermark_job_bootstrapping"] == 0
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
        url = wait_value(lambda: job.metrics_url if job._running else None)
        lag_key = 'rivermark_source_lag{source="lines",unit="bytes"}'
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


def exposition(url: str) -> dict[str, Any]:
    """The families on the page, read by prometheus-client's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_exposition_follows_prometheus_conventions(tmp_path: Path) -> None:
    gate = threading.Event()

    def hold(x: int) -> int:
        if x == 250:
            gate.wait(60)
        return x

    def job_on(items: list[int]) -> tuple[Job, threading.Thread]:
        source = Stream.from_iterable(items, name="numbers")
        source.map(hold, name="hold").accumulate(lambda a, x: a + x, start=0, name="sum").sink(
            lambda x: None, name="drop"
        )
        job = Job(source, checkpoint=tmp_path, every=None, metrics_port=0)
        return job, threading.Thread(target=job.run)

    first, runner = job_on(list(range(200)))
    runner.start()
    runner.join(60)
    written = first.checkpoints[-1]
    # resumed, and held inside record 250 before this run's first checkpoint
    job, runner = job_on(list(range(300)))
    runner.start()
    try:
        url = wait_value(lambda: job.metrics_url if job.running else None, what="the endpoint")
        fams = wait_value(
            lambda: (
                (f := exposition(url))["rivermark_records_in"].samples
                # 200 counted by the first run, carried over, and 51 now
                and any(s.value == 251 for s in f["rivermark_records_in"].samples)
                and f
            ),
            what="record 250",
        )
        ours = {k: f for k, f in fams.items() if k.startswith("rivermark_")}
        for name, fam in ours.items():
            assert fam.documentation, name
            assert not name.endswith(("_per_second", "_age_seconds")), name
            for sample in fam.samples:
                assert all(v != "" for v in sample.labels.values()), sample
        # prometheus-client's process and platform collectors are on
        assert "process_cpu_seconds" in fams and "python_info" in fams
        # the epoch and the time of the checkpoint resumed from, at once
        assert ours["rivermark_checkpoint_epoch"].samples[0].value == written.epoch
        stamp = ours["rivermark_last_checkpoint_timestamp_seconds"].samples[0].value
        assert stamp == pytest.approx(written.time)
        assert ours["rivermark_restores"].samples[0].value == 1
        # the checkpoints as histograms (none written by this run yet)
        for name in ("duration_seconds", "write_seconds", "pause_seconds", "size_bytes"):
            fam = ours[f"rivermark_checkpoint_{name}"]
            assert fam.type == "histogram"
            count = next(s for s in fam.samples if s.name.endswith("_count"))
            assert count.value == 0
        assert ours["rivermark_records_in"].type == "counter"
        busy = {s.labels["node"]: s.value for s in ours["rivermark_node_busy_seconds"].samples}
        assert set(busy) == {"numbers", "hold", "sum", "drop"}
    finally:
        gate.set()
        runner.join(60)
    # the final checkpoint of the second run lands in the histograms
    final = {f.name: f for f in collect_families(job.metrics)}
    hist = final["rivermark_checkpoint_size_bytes"]
    buckets = [s for s in hist.samples if s.name.endswith("_bucket")]
    assert [s.value for s in buckets] == sorted(s.value for s in buckets)
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == job.checkpoints_written


def test_event_time_watermarks_late_records_and_open_windows(tmp_path: Path) -> None:
    gate = threading.Event()
    late_at = {150, 250, 350, 450, 650}

    def hold(i: int) -> int:
        if i == 500:
            gate.wait(60)  # held here: records 0..499 went through the windows
        return i

    def event_time(i: int) -> float:
        return float(i - 50 if i in late_at else i)  # 50 s behind the others: late

    source = Stream.from_iterable(range(1000), name="numbers")
    times = source.map(hold, name="hold").timestamps(event_time, max_delay=5, name="times")
    tumble = times.tumbling_window(10, key=lambda i: i % 3, agg="count", name="tumble")
    tumble.sink_to_list()
    tumble.late.sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None, metrics_port=0)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        url = wait_value(lambda: job.metrics_url if job._running else None, what="the endpoint")
        wm_key = 'rivermark_node_watermark_timestamp_seconds{node="times"}'
        m = wait_value(lambda: (s := scrape(url)).get(wm_key) == 494.0 and s, what="record 500")
        assert m['rivermark_source_watermark_timestamp_seconds{source="numbers"}'] == 494.0
        assert m['rivermark_late_records_total{node="tumble"}'] == 4
        # per key (i % 3), the window [490, 500) is open; [480, 490) closed at 490 <= 494
        assert m['rivermark_open_windows{node="tumble"}'] == 3
        snap = job.metrics.read()
        numbers = snap.sources[0]
        assert numbers.watermark == 494.0 and numbers.partition_watermarks == {"": 494.0}
        assert numbers.event_time_lag == pytest.approx(snap.time - 494.0)
        assert snap.node("tumble").open_windows == 3 and snap.node("hold").late_records is None
    finally:
        gate.set()
        runner.join(60)
    # the end of the input: every window closed, the watermark at +inf (no gauge for it)
    final = job.metrics.read()
    assert final.node("times").watermark == float("inf") and final.node("tumble").open_windows == 0
    assert final.node("tumble").late_records == 5
    families = {f.name: f for f in collect_families(job.metrics)}
    assert families["rivermark_source_watermark_timestamp_seconds"].samples == []
    assert families["rivermark_late_records"].samples[0].value == 5
