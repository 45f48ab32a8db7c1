"""Every count the cockpit shows carries over a SIGKILL and the resume: records in and out,
errors raised, skipped and handled, late records; in ``/api/job`` and in Prometheus."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

from rivermark.testing import wait_for, wait_value

from .test_prometheus_server import free_port

APP = """
import json, os
from rivermark import Stream

dead = []

def parse(line):
    r = json.loads(line)
    if r["v"] % 7 == 0:
        raise ValueError(f"bad record {r['v']}")
    return r

def check(r):
    if r["v"] % 11 == 0:
        raise KeyError(r["v"])
    return r

source = Stream.from_textfile(os.environ["APP_INPUT"], name="lines")
parsed = source.map(parse, name="parse", on_error="skip")
checked = parsed.map(check, name="check", on_error=lambda record, exc: dead.append(record))
times = checked.timestamps(lambda r: float(r["ts"]), max_delay="1s", name="times")
counts = times.tumbling_window(1, agg="count", name="per_second")
counts.sink(lambda w: None, name="out")
counts.late.sink(lambda r: None, name="late_out")
"""


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _counts(ui: int, metrics: int) -> tuple[dict[str, Any], dict[str, float]]:
    """The counts of ``/api/job`` and the counters of the Prometheus endpoint."""
    job = json.loads(_get(f"http://127.0.0.1:{ui}/api/job"))
    prom = {}
    for line in _get(f"http://127.0.0.1:{metrics}/metrics").splitlines():
        name = line.split("{")[0]
        if name in (
            "rivermark_records_in_total",
            "rivermark_records_out_total",
            "rivermark_errors_total",
            "rivermark_late_records_total",
        ):
            key, value = line.rsplit(" ", 1)
            prom[key] = float(value)
    return job["counts"], prom


def _write_input(path: Path) -> None:
    lines = []
    for v in range(1, 400):
        ts = v * 0.05 if v % 40 else v * 0.05 - 5  # every 40th record is late
        lines.append(json.dumps({"v": v, "ts": 1_700_000_000 + ts}))
    path.write_text("\n".join(lines) + "\n")


def test_every_count_carries_over_a_sigkill_and_the_resume(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(APP))
    _write_input(tmp_path / "in.jsonl")
    env = {
        **os.environ,
        "APP_INPUT": str(tmp_path / "in.jsonl"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }

    def start() -> tuple[subprocess.Popen[str], int, int]:
        ui, metrics = free_port(), free_port()
        cmd = [
            sys.executable,
            "-m",
            "rivermark",
            "run",
            f"{app}:source",
            "-c",
            str(tmp_path / "ck"),
        ]
        cmd += ["--every", "100ms", "--ui", str(ui), "--metrics-port", str(metrics), "-q"]
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        return proc, ui, metrics

    def api(ui: int) -> dict[str, Any] | None:
        try:
            return dict(json.loads(_get(f"http://127.0.0.1:{ui}/api/job")))
        except OSError:
            return None

    proc, ui, metrics = start()
    try:
        # every line read, then two more checkpoints: the last one holds the final counts
        first = wait_value(
            lambda: (j := api(ui)) and j["counts"]["lines"]["records_out"] == 399 and j,
            what="every line read",
        )
        wait_for(lambda: (api(ui) or {}).get("epoch", 0) >= first["epoch"] + 2, what="checkpoints")
        before = _counts(ui, metrics)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    counts = before[0]
    # the figures are not trivially zero: errors of each kind and late records were counted
    assert counts["parse"]["errors_skipped"] == len([v for v in range(1, 400) if v % 7 == 0])
    assert counts["check"]["errors_handled"] > 0
    assert counts["per_second"]["late"] > 0, counts["per_second"]

    proc, ui, metrics = start()
    try:
        wait_value(lambda: api(ui), what="the resumed job")
        after = _counts(ui, metrics)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert after[0] == before[0]
    assert after[1] == before[1]
