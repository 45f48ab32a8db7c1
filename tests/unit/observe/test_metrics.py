"""The metrics model: per-node counts equal the records that really went through."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.execution import counting, plan
from rivermark.observe.metrics import Metrics

from ..helpers import node_by_node


def build(n: int, dead: list[Any]) -> tuple[Stream, dict[str, list[Any]]]:
    source = Stream.from_iterable(list(range(n)), name="numbers")
    evens = source.filter(lambda x: x % 2 == 0, name="evens")
    inv = evens.map(lambda x: 12 // (x % 3), name="inv", on_error="skip")
    twice = evens.map(lambda x: [x, x], name="twice").flatten(name="flat")
    windows = twice.partition(4, name="windows")
    odd_div = source.map(
        lambda x: 1 // (x % 5), name="handled", on_error=lambda rec, exc: dead.append(rec)
    )
    outs = {
        "inv": inv.sink_to_list(),
        "flat": twice.sink_to_list(),
        "windows": windows.sink_to_list(),
        "handled": odd_div.sink_to_list(),
    }
    return source, outs


@contextlib.contextmanager
def plain() -> Iterator[None]:
    yield


@pytest.mark.parametrize("path", [plain, node_by_node])
def test_counts_equal_records_through_each_node(tmp_path: Path, path: Any) -> None:
    with path():
        dead: list[Any] = []
        source, outs = build(100, dead)
        job = Job(source, checkpoint=tmp_path, every=None)
        job.run()
        snap = Metrics(job).read()
    evens = [x for x in range(100) if x % 2 == 0]
    assert snap.node("numbers").records_out == 100
    assert snap.node("evens").records_in == 100
    assert snap.node("evens").records_out == len(evens) == 50
    inv = snap.node("inv")
    assert inv.records_in == 50 and inv.errors_skipped == len([x for x in evens if x % 3 == 0])
    assert inv.records_out == len(outs["inv"]) == 50 - inv.errors_skipped
    assert snap.node("flat").records_in == 50 and snap.node("flat").records_out == 100
    assert snap.node("windows").records_in == 100
    assert snap.node("windows").records_out == len(outs["windows"]) == 25
    handled = snap.node("handled")
    assert handled.errors_handled == len(dead) == 20 and handled.errors_raised == 0
    assert handled.records_out == 80 == len(outs["handled"])
    sinks = {n.id for n in snap.sinks}
    assert len(sinks) == 4
    assert sum(snap.node(s).records_in for s in sinks) == sum(len(v) for v in outs.values())
    assert all(snap.node(s).records_out == 0 for s in sinks)  # a leaf passes nothing on


def test_emit_roots_count_once_a_job_runs_them(tmp_path: Path) -> None:
    s = Stream()
    f = s.filter(lambda x: x > 0)
    f.sink_to_list()
    for i in range(3):
        s.emit(i)
    assert s.records_out == 0 and f.records_out == 2  # outside a job: the root is not counted
    job = Job(s, checkpoint=tmp_path, every=None)
    for i in range(3):
        s.emit(i)
    assert s.records_out == 3
    assert Metrics(job).read().node(job.id_of(f)).records_in == 3


def test_counting_can_be_turned_off() -> None:
    counting.ENABLED = False
    plan.retire_all()
    try:
        s = Stream()
        f = s.filter(lambda x: x > 0)
        f.sink_to_list()
        for i in range(5):
            s.emit(i)
        assert f.records_out == 0
    finally:
        counting.ENABLED = True
        plan.retire_all()
    for i in range(5):
        s.emit(i)
    assert f.records_out == 4


def test_backlog_of_a_window_and_job_figures(tmp_path: Path) -> None:
    lines = tmp_path / "in.txt"
    lines.write_text("".join(f"{i}\n" for i in range(10)))
    source = Stream.from_textfile(str(lines), stop_at_eof=True, name="lines")
    source.map(int).partition(4, name="fours").sink_to_list()
    job = Job(source, checkpoint=tmp_path / "ck", every=None)
    before = Metrics(job).read()
    assert before.sources[0].lag == {"": 20} and before.sources[0].lag_unit == "bytes"
    assert before.restores == 0 and before.checkpoints_written == 0
    job.run()
    snap = Metrics(job).read()
    assert snap.node("fours").backlog == 2  # 10 records, two windows of 4 passed on
    assert snap.sources[0].lag == {"": 0} and snap.sources[0].position == 20
    assert snap.checkpoints_written == 2 and snap.last_checkpoint is not None
    assert snap.last_checkpoint.size > 0 and snap.last_checkpoint.pause >= 0
    assert snap.restored_epoch is None and not snap.running
    # a second run resumes: one restore
    source2 = Stream.from_textfile(str(lines), stop_at_eof=True, name="lines")
    source2.map(int).partition(4, name="fours").sink_to_list()
    job2 = Job(source2, checkpoint=tmp_path / "ck", every=None)
    job2.run()
    snap2 = Metrics(job2).read()
    assert snap2.restores == 1 and snap2.restored_epoch == snap.last_checkpoint.epoch
    # nothing new was read; the counts carried over from the checkpoint
    assert snap2.node("lines").records_out == 10 and snap2.sources[0].records == 10


def test_zip_counts_are_derived_and_survive_a_restore(tmp_path: Path) -> None:
    for run, n in ((1, 7), (2, 12)):
        source = Stream.from_iterable(list(range(n)), name="numbers")
        odd = source.filter(lambda x: x % 2 == 1, name="odd")
        even = source.filter(lambda x: x % 2 == 0, name="even")
        pairs = even.zip(odd, name="pairs")
        out = pairs.sink_to_list()
        job = Job(source, checkpoint=tmp_path, every=None)
        job.run()
        snap = job.metrics.read()
        zipped = snap.node("pairs")
        assert zipped.records_out == snap.node(job.id_of(pairs.downstreams[0])).records_in
        assert zipped.records_in == snap.node("odd").records_out + snap.node("even").records_out
        assert zipped.backlog == len(pairs._buffers[0]) + len(pairs._buffers[1])
        if run == 1:
            # 0..6: evens 0,2,4,6 and odds 1,3,5: three pairs, one even waits
            assert zipped.records_out == len(out) == 3 and zipped.backlog == 1
        else:
            # resumed at 7: the waiting 6 pairs with 7, then (8, 9), (10, 11); the
            # counts carry the first run's three pairs over, as the list sink's state does
            assert out[3:] == [(6, 7), (8, 9), (10, 11)] and zipped.records_out == 6 == len(out)


def test_counts_kept_in_a_chunk_survive_a_user_function_that_raises(tmp_path: Path) -> None:
    # the records a filter passed on before a failure inside the same chunk
    # of the source's generated loop are counted
    from rivermark.checkpoint import JobFailedError

    source = Stream.from_iterable(list(range(100)), name="numbers")
    evens = source.filter(lambda x: x % 2 == 0, name="evens")
    evens.map(lambda x: 1 // (x - 40), name="fails_at_40").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    with pytest.raises(JobFailedError):
        job.run()
    snap = Metrics(job).read()
    assert snap.node("evens").records_out == len(range(0, 41, 2)) == 21
    assert snap.node("fails_at_40").errors_raised == 1


def test_counted_nodes_read_exactly_from_another_thread_while_a_record_is_held(
    tmp_path: Path,
) -> None:
    import threading

    reached, go = threading.Event(), threading.Event()

    def hold(x: Any) -> None:
        if x == (73, 73):
            reached.set()
            assert go.wait(60)

    source = Stream.from_iterable(list(range(200)), name="numbers")
    odd = source.filter(lambda x: x % 2 == 1, name="odd")
    twice = odd.map(lambda x: [x, x]).flatten(name="flat")
    twice.partition(2, name="pairs").sink(hold)
    job = Job(source, checkpoint=tmp_path, every=None)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        assert reached.wait(60)
        # inside the pair of 73, in the middle of the source's first chunk
        assert odd.records_out == 37  # 1, 3, ..., 73
        assert twice.records_out == 74
        assert job.metrics.read().node("pairs").records_out == 37
    finally:
        go.set()
        runner.join(60)
    assert not runner.is_alive()
    assert odd.records_out == 100 and twice.records_out == 200
