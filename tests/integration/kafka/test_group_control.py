"""The control API of a partitioned job, in a real process on the real broker: one address
answers for every task (status, checkpoints, a savepoint per task, a stop with savepoints)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rivermark.checkpoint import open_store
from rivermark.testing import wait_progress

from .helpers import wait_for
from .test_group import APP, Reader, _inputs, _SlowInput

pytestmark = pytest.mark.kafka

TOKEN = "group-control-token-0123456789"
N = 1200


def _call(url: str, method: str = "GET", token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, data=b"" if method == "POST" else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RIVERMARK_CONTROL_TOKEN": TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "rivermark", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_one_address_answers_for_every_task(
    bootstrap: str, new_topic: Any, group: str, tmp_path: Path
) -> None:
    inp, out = new_topic(partitions=4, prefix="in"), new_topic(partitions=2, prefix="out")
    ckpt = tmp_path / "group"
    log = tmp_path / "proc.log"
    env = {**os.environ, "APP_CONTROL_PORT": "0", "RIVERMARK_CONTROL_TOKEN": TOKEN}
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            [sys.executable, str(APP), bootstrap, inp, out, group, str(ckpt)],
            stdout=subprocess.DEVNULL,
            stderr=f,
            env=env,
        )
    reader = Reader(bootstrap, out)
    try:
        wait_for(
            lambda: "serving the control API at" in log.read_text(),
            timeout=90,
            what="the control API's address in the log",
        )
        url = re.search(r"serving the control API at (http://\S+/)", log.read_text())
        assert url is not None
        base = url.group(1)
        wait_for(
            lambda: len(_call(base + "api/job")[1]["tasks"]) == 4,
            timeout=120,
            what="4 tasks in /api/job",
        )
        _SlowInput(bootstrap, inp, _inputs(N)).finish()
        wait_progress(lambda: len(reader.values), N, stall=120, what="output records")

        status, job = _call(base + "api/job")
        assert status == 200 and job["status"] == "running" and job["group"] == group
        assert job["reason"] == "", job
        tasks = job["tasks"]
        assert sorted(tasks) == [f"{inp}[{p}]" for p in range(4)]
        assert all((t["status"], t["reason"]) == ("running", "") for t in tasks.values()), tasks
        # the positions say where each task is: the four add up to the input
        offsets = {
            part: offset
            for t in tasks.values()
            for position in t["positions"].values()
            for part, offset in position.items()
            if part.startswith(f"{inp}:")
        }
        assert len(offsets) == 4 and sum(offsets.values()) == N, offsets

        # changing requests need the token
        assert _call(base + "api/savepoint", "POST")[0] == 401
        assert _call(base + "api/savepoint", "POST", token="wrong-token-0123456789")[0] == 401

        # the CLI client takes a savepoint of every task, one line each
        res = _cli("savepoint", base)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert len(lines) == 4, res.stdout
        for line in lines:
            m = re.fullmatch(rf"savepoint (\d+) of task ({re.escape(inp)})\[(\d)\]", line)
            assert m is not None, line
            store = open_store(ckpt / "tasks" / f"{inp}-{m.group(3)}", create=False)
            assert store.read_manifest(int(m.group(1))).savepoint, line

        status, history = _call(base + "api/checkpoints")
        assert status == 200 and sorted(history["tasks"]) == sorted(tasks)
        assert all(
            any(c["kind"] == "savepoint" for c in t["checkpoints"])
            for t in history["tasks"].values()
        ), history

        # stop with a savepoint: every task's final checkpoint is one, the process exits 0
        status, answer = _call(base + "api/stop?savepoint=true", "POST", token=TOKEN)
        assert status == 200, answer
        assert sorted(answer["tasks"]) == sorted(tasks) and answer["savepoint"] is True
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
        for key, epoch in answer["tasks"].items():
            partition = key.rsplit("[", 1)[1].rstrip("]")
            store = open_store(ckpt / "tasks" / f"{inp}-{partition}", create=False)
            assert store.list_epochs()[-1] == epoch
            assert store.read_manifest(epoch).savepoint
    finally:
        reader.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text()
