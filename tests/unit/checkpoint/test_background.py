"""Background checkpoint writes: the sources resume at the barrier, the checkpoint
counts once its manifest is durable, one checkpoint in flight, failures stop all."""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointWriteError, Job, LocalDirectoryStore
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.core.node import Stream as Node
from rivermark.testing import wait_for


class GatedStore(LocalDirectoryStore):
    """A real directory store whose writes of epoch >= ``from_epoch`` wait on a gate."""

    def __init__(self, path: Path, from_epoch: int = 2, fail: bool = False) -> None:
        super().__init__(path)
        self.from_epoch = from_epoch
        self.fail = fail
        self.gate = threading.Event()
        self.entered: list[int] = []

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        if manifest.epoch >= self.from_epoch:
            self.entered.append(manifest.epoch)
            if self.fail:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.gate.wait(60)
        super().write_checkpoint(manifest, states)


def add(acc: int, x: int) -> int:
    return acc + x


def running_sums(n: int) -> str:
    out, acc = [], 0
    for x in range(n):
        acc += x
        out.append(f"{acc}\n")
    return "".join(out)


def build(n: int, out: Path) -> Stream:
    source = Stream.from_iterable(range(n), name="numbers")
    source.accumulate(add, start=0, name="sum").sink_to_textfile(str(out))
    return source


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    return t, box


def test_sources_run_while_the_write_is_in_flight_and_it_counts_only_when_durable(
    tmp_path: Path,
) -> None:
    store = GatedStore(tmp_path / "c")
    source = build(10**8, tmp_path / "out.txt")
    job = Job(source, checkpoint=store, every=None)
    assert job.background
    runner, _ = _in_thread(job.run)
    try:
        wait_for(lambda: job.epoch == 1 and source.started)
        first, got = _in_thread(job.checkpoint)
        wait_for(lambda: store.entered == [2])
        emitted = source.emitted
        # the sources were resumed at the barrier: records flow during the write
        wait_for(lambda: source.emitted > emitted + 1000)
        assert job.epoch == 1 and store.list_epochs() == [1]
        # a second trigger waits for the one in flight (backpressure)
        second, got2 = _in_thread(job.checkpoint)
        wait_for(lambda: job.checkpoint_waits == 1)
        assert store.entered == [2] and store.list_epochs() == [1]
        store.gate.set()
        first.join(60)
        second.join(60)
        assert got == [2] and got2 == [3]
        assert store.list_epochs()[-2:] == [2, 3]
        m2, m3 = store.read_manifest(2), store.read_manifest(3)
        # epoch 2's sink handle was fixed at its barrier, before the records after it
        assert m2.positions["numbers"] < m3.positions["numbers"]
        assert m2.sinks[job.id_of(job.sinks[0])]["length"] < (tmp_path / "out.txt").stat().st_size
        assert job.metrics.read().checkpoint_waits == 1
    finally:
        store.gate.set()
        job.stop()
        runner.join(60)
    assert not runner.is_alive()


def test_a_failed_background_write_stops_everything_and_a_rerun_loses_nothing(
    tmp_path: Path,
) -> None:
    n = 300_000
    out = tmp_path / "out.txt"
    store = GatedStore(tmp_path / "c", from_epoch=3, fail=True)
    source = build(n, out)
    job = Job(source, checkpoint=store, every="20ms")
    with pytest.raises(CheckpointWriteError, match="checkpoint 3 could not be written"):
        job.run()
    assert store.entered == [3]
    assert source.finished or not source.started
    assert store.list_epochs() == [1, 2] and store.list_incomplete() == []
    # the sink's file holds records after the barrier of 3; the rerun truncates them
    job2 = Job(build(n, out), checkpoint=tmp_path / "c", every="50ms")
    job2.run()
    assert job2.restored_epoch == 2
    assert out.read_text() == running_sums(n)


def test_blocking_mode_keeps_the_sources_paused_until_durable(tmp_path: Path) -> None:
    store = GatedStore(tmp_path / "c")
    source = build(10**8, tmp_path / "out.txt")
    job = Job(source, checkpoint=store, every=None, background=False)
    assert not job.background
    runner, _ = _in_thread(job.run)
    try:
        wait_for(lambda: job.epoch == 1 and source.started)
        first, got = _in_thread(job.checkpoint)
        wait_for(lambda: store.entered == [2])
        # paused while the write is held: at its end the source is still at the barrier
        emitted = source.emitted
        store.gate.set()
        first.join(60)
        assert got == [2]
        assert store.read_manifest(2).positions["numbers"] == emitted
    finally:
        store.gate.set()
        job.stop()
        runner.join(60)


class _TransactionalSink(Node):
    """A checkpointed sink whose epoch stays open until commit (no sealing)."""

    def update(self, x: Any, who: Any = None, metadata: Any = None) -> None:
        return None

    def pre_commit(self, epoch: int) -> Any:
        return {"epoch": epoch}

    def commit(self, epoch: int, handle: Any) -> None:
        return None

    def restore(self, handle: Any) -> None:
        return None


def test_a_sink_that_does_not_seal_its_epoch_makes_checkpoints_blocking(tmp_path: Path) -> None:
    source = Stream.from_iterable(range(10), name="numbers")
    _TransactionalSink(source.accumulate(add, start=0))
    job = Job(source, checkpoint=tmp_path / "c", every=None)
    assert not job.background
    job.run()
    assert LocalDirectoryStore(tmp_path / "c").list_epochs() == [1, 2]
