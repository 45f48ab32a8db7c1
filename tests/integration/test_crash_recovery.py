"""Kill -9 the acceptance pipeline many times; its output must equal an uncrashed run.

Every test runs three times: the acceptance pipeline with checkpoints in a
local directory and in an S3 bucket on a real S3 API server (moto, started
by the session), and ``apps/keyed_app.py`` (a keyed count in a
``KeyedState``, ``unique``, ``frequencies``, ``partition(key=...)`` and two
running DataFrame groupby aggregations, all checkpointed incrementally:
deltas, bases, compaction every 3 checkpoints) in a local directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark.checkpoint import CheckpointError, CheckpointNotFoundError, Store, open_store
from rivermark.testing import wait_for, wait_value
from rivermark.testing.crash import run_uncrashed, run_with_crashes
from rivermark.testing.faults import FAULT_POINTS

pytestmark = pytest.mark.crash

APP = Path(__file__).parent / "apps" / "pipeline_app.py"
KEYED_APP = Path(__file__).parent / "apps" / "keyed_app.py"
N = 100_000


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("crash")
    with open(d / "in.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({"v": i}) + "\n")
    return d


class Where:
    """``where(name)``: a checkpoint location for the app under test."""

    def __init__(self, app: Path, at: Callable[[str], str], tag: str) -> None:
        self.app, self.at, self.tag = app, at, tag

    def __call__(self, name: str) -> str:
        return self.at(f"{self.tag}-{name}" if self.app == KEYED_APP else name)


@pytest.fixture(params=["dir", "s3", "keyed-dir"])
def where(request: pytest.FixtureRequest, workdir: Path) -> Where:
    """The app and where its checkpoints live: a directory or an S3 URL (bucket per test)."""
    if request.param == "dir":
        return Where(APP, lambda name: str(workdir / name), "dir")
    if request.param == "keyed-dir":
        return Where(KEYED_APP, lambda name: str(workdir / name), "keyed")
    bucket = request.getfixturevalue("bucket")
    return Where(APP, lambda name: f"s3://{bucket}/jobs/{name}", "s3")


def _store(ckpt: str) -> Store | None:
    try:
        return open_store(ckpt, create=False)
    except CheckpointNotFoundError:
        return None


def _out(workdir: Path, name: str, ckpt: str) -> Path:
    # named after the checkpoint location too: one output file per app and store
    return workdir / f"{name}-{Path(ckpt).name}-{'s3' if '://' in ckpt else 'dir'}.txt"


def _cmd(ckpt: str | Path, app: Path = APP) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{app}:source",
        "--checkpoint", str(ckpt), "--every", "0.2s", "--keep", "3",
    ]  # fmt: skip


def _holds_lock(ckpt: str, pid: int) -> bool:
    if "://" in ckpt:
        time.sleep(0.05)  # the harness polls every 2 ms: spare the S3 server the job uses
        lease = _read_lease(ckpt)
        return lease is not None and lease["holder"]["pid"] == pid
    try:
        return f"pid={pid} " in (Path(ckpt) / "LOCK").read_text()
    except OSError:
        return False


def _read_lease(url: str) -> dict[str, Any] | None:
    import fsspec

    fs, root = fsspec.url_to_fs(url, use_listings_cache=False)
    try:
        return dict(json.loads(fs.cat_file(f"{root}/LEASE")))
    except FileNotFoundError:
        return None


def _final_counts(ckpt: str) -> dict[str, list[int]]:
    """The records in and out per node that the newest checkpoint of ``ckpt`` holds."""
    store = open_store(ckpt, create=False)
    counts = store.read_manifest(store.list_epochs()[-1]).counts
    assert counts, f"the newest checkpoint in {ckpt} holds no counts"
    return counts


def _env(workdir: Path, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["RIVERMARK_APP_INPUT"] = str(workdir / "in.jsonl")
    env["RIVERMARK_APP_OUTPUT"] = str(out)
    env["RIVERMARK_COMPACT_EVERY"] = "3"  # keyed state: a compaction every few checkpoints
    return env


_references: dict[Path, bytes] = {}


def _reference_of(workdir: Path, app: Path) -> bytes:
    """The app's output from a run without crashes (once per app)."""
    if app not in _references:
        out = workdir / f"reference-{app.stem}.txt"
        run_uncrashed(_cmd(workdir / f"ref-ckpt-{app.stem}", app), env=_env(workdir, out))
        data = out.read_bytes()
        assert data.count(b"\n") > N // 2
        _references[app] = data
    return _references[app]


