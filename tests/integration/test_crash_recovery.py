"""Kill -9 the acceptance pipeline many times; its output must equal an uncrashed run.

Every test runs four times: the acceptance pipeline with checkpoints in a
local directory and in an S3 bucket on a real S3 API server (moto, started
by the session), ``apps/keyed_app.py`` (a keyed count in a
``KeyedState``, ``unique``, ``frequencies``, ``partition(key=...)`` and two
running DataFrame groupby aggregations, all checkpointed incrementally:
deltas, bases, compaction every 3 checkpoints) in a local directory, and
the same app with its keyed state in RocksDB (``--state rocksdb``) in a
local directory (every restart on the same machine: the local state
directory is kept).  Kills during RocksDB's compactions and uploads run on
a directory and in S3 (there every restart on a fresh machine: the local
state directory is deleted at each kill).  Random kills also run with
``counts`` over 12,000 keys in scattered order (``RIVERMARK_APP_KEYS``),
more than the mapping's cache holds, on a directory and in S3.  The
RocksDB runs are compared with the in-memory app's uncrashed output.  At the
fault points the keyed app, in memory or in RocksDB, reads the first 20,000
lines (the third checkpoint, where it is killed, comes within 4,000).
"""

from __future__ import annotations

import json
import os
import shutil
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
#: the RocksDB cases read the first 20,000 lines: the same paths, a fifth of the time
N_ROCKS = 20_000
#: distinct scattered keys of ``counts`` in the scattered-key cases: more than the
#: mapping's cache holds with a 16 MiB state_cache (8,192), so keys leave it and are
#: read back from RocksDB
SCATTERED = 12_000


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("crash")
    with open(d / "in.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({"v": i}) + "\n")
    with open(d / f"in-{N_ROCKS}.jsonl", "w") as f:
        for i in range(N_ROCKS):
            f.write(json.dumps({"v": i}) + "\n")
    return d


class Where:
    """``where(name)``: a checkpoint location for the app under test.

    ``rocks`` runs the app with its keyed state in RocksDB, in a local state
    directory per test; with ``fresh`` that directory is deleted at every
    kill (each restart restores on a fresh machine).
    """

    def __init__(
        self,
        app: Path,
        at: Callable[[str], str],
        tag: str,
        workdir: Path | None = None,
        fresh: bool = False,
        keys: int = 0,
    ) -> None:
        self.app, self.at, self.tag, self.fresh = app, at, tag, fresh
        #: scattered keys for ``counts`` (``RIVERMARK_APP_KEYS``; 0: ``v % 997``)
        self.keys = keys
        self.rocks = workdir is not None
        self.s3 = "://" in at("x")
        self.workdir = workdir
        #: the records of the input (the RocksDB cases read a shorter one)
        self.n = N_ROCKS if self.rocks else N

    def __call__(self, name: str) -> str:
        return self.at(f"{self.tag}-{name}" if self.app == KEYED_APP else name)

    def env(self, env: dict[str, str], name: str) -> dict[str, str]:
        """``env`` with the state backend of this case (``name``: the test's location)."""
        if self.rocks:
            assert self.workdir is not None
            env["RIVERMARK_APP_INPUT"] = str(self.workdir / f"in-{N_ROCKS}.jsonl")
            env["RIVERMARK_STATE"] = "rocksdb"
            env["RIVERMARK_STATE_DIR"] = str(self.state_dir(name))
            env["RIVERMARK_STATE_CACHE"] = "16MiB"  # smaller than the state: reads go to disk
        if self.keys:
            env["RIVERMARK_APP_KEYS"] = str(self.keys)
        return env

    def state_dir(self, name: str) -> Path:
        assert self.workdir is not None
        return self.workdir / f"state-{self.tag}-{name}"

    def on_kill(self, name: str) -> None:
        """After a kill: a fresh machine has no local state directory."""
        if self.fresh:
            shutil.rmtree(self.state_dir(name), ignore_errors=True)


# RocksDB on S3 (every restart a fresh machine: ``rocks-s3``) runs random kills
# and the kills during compaction and upload below; every fault point there
# would add minutes to the test command for paths the directory cases take
@pytest.fixture(params=["dir", "s3", "keyed-dir", "rocks-dir"])
def where(request: pytest.FixtureRequest, workdir: Path) -> Where:
    """The app and where its checkpoints live: a directory or an S3 URL (bucket per test)."""
    if request.param == "dir":
        return Where(APP, lambda name: str(workdir / name), "dir")
    if request.param == "keyed-dir":
        return Where(KEYED_APP, lambda name: str(workdir / name), "keyed")
    if request.param == "rocks-dir":
        return Where(KEYED_APP, lambda name: str(workdir / name), "rocks", workdir)
    if request.param == "rocks-scattered-dir":
        at = lambda name: str(workdir / name)  # noqa: E731
        return Where(KEYED_APP, at, "scattered", workdir, keys=SCATTERED)
    bucket = request.getfixturevalue("bucket")
    if request.param == "rocks-s3":
        at = lambda name: f"s3://{bucket}/jobs/{name}"  # noqa: E731
        return Where(KEYED_APP, at, "rocks-s3", workdir, fresh=True)
    if request.param == "rocks-scattered-s3":
        at = lambda name: f"s3://{bucket}/jobs/{name}"  # noqa: E731
        return Where(KEYED_APP, at, "scattered-s3", workdir, fresh=True, keys=SCATTERED)
    return Where(APP, lambda name: f"s3://{bucket}/jobs/{name}", "s3")


def _store(ckpt: str) -> Store | None:
    try:
        return open_store(ckpt, create=False)
    except CheckpointNotFoundError:
        return None


def _store_poller(ckpt: str) -> Callable[[], Store | None]:
    """``_store(ckpt)`` for a loop that polls it: the store is opened once it exists.

    An S3 store's client takes the CPU of a good many requests to make, CPU
    that the job under test needs on a small machine; it reads afresh each time.
    """
    opened: list[Store] = []

    def store() -> Store | None:
        if not opened and (found := _store(ckpt)) is not None:
            opened.append(found)
        return opened[0] if opened else None

    return store


def _position_poller(ckpt: str) -> Callable[[], int | None]:
    """The input line the newest checkpoint of ``ckpt`` holds (None before the first).

    The ``progress`` of :func:`run_with_crashes`: its deadline counts from the
    last checkpoint that got further, so a loaded machine that is slow but
    still moving is waited for.
    """
    polled = _store_poller(ckpt)
    #: epoch -> its position: a manifest does not change, so each is read once (on S3
    #: a poll is then one listing, not a listing and two more requests)
    seen: dict[int, int] = {}

    def newest_position() -> int | None:
        store = polled()
        epochs = store.list_epochs() if store else []
        if not store or not epochs:
            return None
        if epochs[-1] not in seen:
            try:
                seen[epochs[-1]] = int(store.read_manifest(epochs[-1]).positions["lines"])
            except (CheckpointError, OSError):  # pruned by the running job meanwhile
                return None
        return seen[epochs[-1]]

    return newest_position


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
        # the harness polls at pauses of up to 50 ms; each poll of an S3 store is a
        # few requests the S3 server (moto, on the same cores) answers beside the
        # job's own: a slower poll leaves them to the job, at most 0.2 s later
        time.sleep(0.2)
        lease = _read_lease(ckpt)
        return lease is not None and lease["holder"]["pid"] == pid
    time.sleep(0.01)  # nor spin beside the job (2 ms polls of a few files) on a small machine
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


def _ref_ckpt(workdir: Path, app: Path, n: int = N, keys: int = 0) -> str:
    scattered = f"-keys{keys}" if keys else ""
    return str(workdir / f"ref-ckpt-{app.stem}{'' if n == N else f'-{n}'}{scattered}")


def _reference_of(workdir: Path, app: Path, n: int = N, keys: int = 0) -> bytes:
    """The app's output from a run without crashes, in memory (once per app and input)."""
    key = workdir / f"{app.stem}-{n}-{keys}"
    if key not in _references:
        out = workdir / f"reference-{app.stem}-{n}-{keys}.txt"
        env = _env(workdir, out)
        if n != N:
            env["RIVERMARK_APP_INPUT"] = str(workdir / f"in-{n}.jsonl")
        if keys:
            env["RIVERMARK_APP_KEYS"] = str(keys)
        run_uncrashed(_cmd(_ref_ckpt(workdir, app, n, keys), app), env=env)
        data = out.read_bytes()
        assert data.count(b"\n") > n // 2
        _references[key] = data
    return _references[key]


@pytest.fixture
def reference(workdir: Path, where: Where) -> bytes:
    return _reference_of(workdir, where.app, where.n, where.keys)


def test_random_kills_give_identical_output(workdir: Path, reference: bytes, where: Where) -> None:
    # twelve random kills (the run asserts that they land all over the input),
    # on top of a kill at every fault point (the tests below), in every store
    _random_kills(workdir, reference, where, 12)


@pytest.mark.parametrize("where", ["rocks-s3"], indirect=True)
def test_random_kills_of_rocksdb_state_on_s3_give_identical_output(
    workdir: Path, reference: bytes, where: Where
) -> None:
    # each restart on a fresh machine: every file fetched from S3 and checked
    _random_kills(workdir, reference, where, 6)


@pytest.mark.parametrize("where", ["rocks-scattered-dir", "rocks-scattered-s3"], indirect=True)
def test_random_kills_of_rocksdb_state_with_scattered_keys_give_exact_counts(
    workdir: Path, reference: bytes, where: Where
) -> None:
    # keys in scattered order, more than the mapping's cache holds: keys leave the
    # cache a few at a time between barriers and are read back from RocksDB; on S3
    # every restart on a fresh machine (the plain RocksDB cases above take the
    # kills at every fault point; these few cover the scattered shape)
    _random_kills(workdir, reference, where, 4 if where.s3 else 6)


def _random_kills(workdir: Path, reference: bytes, where: Where, kills: int) -> None:
    ckpt = where("random-ckpt")
    out = _out(workdir, "random", ckpt)
    env = where.env(_env(workdir, out), "random")
    env["RIVERMARK_APP_WORK"] = "120"  # same output, ~16 s of processing: killed mid-data
    # ... in the runs that are killed; the run after the last kill goes at full speed
    env["RIVERMARK_APP_WORK_WHILE_KILLED"] = "1"
    progress: list[int] = []
    newest_position = _position_poller(ckpt)

    def record_progress(n: int) -> None:
        where.on_kill("random")
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
            # the first kills wait for a first checkpoint too (the RocksDB case
            # sets up its databases before it: on a loaded machine, longer than
            # a kill's delay); kills before any checkpoint are the fault points ":1"
            return newest_position() is not None
        position = newest_position()
        return position is not None and position > progress[-1]

    report = run_with_crashes(
        # a checkpoint per 1,000 records as well, so that the kills find
        # checkpoints all over the input however fast the pipeline runs
        [*_cmd(ckpt, where.app), "--every-batches", "1000"],
        env=env,
        kills=kills,
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
    # every kill landed: a run that reaches its end while kills are owed holds
    # there (before its final checkpoint) until it is killed
    assert report.kills == kills, report.summary()
    # the kills landed at many different points of the input, not all at the start
    assert len(set(progress)) >= min(5, kills // 2), progress
    assert sum(0 < p < where.n for p in progress) >= 3, progress
    assert out.read_bytes() == reference
    # the records counted carry over every restore: the final checkpoint counts
    # what one uncrashed run counted, node by node, though records were replayed
    assert _final_counts(ckpt) == _final_counts(_ref_ckpt(workdir, where.app, where.n, where.keys))
    final = _store(ckpt)
    # keep=3; a keyed chain also keeps the links its newest checkpoints need
    # (at most one compaction interval, RIVERMARK_COMPACT_EVERY=3, more)
    assert final is not None and len(final.list_epochs()) <= (
        3 if where.app == APP or where.rocks else 6
    )
    if where.rocks:
        _check_rocks_store(final)


def _check_rocks_store(store: Store) -> None:
    """Every checkpoint left verifies, names its files, and no other file is kept."""
    needed: set[str] = set()
    for e in store.list_epochs():
        m = store.verify(e)
        assert set(m.files) == {"counts", "firsts", "freq", "groups", "gsum", "gvar"}
        needed |= set(m.shared_files())
    assert set(store.list_shared()) == needed


@pytest.mark.parametrize("point", [*FAULT_POINTS, "after-state-files:1", "after-manifest:1"])
def test_fault_points_give_identical_output(workdir: Path, point: str, where: Where) -> None:
    # ":3" = the third checkpoint of the run (the first is the start checkpoint), i.e. mid-data;
    # ":1" = during the start checkpoint, before any record
    name = point if ":" in point else f"{point}:3"
    tag = name.replace(":", "-")
    ckpt = where(f"fault-{tag}-ckpt")
    out = _out(workdir, f"fault-{tag}", ckpt)
    # a checkpoint per 2,000 records as well: the third one comes mid-data however
    # fast the machine runs the pipeline; on S3 per 10,000 (the third still comes
    # by the 20,000th of 100,000 records): a checkpoint there takes a few hundred
    # milliseconds of requests, and 50 of them would take most of the test's time
    batches = "10000" if where.s3 else "2000"
    env = where.env(_env(workdir, out), f"fault-{tag}")
    n = where.n
    if where.app == KEYED_APP:
        # the in-memory keyed app on the RocksDB cases' input too: the third checkpoint
        # comes by the 4,000th of its 20,000 records, a compaction every 3 after it
        n = N_ROCKS
        env["RIVERMARK_APP_INPUT"] = str(workdir / f"in-{N_ROCKS}.jsonl")
    report = run_with_crashes(
        [*_cmd(ckpt, where.app), "--every-batches", batches],
        env=env,
        kills=0,
        fault_points=[name],
        # from the newest checkpoint that got further: a loaded machine takes longer
        timeout=60 if not where.rocks else 120,
        progress=_position_poller(ckpt),
        on_kill=lambda _: where.on_kill(f"fault-{tag}"),
    )
    assert report.fault_kills == {name: 1}
    assert out.read_bytes() == _reference_of(workdir, where.app, n)
    assert _final_counts(ckpt) == _final_counts(_ref_ckpt(workdir, where.app, n))
    if where.rocks:
        final = _store(ckpt)
        assert final is not None
        _check_rocks_store(final)


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
        progress=_position_poller(ckpt),
    )
    assert report.fault_kills == {f"compaction:{nth}": 1}
    assert out.read_bytes() == keyed_reference
    store = open_store(ckpt, create=False)
    last = store.verify(store.list_epochs()[-1])
    assert set(last.chains) == {"counts", "firsts", "freq", "groups", "gsum", "gvar"}


@pytest.mark.parametrize(
    ("store", "point"),
    [
        ("dir", "rocks-compaction:2"),
        ("dir", "rocks-upload:5"),
        ("s3", "rocks-compaction:1"),
        ("s3", "rocks-upload:5"),
    ],
)
def test_rocksdb_kills_during_compaction_and_upload_give_identical_output(
    request: pytest.FixtureRequest, workdir: Path, store: str, point: str
) -> None:
    """The RocksDB app killed while RocksDB compacts its files, and while they are uploaded."""
    tag = f"rocks-{store}-{point.replace(':', '-')}"
    if store == "dir":
        ckpt = str(workdir / f"{tag}-ckpt")
    else:
        ckpt = f"s3://{request.getfixturevalue('bucket')}/jobs/{tag}-ckpt"
    where = Where(KEYED_APP, lambda name: name, tag, workdir, fresh=store == "s3")
    out = _out(workdir, tag, ckpt)
    env = where.env(_env(workdir, out), tag)
    env["RIVERMARK_APP_WORK"] = "30"  # same output; long enough for several compactions
    report = run_with_crashes(
        [*_cmd(ckpt, KEYED_APP), "--every-batches", "2000"],
        env=env,
        kills=0,
        fault_points=[point],
        timeout=120,
        progress=_position_poller(ckpt),
        on_kill=lambda _: where.on_kill(tag),
    )
    assert report.fault_kills == {point: 1}
    assert out.read_bytes() == _reference_of(workdir, KEYED_APP, N_ROCKS)
    final = _store(ckpt)
    assert final is not None
    _check_rocks_store(final)


@pytest.fixture
def keyed_reference(workdir: Path) -> bytes:
    return _reference_of(workdir, KEYED_APP)


# on S3 too for the in-memory app; the RocksDB case on S3 stops as on a directory
_STOPS = ["dir", "s3", "keyed-dir", "rocks-dir"]


@pytest.mark.parametrize("where", _STOPS, indirect=True)
def test_sigterm_stops_gracefully_and_resumes(
    workdir: Path, reference: bytes, where: Where
) -> None:
    ckpt = where("term-ckpt")
    out = _out(workdir, "term", ckpt)
    env = where.env(_env(workdir, out), "term")
    # slow records: the job is still running when the signal comes
    slow = {**env, "RIVERMARK_APP_WORK": "2000"}
    proc = subprocess.Popen(_cmd(ckpt, where.app), env=slow, stderr=subprocess.PIPE)

    polled = _store_poller(ckpt)

    def two_checkpoints() -> Store | None:
        store = polled()
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


@pytest.mark.parametrize("where", _STOPS, indirect=True)
def test_second_job_on_same_directory_is_refused(workdir: Path, where: Where) -> None:
    ckpt = where("locked-ckpt")
    env = where.env(_env(workdir, _out(workdir, "locked", ckpt)), "locked")
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
