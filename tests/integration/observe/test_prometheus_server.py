"""A real Prometheus server (Debian's ``prometheus``) scrapes a running job and answers rate()."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.testing import run_in_thread, wait_value

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
    except OSError:
        return []  # not up yet
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def test_prometheus_scrapes_the_job_and_computes_the_record_rate(tmp_path: Path) -> None:
    def slow(x: int) -> int:
        time.sleep(0.001)  # at most 1,000 records a second
        return x

    source = Stream.from_iterable(range(10**9), name="numbers")
    source.map(slow, name="slow").sink(lambda x: None, name="drop")
    job = Job(source, checkpoint=tmp_path / "ck", every="1s", metrics_port=0)
    runner, raised = run_in_thread(job)
    server = None
    try:
        url = wait_value(lambda: job.metrics_url if job.running else None, what="the endpoint")
        target = url.split("//")[1].split("/")[0]
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: rivermark\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        port = free_port()
        # its log goes to a file (a pipe that nobody reads fills up); the child keeps its copy
        with open(tmp_path / "prometheus.log", "wb") as log:
            server = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        up = wait_value(lambda: query(port, 'up{job="rivermark"}'), timeout=120, what="a scrape")
        assert up[0]["value"][1] == "1"
        expr = 'rate(rivermark_records_in_total{node="drop"}[10s])'
        result = wait_value(
            lambda: (r := query(port, expr)) and float(r[0]["value"][1]) > 0 and r,
            timeout=120,
            what="rate() of the record counter",
        )
        rate = float(result[0]["value"][1])
        assert 0 < rate <= 1100, rate
        assert result[0]["metric"]["kind"] == "Sink"
        # the busy share of the sleeping node, from its busy-seconds counter
        busy_expr = 'rate(rivermark_node_busy_seconds_total{node="slow"}[10s])'
        busy = wait_value(
            lambda: (r := query(port, busy_expr)) and float(r[0]["value"][1]) > 0 and r,
            timeout=60,
            what="the busy share",
        )
        assert float(busy[0]["value"][1]) <= 1.05
    finally:
        job.stop()
        runner.join(60)
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    assert raised == []