@pytest.fixture
def reference(workdir: Path, where: Where) -> bytes:
    return _reference_of(workdir, where.app)


def test_random_kills_give_identical_output(workdir: Path, reference: bytes, where: Where) -> None:
    ckpt = where("random-ckpt")
    out = _out(workdir, "random", ckpt)
    env = _env(workdir, out)
    env["RIVERMARK_APP_WORK"] = "120"  # same output, ~16 s of processing: killed mid-data
    progress: list[int] = []

    def newest_position() -> int | None:
        store = _store(ckpt)
        epochs = store.list_epochs() if store else []
        if not store or not epochs:
            return None
        try:
            return int(store.read_manifest(epochs[-1]).positions["lines"])
        except (CheckpointError, OSError):  # pruned by the running job meanwhile
            return None

    def record_progress(n: int) -> None:
        position = newest_position()
        if position is not None:
            progress.append(position)

    def ready(pid: int) -> bool:
        # the restarted job holds the lock and has checkpointed past where the last
        # kill found it: a restart that recovers slowly (a loaded machine, a long
        # delta chain) is not killed again before it got anywhere
        if not _holds_lock(ckpt, pid):
            return False
        if not progress:
            return True
        position = newest_position()
        return position is not None and position > progress[-1]

    report = run_with_crashes(
        # a checkpoint per 1,000 records as well, so that the kills find
        # checkpoints all over the input however fast the pipeline runs
        [*_cmd(ckpt, where.app), "--every-batches", "1000"],
        env=env,
        kills=20,
        min_delay=0.05,
        # a restart on S3 spends longer in recovery (requests to moto) before it
        # processes records: give it time to make progress between kills
        max_delay=0.6 if "://" not in ckpt else 1.5,
        # the deadline follows the job's checkpoints: it fails when no new checkpoint
        # position was seen for this long, however long a loaded machine takes in all
        timeout=150 if "://" not in ckpt else 400,  # moto answers slowly on a busy machine
        seed=7,
        on_kill=record_progress,
        ready=ready,
        progress=newest_position,
    )
    assert report.completed
    # kills come at random times: a fast machine may finish the input before
    # all 20, so the test asks for at least half of them, spread over the input
    assert report.kills >= 10, report
    # the kills landed at many different points of the input, not all at the start
    # (a kill may also come after the final checkpoint, while the job exits)
    assert len(set(progress)) >= 5, progress
    assert sum(0 < p < N for p in progress) >= 3, progress
    assert out.read_bytes() == reference
    # the records counted carry over every restore: the final checkpoint counts
    # what one uncrashed run counted, node by node, though records were replayed
    assert _final_counts(ckpt) == _final_counts(str(workdir / f"ref-ckpt-{where.app.stem}"))
    final = _store(ckpt)
    # keep=3; a keyed chain also keeps the links its newest checkpoints need
    # (at most one compaction interval, RIVERMARK_COMPACT_EVERY=3, more)
    assert final is not None and len(final.list_epochs()) <= (3 if where.app == APP else 6)


