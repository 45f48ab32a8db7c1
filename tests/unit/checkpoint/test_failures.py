"""A job whose checkpoint cannot be taken stops everything before it reports.

A failed write (disk full, permission lost) or state that cannot be pickled
stops every source and closes every sink before ``run()`` raises and before
the lock is released; nothing of the failed epoch is committed, the torn
checkpoint is removed, and a rerun on the same directory is exact.
"""

from __future__ import annotations

import errno
import re
import threading
import time
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointWriteError, Job, LocalDirectoryStore
from rivermark.checkpoint.stores.manifest import Manifest

from .conftest import total

N = 20_000


class FailingStore(LocalDirectoryStore):
    """A real directory store whose ``fail_at``-th checkpoint write raises ENOSPC.

    It fails after the checkpoint's directory and first state file exist, as
    a disk that fills up does, so the torn files must be removed.
    """

    def __init__(self, path: Path, fail_at: int) -> None:
        super().__init__(path)
        self.fail_at = fail_at
        self.writes = 0

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        self.writes += 1
        if self.writes == self.fail_at:
            d = self.epoch_dir(manifest.epoch)
            (d / "state").mkdir(parents=True)
            (d / "state" / "partial.pkl").write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write_checkpoint(manifest, states)


def _slowly(x: int) -> int:
    # a few tens of microseconds per record: the job's record-count trigger
    # (every_batches), which it checks between the sources' chunks, fires on time
    time.sleep(0.00002)
    return x


def graph(out: Path) -> tuple[Stream, Stream]:
    source = Stream.from_iterable(list(range(N)), name="numbers")
    summed = source.map(_slowly).accumulate(total, start=0, name="sum")
    sink = summed.sink_to_textfile(str(out))
    return source, sink


def expected() -> str:
    acc, lines = 0, []
    for x in range(N):
        acc += x
        lines.append(f"{acc}\n")
    return "".join(lines)


def test_failed_write_stops_sources_and_sinks_before_reporting(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    source, sink = graph(out)
    store = FailingStore(ckpt, fail_at=4)
    # with the sources paused during writes, a checkpoint every 1000 records
    # (tests/unit/checkpoint/test_background.py fails a background write)
    job = Job(source, checkpoint=store, every=None, every_batches=1000, background=False)
    with pytest.raises(CheckpointWriteError) as info:
        job.run()
    msg = str(info.value)
    assert "checkpoint 4 could not be written" in msg and "No space left on device" in msg
    assert "every source and sink was stopped" in msg and "epoch 3" in msg
    # stopped before run() returned: nothing can write any more
    assert source.finished and source.stopped
    assert sink.file is None  # type: ignore[attr-defined]
    size = out.stat().st_size
    # no offsets or sink commits for the failed epoch, and its torn files are gone
    assert job.epoch == 3 and store.list_epochs() == [1, 2, 3]
    assert not store.epoch_dir(4).exists()
    # the lock was released: another job can take the directory
    other = LocalDirectoryStore(ckpt)
    other.lock()
    other.unlock()
    assert out.stat().st_size == size
    # the failure is in the job's checkpoint history, on the page and in the metrics
    from rivermark.observe.metrics import Metrics
    from rivermark.observe.prometheus import collect_families
    from rivermark.observe.ui import snapshot_json

    (failure,) = job.checkpoint_failures
    assert failure.epoch == 4 and failure.fatal and "No space left on device" in failure.reason
    metrics = Metrics(job)
    shown = snapshot_json(metrics.read(), job)["checkpoint_failures"]
    assert [(f["epoch"], f["fatal"]) for f in shown] == [(4, True)]
    assert "No space left on device" in shown[0]["reason"]
    families = {f.name: f for f in collect_families(metrics)}
    assert families["rivermark_checkpoint_failures"].samples[0].value == 1
    # a rerun on the same directory resumes from checkpoint 3: exact, no duplicates
    source, _ = graph(out)
    Job(source, checkpoint=ckpt, every=None, every_batches=1000).run()
    assert out.read_text() == expected()


def test_failed_first_checkpoint_at_start_stops_too(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    source, sink = graph(out)
    job = Job(source, checkpoint=FailingStore(ckpt, fail_at=1), every=None)
    with pytest.raises(CheckpointWriteError, match=re.escape("(none yet) is intact")):
        job.run()
    assert sink.file is None  # type: ignore[attr-defined]
    assert not source.started or source.finished
    source, _ = graph(out)
    Job(source, checkpoint=ckpt, every=None).run()
    assert out.read_text() == expected()


def test_unpicklable_state_names_the_node_and_the_type(tmp_path: Path) -> None:
    source = Stream.from_iterable(list(range(100)), name="numbers")

    def keep_lock(acc: object, x: int) -> object:
        return threading.Lock()

    acc = source.accumulate(keep_lock, start=0, name="holder")
    acc.sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None, every_batches=10)
    with pytest.raises(CheckpointWriteError) as info:
        job.run()
    msg = str(info.value)
    assert "the state of node holder" in msg and "cannot be pickled" in msg
    assert "state['state'] is a _thread.lock" in msg
    assert "TypeError: cannot pickle '_thread.lock' object" in msg
    assert source.finished


def test_a_sink_that_cannot_make_its_output_durable_stops_the_job(tmp_path: Path) -> None:
    from typing import Any

    from rivermark.sinks.textfile import SinkToTextfile

    class FullDiskSink(SinkToTextfile):
        """A real file sink whose third pre-commit fails as on a full disk."""

        def pre_commit(self, epoch: int) -> Any:
            if epoch == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().pre_commit(epoch)

    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    source = Stream.from_iterable(list(range(N)), name="numbers")
    sink = FullDiskSink(source, str(out), name="out")
    job = Job(source, checkpoint=ckpt, every=None, every_batches=1000)
    with pytest.raises(CheckpointWriteError) as info:
        job.run()
    msg = str(info.value)
    assert "checkpoint 3: sink out" in msg and "No space left on device" in msg
    assert source.finished and sink.file is None
    assert LocalDirectoryStore(ckpt).list_epochs() == [1, 2]
    source = Stream.from_iterable(list(range(N)), name="numbers")
    source.sink_to_textfile(str(out), name="out")
    Job(source, checkpoint=ckpt, every=None, every_batches=1000).run()
    assert out.read_text() == "".join(f"{i}\n" for i in range(N))


class UnprunableStore(LocalDirectoryStore):
    """A real directory store whose prune fails (a permission lost on old checkpoints)."""

    def prune(self, keep: int) -> list[int]:
        raise PermissionError(errno.EACCES, "Permission denied", str(self.path))


def test_a_failed_prune_is_a_warning_and_the_job_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    source, _ = graph(out)
    store = UnprunableStore(ckpt)
    job = Job(source, checkpoint=store, every=None, every_batches=5000, keep=1)
    with caplog.at_level("WARNING", logger="rivermark.checkpoint.protocol.cycle"):
        job.run()
    assert out.read_text() == expected()
    # every checkpoint was written and counts; none was pruned
    assert job.checkpoints_written >= 3
    assert len(store.list_epochs()) == job.checkpoints_written
    assert re.search(r"older checkpoints could not be pruned .*PermissionError", caplog.text)
