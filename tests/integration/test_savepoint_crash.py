"""SIGKILL while a savepoint is written: earlier checkpoints stay intact, the rerun is exact.

At the savepoint's own fault point (its state files written, its manifest
not), and at random moments of a savepoint asked for with ``rivermark
savepoint`` while the job runs: the savepoint then either completes (the
command prints its epoch, or it is listed whole) or the command reports in
one line that the job stopped answering, and the job's checkpoints all
verify.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing import wait_value

from .apps.keyedcount import reference

pytestmark = pytest.mark.crash

APP = Path(__file__).parent / "apps" / "savepoint_app.py"
N = 40_000


def run(tmp: Path, fault: str | None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env.pop("RIVERMARK_FAULT", None)
    if fault is not None:
        env["RIVERMARK_FAULT"] = fault
    cmd = [sys.executable, str(APP), str(tmp / "out.txt"), str(tmp / "ckpt"), str(tmp / "r.json")]
    return subprocess.run(cmd, env=env, capture_output=True, timeout=120)


def test_a_kill_during_a_savepoint_leaves_earlier_checkpoints_and_the_rerun_is_exact(
    tmp_path: Path,
) -> None:
    # the process kills itself once the savepoint's state files are written
    res = run(tmp_path, "savepoint-after-state-files")
    assert res.returncode == -9, res.stderr.decode()[-2000:]
    store = LocalDirectoryStore(tmp_path / "ckpt")
    epochs = store.list_epochs()
    assert epochs, "no checkpoint survived"
    for e in epochs:
        store.verify(e)  # raises if damaged
    # the savepoint's state files are there, its manifest is not: it does not exist
    assert [d.name for d in store.list_incomplete()] == [f"{epochs[-1] + 1:012d}"]
    assert not any(store.read_manifest(e).savepoint for e in epochs)
    res = run(tmp_path, None)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["restored"] == epochs[-1]
    assert (tmp_path / "out.txt").read_text() == reference(N)
    sp = report["savepoint"]
    m = store.read_manifest(sp)
    assert m.savepoint and m.chains["counts"]["parent"] is None
    assert sp in store.list_epochs() and store.list_incomplete() == []


# ---------------------------------------------------------------- killed at random during it
KILL_APP = Path(__file__).parent / "apps" / "savepoint_kill_app.py"
RIVERMARK = str(Path(sys.executable).parent / "rivermark")
TOKEN = "a-control-token-of-test-0123456789"
KEYS, LINES = 40_000, 300_000


def _env(tmp: Path, slow: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIVERMARK_")}
    env.update(
        RIVERMARK_APP_INPUT=str(tmp / "in.txt"),
        RIVERMARK_APP_OUTPUT=str(tmp / "out.txt"),
        RIVERMARK_APP_SLOW=str(slow),
        RIVERMARK_CONTROL_TOKEN=TOKEN,
    )
    return env


def _running_url(ckpt: Path, proc: subprocess.Popen[bytes]) -> str | None:
    """The control address of the job ``proc`` once it runs (None before)."""
    assert proc.poll() is None, "the job ended before it was asked for a savepoint"
    try:
        url = json.loads((ckpt / "job.json").read_text())["control"]
        with urllib.request.urlopen(url + "healthz", timeout=5) as r:
            running = json.load(r)["status"] == "running"
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not written yet, or the address of a killed run
    return str(url) if running else None


def _files(ckpt: Path, epoch: int) -> dict[str, str]:
    """The sha256 of every file of checkpoint ``epoch``."""
    where = ckpt / "checkpoints" / f"{epoch:012d}"
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in where.rglob("*") if p.is_file()
    }


def _kill_during_a_savepoint(
    tmp: Path, cmd: list[str], delay: float | None
) -> tuple[subprocess.CompletedProcess[str], dict[int, dict[str, str]], float]:
    """Run the job, ask for a savepoint with ``rivermark savepoint``, SIGKILL the job
    ``delay`` s after the command started (None: once it was answered); the command's
    result, the files of the checkpoints the store held before, and the seconds from
    the command's start to the kill."""
    ckpt = tmp / "ckpt"
    store = LocalDirectoryStore(ckpt)
    job = subprocess.Popen(
        cmd, env=_env(tmp, 0.2), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_value(lambda: _running_url(ckpt, job), timeout=120, what="the job running")
        before = {e: _files(ckpt, e) for e in store.list_epochs()}
        began = time.monotonic()
        client = subprocess.Popen(
            [RIVERMARK, "savepoint", str(ckpt)],
            env=_env(tmp, 0),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # the random moment: anywhere in the savepoint's life (the command starting and
        # connecting, the barrier, the write, the answer), or after it was answered
        with contextlib.suppress(subprocess.TimeoutExpired):
            client.wait(timeout=120 if delay is None else delay)
        job.kill()
        took = time.monotonic() - began
        assert job.wait() == -9, "the job ended before it was killed"
        out, err = client.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
        job.communicate()  # reads the job's stderr to its end and closes the pipe
    return subprocess.CompletedProcess(client.args, client.returncode, out, err), before, took


def test_a_savepoint_the_job_is_killed_in_at_random_completes_or_is_reported_failed(
    tmp_path: Path,
) -> None:
    (tmp_path / "in.txt").write_text("".join(f"{v}\n" for v in range(LINES)))
    store = LocalDirectoryStore(tmp_path / "ckpt")
    cmd = [RIVERMARK, "run", f"{KILL_APP}:source", "-c", str(tmp_path / "ckpt"), "--ui", "0",
           "--every", "30s", "--keep", "2", "-q"]  # fmt: skip
    rng = random.Random(25)
    outcomes: list[str] = []
    answered = 0.0  # how long the first savepoint, not killed, took to be answered
    for round_ in range(6):
        delay = None if round_ == 0 else rng.uniform(0, answered)
        client, before, took = _kill_during_a_savepoint(tmp_path, cmd, delay)
        # the job's checkpoints are intact (or pruned), every one verifies (chains too)
        after = {e: store.load_chains(e)[0] for e in store.list_epochs()}
        assert all(_files(tmp_path / "ckpt", e) == f for e, f in before.items() if e in after)
        new = [e for e in after if e not in before]
        # whatever is new is a whole, self-contained savepoint
        assert all(after[e].savepoint and after[e].chains["counts"]["base"] == e for e in new)
        torn = [d for d in store.list_incomplete() if int(d.name) not in after]
        if client.returncode == 0:
            epoch = int(client.stdout.split()[-1])
            assert new == [epoch], (new, epoch)
            outcomes.append("completed")
            answered = answered or took
        else:
            # reported failed, in one line; the kill may have come after the write
            err = client.stderr.strip()
            assert client.returncode == 1 and len(err.splitlines()) == 1, err
            assert "Traceback" not in err and ("no job answers" in err or "stopped" in err), err
            outcomes.append("torn" if torn else "written, not answered" if new else "failed")
    assert outcomes[0] == "completed" and set(outcomes[1:]) - {"completed"}, outcomes
    # the last run reads the rest: every line exactly once, from the newest checkpoint
    res = subprocess.run(cmd, env=_env(tmp_path, 0), capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    counts: dict[int, int] = {}
    lines = []
    for v in range(LINES):
        counts[v % KEYS] = counts.get(v % KEYS, 0) + 1
        lines.append(f"{v % KEYS} {counts[v % KEYS]}\n")
    assert (tmp_path / "out.txt").read_text() == "".join(lines)
