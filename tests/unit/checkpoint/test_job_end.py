"""How a job ends and where its record-count checkpoints fall.

A job notices at once that its sources are exhausted (no polling), but it
first lets the nodes pass on the records they still hold by themselves
(``delay``, ``timed_window``, ``buffer``, ``partition`` with a timeout), and
only then takes its final checkpoint: those records reach the output, not
that checkpoint.  A record-count trigger (``every_batches``) falls exactly
on its record, however large the sources' chunks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.state import codec


def _final_state(tmp_path: Path, job: Job, node: Stream) -> Any:
    store = LocalDirectoryStore(tmp_path)
    _, states = store.load_checkpoint(store.list_epochs()[-1])
    return codec.loads(states[job.id_of(node)])


def _held_graph(stage: str) -> tuple[Stream, Stream, list[Any]]:
    source = Stream.from_iterable(list(range(50)), name="numbers")
    held: Stream
    if stage == "delay":
        held = source.delay("300ms", name="held")
        out_stream = held
    elif stage == "timed_window":
        held = source.timed_window("300ms", name="held")
        out_stream = held.flatten()
    elif stage == "buffer":

        async def slow(x: int) -> int:
            return x

        held = source.buffer(8, name="held")
        out_stream = held.map_async(slow, parallelism=1)
    else:
        held = source.partition(40, timeout=0.3, name="held")
        out_stream = held.flatten()
    return source, held, out_stream.sink_to_list(name="out")


@pytest.mark.parametrize("stage", ["delay", "timed_window", "buffer", "partition_timeout"])
def test_held_records_reach_the_output_before_the_final_checkpoint(
    tmp_path: Path, stage: str
) -> None:
    source, held, out = _held_graph(stage)
    job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    # everything went out, in order, before the job returned ...
    assert out == list(range(50))
    assert not held.emits_later()
    # ... and the final checkpoint holds none of it
    state = _final_state(tmp_path, job, held)
    assert all(not v for v in state.values()), state
    # a rerun resumes after the end: the output (a checkpointed list) has no duplicates
    source, _, out = _held_graph(stage)
    Job(source, checkpoint=tmp_path, every=None).run()
    assert out == list(range(50))


def test_a_stopped_job_keeps_held_records_in_its_final_checkpoint(tmp_path: Path) -> None:
    """``stop()`` does not wait for timers: what a delay holds is state, emitted after a resume."""
    holder: dict[str, Job] = {}

    def stop_at(x: int) -> int:
        if x == 9:
            holder["job"].stop()
        return x

    source = Stream.from_iterable(list(range(30)), name="numbers")
    delayed = source.map(stop_at).delay("10s")
    out = delayed.sink_to_list()
    holder["job"] = job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    assert out == []
    assert [x for _, x in _final_state(tmp_path, job, delayed)["pending"]] == list(range(10))


@pytest.mark.parametrize("every_batches", [1, 7, 250, 1500])
def test_every_batches_falls_exactly_on_its_record(tmp_path: Path, every_batches: int) -> None:
    """Each record-count checkpoint's position is a multiple of ``every_batches``.

    The pipeline is fast, so the source reads chunks of up to 1,024 items;
    the trigger still fires right after the k-th record, inside a chunk, and
    each checkpoint's state matches its position (the barrier is consistent).
    """
    # past the first chunk of 1,024 (and, for 1,500, past two triggers): a
    # checkpoint per record or per 7 needs no more records than that to show it
    n = {1: 300, 7: 1100}.get(every_batches, 4000)
    source = Stream.from_iterable(range(n), name="numbers")
    acc = source.accumulate(lambda a, x: a + x, start=0, name="sum")
    acc.sink(lambda x: None)
    job = Job(source, checkpoint=tmp_path, every=None, every_batches=every_batches, keep=10_000)
    job.run()
    store = LocalDirectoryStore(tmp_path)
    epochs = store.list_epochs()
    positions = []
    for e in epochs:
        m, states = store.load_checkpoint(e)
        pos = m.positions["numbers"]
        assert codec.loads(states["sum"])["state"] == sum(range(pos))
        positions.append(pos)
    # the start checkpoint, one per every_batches records, and the final one
    want = list(range(0, n + 1, every_batches))
    if want[-1] != n:
        want.append(n)
    assert sorted(set(positions)) == want
    assert positions == sorted(positions)


def test_every_batches_counts_the_records_of_all_sources(tmp_path: Path) -> None:
    a = Stream.from_iterable(range(3000), name="a")
    b = Stream.from_iterable(range(3000), name="b")
    a.union(b).sink(lambda x: None)
    Job(a, checkpoint=tmp_path, every=None, every_batches=500, keep=10_000).run()
    store = LocalDirectoryStore(tmp_path)
    totals = [sum(store.read_manifest(e).positions.values()) for e in store.list_epochs()]
    assert totals[0] == 0 and totals[-1] == 6000
    # every interval checkpoint falls on a multiple of 500 records in all
    assert all(t % 500 == 0 for t in totals), totals
    assert len(set(totals)) == 13


def test_latest_passes_the_last_record_before_the_final_checkpoint(tmp_path: Path) -> None:
    """``latest`` drops superseded records (complete) and passes the last one on."""
    source = Stream.from_iterable(range(3000), name="numbers")
    newest = source.latest(name="newest")
    out = newest.sink_to_list(name="out")
    job = Job(source, checkpoint=tmp_path, every=None, every_batches=500)
    job.run()
    assert out[-1] == 2999 and out == sorted(set(out))
    assert _final_state(tmp_path, job, newest) == {"next": []}


def test_a_stopped_job_keeps_latests_record_or_passed_it_on(tmp_path: Path) -> None:
    """A stop leaves the kept record in the checkpoint, or on the output: never both or neither."""
    holder: dict[str, Job] = {}

    def build(stop: bool) -> tuple[Stream, Stream, list[Any]]:
        def stop_at(x: int) -> int:
            if stop and x == 9:
                holder["job"].stop()
            return x

        source = Stream.from_iterable(list(range(30)), name="numbers")
        newest = source.map(stop_at, name="stopper").latest(name="newest")
        return source, newest, newest.sink_to_list(name="out")

    source, newest, first = build(stop=True)
    holder["job"] = job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    kept = _final_state(tmp_path, job, newest)["next"]
    assert first[-1:] + kept == [9]  # passed on, or kept: exactly one of them
    # the resumed list (checkpointed) holds 9 once, whether it was passed on or kept
    source, _, second = build(stop=False)
    Job(source, checkpoint=tmp_path, every=None).run()
    # it starts as the first run left it (on a busy machine the loop may have had
    # time to pass on a record before 9, as it may after it) ...
    assert second[: len(first)] == first, (first, second)
    # ... then the newest of what follows: always 29 at the end, and between them
    # whatever records the loop had time to pass on (it depends on the machine)
    assert second.count(9) == 1 and second[-1] == 29, second
    assert second == sorted(set(second)) and set(second[len(first) :]) <= set(range(9, 30))


def test_stop_from_another_thread_waits_for_the_end_or_says_it_did_not(tmp_path: Path) -> None:
    import threading

    from rivermark.testing import run_in_thread, wait_for

    release = threading.Event()
    seen: list[int] = []

    def slow(x: int) -> None:
        seen.append(x)
        release.wait(30)  # the record at hand holds the job until released

    source = Stream.from_iterable(range(5))
    source.sink(slow)
    job = Job(source, checkpoint=tmp_path, every=None)
    thread, raised = run_in_thread(job)
    wait_for(lambda: seen, timeout=60)
    # the job cannot end while a record is held: a bounded wait says so
    assert job.stop(timeout=0.2) is False
    release.set()
    # without a timeout, stop returns once the run has ended (final checkpoint written)
    assert job.stop() is True
    thread.join(30)
    assert not thread.is_alive() and raised == []
    # the final checkpoint holds where the source stopped: every record seen
    assert LocalDirectoryStore(tmp_path).list_epochs() and seen == list(range(len(seen)))


def _generation_of(obj: object) -> int | None:
    """The collector generation holding ``obj`` (None: in none, i.e. frozen or untracked)."""
    import gc

    for g in range(3):
        if any(o is obj for o in gc.get_objects(g)):
            return g
    return None


@pytest.mark.parametrize("freeze", ["1", "0"])
def test_a_running_job_leaves_its_long_lived_state_out_of_full_collections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, freeze: str
) -> None:
    import gc

    monkeypatch.setenv("RIVERMARK_GC_FREEZE", freeze)
    source = Stream.from_iterable(range(100), name="n")
    windows = source.timestamps(float, name="t").tumbling_window(1000, agg="count", name="w")
    windows.sink(lambda r: None)
    seen: list[tuple[int | None, bool]] = []

    def look(x: int) -> int:
        if x == 50:  # while the job runs: the open windows' mapping and heap
            seen.append((_generation_of(windows.store.open), gc.is_tracked(windows.store.open)))
            seen.append((_generation_of(windows.store.heap), gc.is_tracked(windows.store.heap)))
        return x

    source.map(look).sink(lambda x: None)
    before = gc.get_freeze_count()
    Job(source, checkpoint=tmp_path / "c", every=None).run()
    if freeze == "1":
        # frozen (tracked, in no generation): a full collection does not traverse them
        assert seen == [(None, True), (None, True)]
    else:
        assert None not in [g for g, _ in seen]  # in a generation the collector walks
    assert gc.get_freeze_count() == before  # the job gave them back at its end
    assert _generation_of(windows.store.open) is not None
