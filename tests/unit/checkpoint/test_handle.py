"""Job.run() on a thread that runs an event loop: the job runs on rivermark's loop, a handle returns."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, JobHandle


def test_run_on_a_running_loop_returns_a_handle_at_once(tmp_path: Path) -> None:
    gate = threading.Event()

    def hold(x: int) -> int:
        gate.wait(30)
        return x

    async def main() -> tuple[JobHandle | None, bool, list[int]]:
        # built on this loop's thread, as in a Jupyter cell: the nodes take this loop
        source = Stream.from_iterable(range(100), name="numbers")
        out = source.map(hold).sink_to_list()
        handle = Job(source, checkpoint=tmp_path, every=None).run()
        assert handle is not None
        ended_early = handle.done
        # this loop stays free while the job runs elsewhere
        await asyncio.sleep(0)
        gate.set()
        assert handle.wait(30)
        handle.result()
        return handle, ended_early, out

    handle, ended_early, out = asyncio.run(main())
    assert handle is not None and not ended_early
    assert out == list(range(100))
    assert handle.job.epoch >= 1 and handle.done


def test_handle_stop_ends_the_job_with_a_final_checkpoint(tmp_path: Path) -> None:
    async def main() -> tuple[JobHandle, list[int]]:
        source = Stream()
        out = source.map(lambda x: x + 1).sink_to_list()
        handle = Job(source, checkpoint=tmp_path, every=None).run()
        assert handle is not None
        deadline = asyncio.get_running_loop().time() + 30
        while not handle.job.running:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        source.emit(1)
        handle.stop()
        return handle, out

    handle, out = asyncio.run(main())
    assert handle.done and out == [2]
    assert handle.job.checkpoints[-1].epoch == handle.job.epoch


def test_handle_result_raises_what_the_job_raised(tmp_path: Path) -> None:
    def boom(x: int) -> int:
        raise ValueError(f"bad record {x}")

    async def main() -> JobHandle:
        source = Stream.from_iterable([1], name="one")
        source.map(boom).sink_to_list()
        handle = Job(source, checkpoint=tmp_path, every=None).run()
        assert handle is not None
        assert handle.wait(30)
        return handle

    handle = asyncio.run(main())
    with pytest.raises(Exception, match="bad record 1"):
        handle.result()


def test_handle_takes_a_savepoint_and_stops_with_one(tmp_path: Path) -> None:
    async def main() -> tuple[JobHandle, int]:
        source = Stream()
        source.accumulate(lambda acc, x: acc + x, start=0, name="sum").sink_to_list()
        handle = Job(source, checkpoint=tmp_path, every=None, keep=1).run()
        assert handle is not None
        deadline = asyncio.get_running_loop().time() + 30
        while not handle.job.running:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        source.emit(1)
        first = handle.savepoint()
        source.emit(2)
        handle.stop(savepoint=True)
        return handle, first

    handle, first = asyncio.run(main())
    assert handle.done and handle.job.last_savepoint == handle.job.epoch == first + 1
    # keep=1, yet both savepoints stay
    assert [c.kind for c in handle.job.checkpoints][-2:] == ["savepoint", "savepoint"]
    assert handle.job.store.list_epochs()[-2:] == [first, first + 1]