@pytest.mark.parametrize("point", [*FAULT_POINTS, "after-state-files:1", "after-manifest:1"])
def test_fault_points_give_identical_output(
    workdir: Path, reference: bytes, point: str, where: Where
) -> None:
    # ":3" = the third checkpoint of the run (the first is the start checkpoint), i.e. mid-data;
    # ":1" = during the start checkpoint, before any record
    name = point if ":" in point else f"{point}:3"
    tag = name.replace(":", "-")
    ckpt = where(f"fault-{tag}-ckpt")
    out = _out(workdir, f"fault-{tag}", ckpt)
    report = run_with_crashes(
        # a checkpoint per 2,000 records as well: the third one comes mid-data
        # however fast the machine runs the pipeline
        [*_cmd(ckpt, where.app), "--every-batches", "2000"],
        env=_env(workdir, out),
        kills=0,
        fault_points=[name],
        timeout=60,
    )
    assert report.fault_kills == {name: 1}
    assert out.read_bytes() == reference
    assert _final_counts(ckpt) == _final_counts(str(workdir / f"ref-ckpt-{where.app.stem}"))


@pytest.mark.parametrize("nth", [1, 2])
def test_kills_during_compaction_give_identical_output(
    workdir: Path, nth: int, keyed_reference: bytes
) -> None:
    """A keyed job killed while it compacts its delta chain into a new base."""
    ckpt = str(workdir / f"keyed-compaction-{nth}-ckpt")
    out = _out(workdir, "compaction", ckpt)
    env = _env(workdir, out)
    env["RIVERMARK_APP_WORK"] = "30"  # same output; long enough for several compactions
    report = run_with_crashes(
        # a checkpoint per 2,000 records as well: many compactions however
        # fast the machine runs the pipeline
        [*_cmd(ckpt, KEYED_APP), "--every-batches", "2000"],
        env=env,
        kills=0,
        fault_points=[f"compaction:{nth}"],
        timeout=60,
    )
    assert report.fault_kills == {f"compaction:{nth}": 1}
    assert out.read_bytes() == keyed_reference
    store = open_store(ckpt, create=False)
    last = store.verify(store.list_epochs()[-1])
    assert set(last.chains) == {"counts", "firsts", "freq", "groups", "gsum", "gvar"}


@pytest.fixture
def keyed_reference(workdir: Path) -> bytes:
    return _reference_of(workdir, KEYED_APP)


def test_sigterm_stops_gracefully_and_resumes(
    workdir: Path, reference: bytes, where: Where
) -> None:
    ckpt = where("term-ckpt")
    out = _out(workdir, "term", ckpt)
    env = _env(workdir, out)
    # slow records: the job is still running when the signal comes
    slow = {**env, "RIVERMARK_APP_WORK": "2000"}
    proc = subprocess.Popen(_cmd(ckpt, where.app), env=slow, stderr=subprocess.PIPE)

    def two_checkpoints() -> Store | None:
        store = _store(ckpt)
        return store if store is not None and len(store.list_epochs()) >= 2 else None

    # a wait on a condition; generous under load
    store = wait_value(two_checkpoints, 120, "two checkpoints", interval=0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert store is not None
    last = store.read_manifest(store.list_epochs()[-1])
    # the final checkpoint matches the output written so far
    assert last.sinks and next(iter(last.sinks.values()))["length"] == out.stat().st_size
    run_uncrashed(_cmd(ckpt, where.app), env=env)
    assert out.read_bytes() == reference


def test_second_job_on_same_directory_is_refused(workdir: Path, where: Where) -> None:
    ckpt = where("locked-ckpt")
    env = _env(workdir, _out(workdir, "locked", ckpt))
    env["RIVERMARK_APP_WORK"] = "100000"  # the first job is still running when the second starts
    first = subprocess.Popen(_cmd(ckpt, where.app), env=env, stderr=subprocess.PIPE)

    def locked() -> bool:
        assert first.poll() is None
        return _holds_lock(ckpt, first.pid)

    try:
        wait_for(locked, 120, "the first job's lock", interval=0.01)
        second = subprocess.run(_cmd(ckpt, where.app), env=env, capture_output=True, timeout=30)
        assert second.returncode == 2
        assert f"pid={first.pid}" in second.stderr.decode()
    finally:
        first.kill()
        first.communicate()
