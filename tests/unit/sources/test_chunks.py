"""Sources emit in chunks through the generated loop: liveness, stops, backpressure, position."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rivermark import Job, Stream
from rivermark.execution import graphcode as codegen
from rivermark.testing import wait_for

from .conftest import stop_and_wait


def _loop_turn_lag(source: Any, n: int) -> int:
    """Records processed between asking the event loop for a turn and getting it.

    At record 10 a callback is scheduled on the loop; the count of records
    that passed before it ran says how long the source kept the loop.
    """
    seen: list[int] = []
    ran_at: list[int] = []

    def slow(x: Any) -> Any:
        time.sleep(0.001)  # a slow pipeline: about 1 ms per record
        seen.append(1)
        if len(seen) == 10:
            asyncio.get_running_loop().call_soon(lambda: ran_at.append(len(seen)))
        return x

    source.map(slow).sink(lambda x: None)
    source.start()
    wait_for(lambda: ran_at or source.finished, timeout=30)
    stop_and_wait(source)
    assert ran_at, f"the loop got no turn while {len(seen)} of {n} records ran"
    return ran_at[0] - 10


@pytest.mark.parametrize("kind", ["iterable", "textfile"])
def test_source_gives_the_loop_a_turn_within_a_few_slow_records(kind: str, tmp_path: Path) -> None:
    # The time slice is 5 ms and a record takes >= 1 ms: the loop gets a turn
    # after a handful of records, not after a 64 KiB read buffer (thousands of
    # short lines) as before.  The bound is in records, so load does not matter
    # (a loaded machine makes records slower, hence fewer per slice).
    n = 3000
    if kind == "iterable":
        source = Stream.from_iterable(range(n))
    else:
        path = tmp_path / "in.txt"
        path.write_text("".join(f"{i}\n" for i in range(n)))
        source = Stream.from_textfile(path, stop_at_eof=True)
    assert _loop_turn_lag(source, n) <= 10


def test_checkpoints_keep_their_interval_on_a_slow_pipeline(tmp_path: Path) -> None:
    # --every 0.5s once gave one checkpoint in 22 s because the source held the
    # loop for a whole read buffer.  Each checkpoint is requested from outside
    # while the job runs; every request must be served before the file ends.
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{i}\n" for i in range(4000)))
    source = Stream.from_textfile(path, stop_at_eof=True, name="lines")
    processed: list[int] = []

    def slow(line: str) -> int:
        time.sleep(0.0005)
        processed.append(1)
        return int(line)

    out = source.map(slow).sink_to_list()
    job = Job(source, checkpoint=tmp_path / "ckpt", every=None)
    positions: list[int] = []

    def drive() -> None:
        wait_for(lambda: len(processed) > 5, timeout=30)
        for _ in range(3):
            if source.finished:
                break
            job.checkpoint()
            store = job.store
            positions.append(store.read_manifest(job.epoch).positions["lines"]["offset"])

    t = threading.Thread(target=drive)
    t.start()
    job.run()
    t.join()
    assert len(positions) == 3
    assert positions == sorted(positions)
    assert positions[-1] < path.stat().st_size  # served while the file was still being read
    assert out == list(range(4000))


def test_stop_from_a_record_emits_no_later_record_of_the_chunk() -> None:
    source = Stream.from_iterable(list(range(10_000)))
    out: list[int] = []

    def take(x: int) -> None:
        out.append(x)
        if x == 123:
            source.stop()

    source.sink(take)
    source.start()
    wait_for(lambda: source.finished)
    assert out == list(range(124))
    assert source.position() == 124


def test_generator_items_read_ahead_are_emitted_by_the_next_run() -> None:
    # a one-shot iterator is not replayable: items read into a chunk but not
    # emitted when the source stopped must not be lost
    source = Stream.from_iterable(iter(range(5000)))
    out: list[int] = []

    def take(x: int) -> None:
        out.append(x)
        if x == 700:
            source.stop()

    source.sink(take)
    source.start()
    wait_for(lambda: source.finished)
    assert out == list(range(701))
    source.start()
    wait_for(lambda: source.finished and len(out) == 5000)
    assert out == list(range(5000))


def test_source_uses_the_generated_loop_and_a_graph_change_takes_effect_at_once() -> None:
    source = Stream.from_iterable(list(range(2000)))
    first = source.map(lambda x: x * 2).sink_to_list()
    second: list[int] = []

    def connect_at(x: int) -> int:
        if x == 500:
            source.map(lambda y: -y).sink(second.append)
        return x

    source.map(connect_at).sink(lambda x: None)
    run = source.record_loop()
    assert hasattr(run, "rivermark_source")  # the generated loop, not one emit per record
    source.start()
    wait_for(lambda: source.finished)
    assert first == [2 * x for x in range(2000)]
    # the new branch sees every record after the one that created it
    assert second == [-x for x in range(501, 2000)]


def test_zip_backpressure_holds_the_source_and_the_position(tmp_path: Path) -> None:
    # one side of the zip is fed slowly (asynchronous map_async): the zip's buffer
    # fills and the source waits; everything arrives paired and in order
    source = Stream.from_iterable(list(range(300)), name="n")

    async def slow(x: int) -> int:
        await asyncio.sleep(0)
        return x

    left = source.map(lambda x: x)
    right = source.map_async(slow)
    out = left.zip(right, maxsize=4).sink_to_list()
    Job(source, checkpoint=tmp_path, every="10ms").run()
    assert out == [(x, x) for x in range(300)]


def test_user_error_keeps_the_position_before_the_failed_record() -> None:
    source = Stream.from_iterable(list(range(1000)))

    def boom(x: int) -> int:
        if x == 321:
            raise ValueError("bad record")
        return x

    out = source.map(boom).sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert source.error and out == list(range(321))
    assert source.position() == 321


def test_without_code_generation_the_chunk_loop_gives_the_same_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(codegen, "ENABLED", False)
    source = Stream.from_iterable(list(range(1000)))
    out = source.partition(7).sink_to_list()
    run = source.record_loop()
    assert not hasattr(run, "rivermark_source")
    source.start()
    wait_for(lambda: source.finished)
    assert out == [tuple(range(i, i + 7)) for i in range(0, 994, 7)]


def test_generator_items_read_ahead_survive_a_stop_from_another_thread() -> None:
    source = Stream.from_iterable(iter(range(200_000)))
    out: list[int] = []

    def keep(x: int) -> None:
        out.append(x)
        if x % 100 == 0:  # at least 2 s in all: the stop comes well before the end
            time.sleep(0.001)

    source.sink(keep)
    source.start()
    wait_for(lambda: len(out) > 1000)
    stop_and_wait(source)
    assert out == list(range(len(out))) and len(out) < 200_000
    source.start()
    wait_for(lambda: source.finished and len(out) == 200_000)
    assert out == list(range(200_000))
