"""Checkpointed Jobs with their work on a real LocalCluster of worker processes.

What the Dask guarantees mean, each tested against real processes:

* a checkpoint waits for the futures in flight, and the scattered state (the
  accumulate's future, the futures a partition holds) is in the checkpoint;
* a worker process SIGKILLed mid-run: the work is retried, the output exact;
* the scheduler SIGKILLed under a running job: the job stops with an error
  that says so, its last checkpoint intact (a rerun resumes from it exactly);
* the job process SIGKILLed at random (and at the protocol's fault points),
  with checkpoints in a directory or in Dask datasets: the output is
  byte-identical to an uncrashed run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from itertools import accumulate
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from distributed import Client

from rivermark import Job, Stream
from rivermark.checkpoint import JobFailedError, LocalDirectoryStore
from rivermark.checkpoint.state import codec
from rivermark.dask import DaskAccumulate, DaskConnectionError
from rivermark.dask.store import DaskDatasetStore
from rivermark.testing import run_in_thread, wait_for
from rivermark.testing.crash import run_uncrashed, run_with_crashes

# the workers cannot import this test module: ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.dask

APP = Path(__file__).with_name("dask_job_app.py")


def square_slowly(x: int) -> int:
    time.sleep(0.004)
    return x * x


def expected_lines(n: int) -> list[str]:
    """The app's output: running sums of squares (partition(3) then flatten keeps them all)."""
    return [str(v) for v in accumulate(x * x for x in range(n))][: n - n % 3]


def build(n: int, output: Path, client: Any = None) -> tuple[Stream, DaskAccumulate]:
    """The graph of ``dask_job_app.py``, in this process."""
    source = Stream.from_iterable(range(n), name="numbers")
    acc = (
        source.scatter(client=client)
        .map(square_slowly)
        .accumulate(lambda a, b: a + b, start=0, name="running-sum")
    )
    (
        acc.partition(3, name="triples")
        .gather(max_inflight=8)
        .flatten()
        .map(str)
        .sink_to_textfile(str(output), name="out")
    )
    return source, acc


# ---------------------------------------------------------------- the barrier
def test_every_checkpoint_holds_state_position_and_output_in_step(
    client: Client, tmp_path: Path
) -> None:
    n = 150
    out = tmp_path / "out.txt"
    source, _ = build(n, out)
    ckpt = tmp_path / "ckpt"
    Job(source, checkpoint=str(ckpt), every="20ms", keep=100_000).run()
    lines = expected_lines(n)
    assert out.read_text().splitlines() == lines

    store = LocalDirectoryStore(ckpt)
    mid_run = 0
    for epoch in store.list_epochs():
        m = store.verify(epoch)
        pos = m.positions["numbers"]
        written = out.read_bytes()[: m.sinks["out"]["length"]].decode().splitlines()
        acc = codec.loads(store.read_state(epoch, "running-sum"))
        triples = codec.loads(store.read_state(epoch, "triples"))
        held = [r.value for _, items in triples["buffers"] for r in items]
        # every record before the position went through the cluster and is in
        # the state: in the accumulate (a value, not a future) and either in
        # the output or in the partition waiting for its third record
        assert acc == {"state": sum(x * x for x in range(pos))}, epoch
        assert len(written) + len(held) == pos, epoch
        assert written == lines[: len(written)], epoch
        assert [int(v) for v in written] + held == [
            int(v) for v in accumulate(x * x for x in range(pos))
        ], epoch
        mid_run += 0 < pos < n
    assert mid_run >= 3, "no checkpoint was taken while records were in flight"


