"""The control API of a real ``rivermark run --ui`` process: health, status, savepoint, stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing import wait_for, wait_value

from .controlapp import write_sum_app

RIVERMARK = str(Path(sys.executable).parent / "rivermark")
TOKEN = "a-control-token-of-test-0123456789"


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _post(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _cli(*args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIVERMARK_CONTROL")}
    if token is not None:
        env["RIVERMARK_CONTROL_TOKEN"] = token
    return subprocess.run([RIVERMARK, *args], capture_output=True, text=True, timeout=300, env=env)


def _start(tmp_path: Path, token: str | None) -> tuple[subprocess.Popen[bytes], str]:
    app = write_sum_app(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIVERMARK_CONTROL")}
    if token is not None:
        env["RIVERMARK_CONTROL_TOKEN"] = token
    ckpt = tmp_path / "ckpt"
    with (tmp_path / "stderr.txt").open("w") as err:
        proc = subprocess.Popen(
            [RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt), "--ui", "0",
             "--every", "1s"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )  # fmt: skip

    def control() -> str | None:
        try:
            url = json.loads((ckpt / "job.json").read_text()).get("control")
        except (OSError, ValueError):
            return None
        return url if isinstance(url, str) else None

    url = wait_value(control, timeout=120, what="the job's control address in job.json")
    assert isinstance(url, str)
    return proc, url


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_savepoint_and_stop_with_savepoint_through_the_control_api(tmp_path: Path) -> None:
    proc, url = _start(tmp_path, TOKEN)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    try:
        # the page (and job.json) come up just before the job counts as running
        wait_for(lambda: _get(url + "healthz") == (200, {"status": "running"}), timeout=60)
        wait_for(lambda: len(_lines(out)) == 100, timeout=120)
        assert _get(url + "readyz")[0] == 200
        status, info = _get(url + "api/job")
        assert status == 200 and info["status"] == "running" and info["epoch"] >= 1
        assert info["positions"]["lines"]["offset"] == (tmp_path / "in").stat().st_size
        # changing requests need the token
        assert _post(url + "api/savepoint") == 401
        assert _post(url + "api/savepoint", "not-the-token-0123456789") == 401
        refused = _cli("savepoint", str(ckpt), token=None)
        assert refused.returncode == 2 and "no control token" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        # a wrong token: the running job cannot prove it holds it, so it is never sent,
        # and the line says how to give the right one
        for args in (["savepoint", str(ckpt)], ["stop", url]):
            wrong = _cli(*args, token="not-the-token-0123456789")
            assert wrong.returncode == 1 and len(wrong.stderr.splitlines()) == 1, wrong.stderr
            assert "could not prove that it holds your control token" in wrong.stderr
            assert "your token is not its token (set RIVERMARK_CONTROL_TOKEN" in wrong.stderr
        assert proc.poll() is None
        res = _cli("savepoint", str(ckpt))
        assert res.returncode == 0, res.stderr
        epoch = int(res.stdout.split()[-1])
        store = LocalDirectoryStore(ckpt)
        assert store.load_manifest(epoch).savepoint
        _, history = _get(url + "api/checkpoints")
        assert any(c["epoch"] == epoch and c["kind"] == "savepoint" for c in history["checkpoints"])
        with (tmp_path / "in").open("a") as f:
            f.write("".join(f"{i}\n" for i in range(101, 151)))
        wait_for(lambda: len(_lines(out)) == 150, timeout=120)
        res = _cli("stop", url, "--savepoint")
        assert res.returncode == 0, res.stderr
        final = int(res.stdout.split()[-1])
        assert res.stdout.startswith("stopped; final savepoint")
        assert proc.wait(timeout=120) == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert store.list_epochs()[-1] == final > epoch and store.load_manifest(final).savepoint
    totals = [sum(range(1, i + 1)) for i in range(1, 151)]
    assert _lines(out) == [str(t) for t in totals]
    # the job is gone: the CLI says no job answers
    gone = _cli("savepoint", str(ckpt))
    assert gone.returncode == 1 and "no job answers" in gone.stderr, gone.stderr
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


def test_a_job_without_a_token_refuses_every_changing_request(tmp_path: Path) -> None:
    proc, url = _start(tmp_path, None)
    try:
        wait_for(lambda: _get(url + "readyz")[0] == 200, timeout=120)
        for path in ("api/checkpoint", "api/savepoint", "api/stop"):
            assert _post(url + path, TOKEN) == 403, path
        res = _cli("stop", str(tmp_path / "ckpt"))
        assert res.returncode == 1 and "takes no control requests" in res.stderr, res.stderr
        assert proc.poll() is None  # still running
    finally:
        proc.terminate()
        assert proc.wait(timeout=120) == 0


HEALTH_APP = """\
import asyncio
import os

from rivermark import Stream
from rivermark.sources.textfile import FromTextfile


class Gated(FromTextfile):
    async def prepare(self):  # the job's start waits here until the gate file exists
        while not os.path.exists({gate!r}):
            await asyncio.sleep(0.01)
        await super().prepare()


class Holding(Stream):
    @property
    def in_flight(self):  # holds work while the file exists: a checkpoint waits for it
        return int(os.path.exists({hold!r}))


source = Gated({inp!r}, poll_interval="20ms", name="lines")
Holding(source).map(int).accumulate(lambda a, x: a + x, start=0, name="total").sink_to_textfile(
    {out!r}
)
"""


def test_health_while_the_job_starts_runs_and_stops(tmp_path: Path) -> None:
    gate, hold, ckpt = tmp_path / "gate", tmp_path / "hold", tmp_path / "ckpt"
    (tmp_path / "in").write_text("".join(f"{i}\n" for i in range(1, 51)))
    app = tmp_path / "app.py"
    files = {"gate": str(gate), "hold": str(hold), "inp": str(tmp_path / "in")}
    app.write_text(HEALTH_APP.format(out=str(tmp_path / "out"), **files))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIVERMARK_CONTROL")}
    env["RIVERMARK_CONTROL_TOKEN"] = TOKEN
    proc = subprocess.Popen(
        [RIVERMARK, "run", f"{app}:source", "-c", str(ckpt), "--ui", "0", "--every", "1s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        url = wait_value(
            lambda: (
                json.loads((ckpt / "job.json").read_text()).get("control")
                if (ckpt / "job.json").exists()
                else None
            ),
            timeout=120,
            what="the control address",
        )
        # starting: restored, the page up, the sources not yet started
        assert _get(url + "healthz") == (200, {"status": "starting"})
        assert _get(url + "readyz") == (503, {"status": "starting"})
        assert _get(url + "api/job")[1]["status"] == "starting"
        assert _post(url + "api/checkpoint", TOKEN) == 409  # nothing to checkpoint yet
        gate.touch()
        wait_for(lambda: _get(url + "readyz") == (200, {"status": "running"}), timeout=120)
        assert _get(url + "healthz") == (200, {"status": "running"})
        wait_for(lambda: len(_lines(tmp_path / "out")) == 50, timeout=120)
        # a checkpoint on request, with the token
        req = urllib.request.Request(
            url + "api/checkpoint", data=b"", method="POST",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.load(r)
        assert answer["savepoint"] is False
        m = LocalDirectoryStore(ckpt).load_manifest(answer["epoch"])
        assert (
            not m.savepoint and m.positions["lines"]["offset"] == (tmp_path / "in").stat().st_size
        )
        # stopping: the final checkpoint waits for the node holding work
        hold.touch()
        stopper = subprocess.Popen(
            [RIVERMARK, "stop", str(ckpt)], env=env, stdout=subprocess.PIPE, text=True
        )
        wait_for(lambda: _get(url + "healthz") == (200, {"status": "stopping"}), timeout=120)
        assert _get(url + "readyz") == (503, {"status": "stopping"})
        assert stopper.poll() is None  # the stop waits for its final checkpoint
        hold.unlink()
        out, _ = stopper.communicate(timeout=120)
        assert stopper.returncode == 0 and out.startswith("stopped; final checkpoint")
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # ended: the server is gone with the job
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "healthz", timeout=5)
    assert _lines(tmp_path / "out")[-1] == str(sum(range(1, 51)))