# ---------------------------------------------------------------- a worker dies
def test_worker_killed_under_a_job_does_not_change_output(client: Client, tmp_path: Path) -> None:
    n = 240
    out = tmp_path / "out.txt"
    source, acc = build(n, out)
    job = Job(source, checkpoint=str(tmp_path / "ckpt"), every="0.1s")
    t, raised = run_in_thread(job)
    pids = client.run(os.getpid)

    wait_for(lambda: out.exists() and len(out.read_bytes().splitlines()) >= 30, 60, "output")
    # the worker that holds the running sum: its loss forces a recomputation
    holders = client.who_has(acc.state).get(acc.state.key, ()) if hasattr(acc.state, "key") else ()
    victim_address = next(iter(holders), next(iter(pids)))
    victim = pids[victim_address]
    os.kill(victim, signal.SIGKILL)
    t.join(120)
    assert not t.is_alive(), "the job did not finish after a worker was killed"
    assert raised == []
    lines = out.read_text().splitlines()
    assert lines == expected_lines(n)
    client.wait_for_workers(2, timeout=180)  # the nanny restarts it; slow on a loaded machine
    assert victim not in client.run(os.getpid).values()


# ---------------------------------------------------------------- the scheduler dies
@pytest.fixture
def own_scheduler(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A scheduler and one worker in processes of their own (the test kills the scheduler)."""
    scheduler_file = tmp_path / "scheduler.json"
    common = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file)],
        **common,
    )  # fmt: skip
    worker = None
    try:
        wait_for(scheduler_file.exists, 60, "the scheduler")
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", "--no-nanny", "--nthreads", "1",
             "--no-dashboard", "--scheduler-file", str(scheduler_file)],
            **common,
        )  # fmt: skip
        yield scheduler, scheduler_file
    finally:
        for proc in (worker, scheduler):
            if proc is not None:
                proc.kill()
                proc.wait(timeout=30)


def test_lost_scheduler_stops_the_job_and_its_last_checkpoint_resumes_exactly(
    client: Client, own_scheduler: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    scheduler, scheduler_file = own_scheduler
    n = 300
    out = tmp_path / "out.txt"
    ckpt = tmp_path / "ckpt"
    own = Client(scheduler_file=str(scheduler_file), set_as_default=False, timeout=20)
    try:
        own.wait_for_workers(1, timeout=60)
        source, _ = build(n, out, client=own)
        job = Job(source, checkpoint=str(ckpt), every="0.1s")
        t, raised = run_in_thread(job)
        store = LocalDirectoryStore(ckpt)
        wait_for(lambda: len(store.list_epochs()) >= 3, 60, "three checkpoints")
        scheduler.kill()
        scheduler.wait(timeout=30)
        t.join(60)
        assert not t.is_alive(), "the job hung after its scheduler died"
    finally:
        # the scheduler is gone by design: closing its client may find the
        # connection reset (CommClosedError) or time out, both OSErrors
        with contextlib.suppress(OSError):
            own.close(timeout=10)

    (err,) = raised
    assert isinstance(err, JobFailedError), raised
    assert "lost the connection to the Dask scheduler" in str(err)
    assert "last complete checkpoint" in str(err) and "is intact" in str(err)
    assert isinstance(err.__cause__, DaskConnectionError)
    last = store.list_epochs()[-1]
    m = store.verify(last)
    assert 0 < m.positions["numbers"] < n, "the scheduler died before or after the data"

    # the same graph on a healthy cluster resumes from that checkpoint
    source, _ = build(n, out)
    job = Job(source, checkpoint=str(ckpt), every="0.1s")
    job.run()
    assert job.restored_epoch == last
    assert out.read_text().splitlines() == expected_lines(n)


# ---------------------------------------------------------------- the job process dies
N_APP = 300


def _app(address: str, ckpt: Path, out: Path, *prefix: str) -> list[str]:
    return [sys.executable, str(APP), address, str(ckpt), str(out), str(N_APP), *prefix]


@pytest.fixture(scope="module")
def reference(client: Client, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    d = tmp_path_factory.mktemp("reference")
    run_uncrashed(_app(client.scheduler.address, d / "ckpt", d / "out.txt"), timeout=180)
    data = (d / "out.txt").read_bytes()
    assert data.decode().splitlines() == expected_lines(N_APP)
    return data


class Progressed:
    """``ready`` for :func:`run_with_crashes`: true once this run checkpointed ``step`` records.

    Killing a random 0-0.1 s after that (the checkpoint interval) puts every
    kill at a random point between two checkpoints, after real progress,
    however fast the machine is.
    """

    def __init__(self, position: Callable[[], int], step: int = 12) -> None:
        self.position = position
        self.step = step
        self.baseline: dict[int, int] = {}
        self.at_kill: list[int] = []

    def __call__(self, pid: int) -> bool:
        try:
            pos = self.position()
        except (OSError, KeyError, ValueError):
            return False  # a checkpoint pruned while being read
        base = self.baseline.setdefault(pid, pos)
        return pos >= base + self.step

    def killed(self, _: int) -> None:
        self.at_kill.append(self.position())


def _dir_position(ckpt: Path) -> Callable[[], int]:
    def position() -> int:
        store = LocalDirectoryStore(ckpt) if (ckpt / "checkpoints").exists() else None
        epochs = store.list_epochs() if store else []
        return store.read_manifest(epochs[-1]).positions["numbers"] if store and epochs else 0

    return position


@pytest.mark.crash
def test_job_killed_at_random_gives_identical_output(
    client: Client, reference: bytes, tmp_path: Path
) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out.txt"
    progressed = Progressed(_dir_position(ckpt))
    report = run_with_crashes(
        _app(client.scheduler.address, ckpt, out),
        kills=6,
        min_delay=0.0,
        max_delay=0.1,
        timeout=300,
        seed=11,
        on_kill=progressed.killed,
        ready=progressed,
    )
    assert report.completed and report.kills == 6
    # killed at six different points of the input
    assert len(set(progressed.at_kill)) == 6 and max(progressed.at_kill) < N_APP
    assert out.read_bytes() == reference


@pytest.mark.crash
def test_job_on_dask_dataset_store_killed_gives_identical_output(
    client: Client, reference: bytes, tmp_path: Path
) -> None:
    prefix = f"crash-{os.getpid()}-{time.monotonic_ns()}"
    store = DaskDatasetStore(client, prefix=prefix)
    out = tmp_path / "out.txt"

    def position() -> int:
        epochs = store.list_epochs()
        return store.read_manifest(epochs[-1]).positions["numbers"] if epochs else 0

    progressed = Progressed(position)
    report = run_with_crashes(
        _app(client.scheduler.address, tmp_path / "unused", out, prefix),
        kills=5,
        min_delay=0.0,
        max_delay=0.1,
        timeout=300,
        seed=5,
        on_kill=progressed.killed,
        ready=progressed,
    )
    assert report.completed and report.kills == 5
    assert len(set(progressed.at_kill)) == 5 and max(progressed.at_kill) < N_APP
    assert out.read_bytes() == reference
    # the state and the position are published together: the last checkpoint
    # holds the final sum and the end of the input
    last = store.read_manifest(store.list_epochs()[-1])
    assert last.positions["numbers"] == N_APP
    assert store.latest_states()["running-sum"] == {"state": sum(x * x for x in range(N_APP))}
    assert len(store.list_epochs()) <= 3  # keep=3


@pytest.mark.crash
@pytest.mark.parametrize("point", ["after-state-files:4", "after-manifest:4"])
def test_dask_dataset_store_torn_at_a_fault_point_gives_identical_output(
    client: Client, reference: bytes, tmp_path: Path, point: str
) -> None:
    # ":4": the fourth checkpoint of the first run (the first is the start
    # checkpoint), mid-data: state datasets published without a manifest, or
    # a manifest published and the run killed before it went on
    prefix = f"fault-{os.getpid()}-{time.monotonic_ns()}"
    out = tmp_path / "out.txt"
    report = run_with_crashes(
        _app(client.scheduler.address, tmp_path / "unused", out, prefix),
        kills=0,
        fault_points=[point],
        timeout=180,
    )
    assert report.fault_kills == {point: 1}
    assert out.read_bytes() == reference
    store = DaskDatasetStore(client, prefix=prefix)
    assert store.list_incomplete() == [], "a torn checkpoint was left behind"
