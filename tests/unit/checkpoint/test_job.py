from __future__ import annotations

import asyncio
import logging
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointMismatchError, Job, JobFailedError, LocalDirectoryStore
from rivermark.errors import ConfigurationError
from rivermark.testing import wait_for

from .conftest import build, total

N = 2000


def expected(n: int = N) -> list[int]:
    out, acc = [], 0
    for x in range(n):
        acc += x
        out.append(acc)
    return out


def test_runs_to_completion_and_writes_final_checkpoint(tmp_path: Path) -> None:
    source, acc, results, _ = build(N)
    job = Job(source, checkpoint=tmp_path / "c", every=None)
    job.run()
    assert results == expected()
    store = LocalDirectoryStore(tmp_path / "c")
    m = store.read_manifest(store.list_epochs()[-1])
    assert m.positions == {"numbers": N}
    assert (tmp_path / "c" / "job.json").exists()


def test_resume_is_exact_after_stop(tmp_path: Path) -> None:
    source, acc, first, holder = build(N, stop_at=700)
    holder["job"] = job = Job(source, checkpoint=tmp_path, every="50ms")
    job.run()
    assert 700 < len(first) + 1 < N  # stopped part way
    source, acc, second, _ = build(N)
    job2 = Job(source, checkpoint=tmp_path, every="50ms")
    job2.run()
    assert job2.restored_epoch is not None
    # sink_to_list's list is checkpointed state: the resumed list is the whole output
    assert second == expected()
    assert first == expected()[: len(first)]


def test_resume_after_exhaustion_emits_nothing(tmp_path: Path) -> None:
    source, _, results, _ = build(100)
    Job(source, checkpoint=tmp_path, every=None).run()
    source, _, again, _ = build(100)
    job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    assert job.restored_epoch is not None
    assert again == expected(100)  # restored list; nothing re-emitted


def test_textfile_sink_is_exact_across_stop(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"

    def graph(stop_at: int | None) -> tuple[Stream, dict[str, Job]]:
        holder: dict[str, Job] = {}
        src = Stream.from_iterable(list(range(N)), name="src")

        def f(x: int) -> int:
            if x == stop_at:
                holder["job"].stop()
            return x

        src.map(f).accumulate(total, start=0).sink_to_textfile(str(out))
        return src, holder

    src, holder = graph(500)
    holder["job"] = Job(src, checkpoint=tmp_path / "c", every="20ms")
    holder["job"].run()
    src, _ = graph(None)
    Job(src, checkpoint=tmp_path / "c", every="20ms").run()
    assert out.read_text() == "".join(f"{v}\n" for v in expected())


def test_crash_before_first_checkpoint_starts_from_source_start(tmp_path: Path) -> None:
    # a torn first checkpoint (state files, no manifest) is ignored
    torn = tmp_path / "checkpoints" / "000000000001" / "state"
    torn.mkdir(parents=True)
    (torn / "sum.pkl").write_bytes(b"garbage")
    source, _, results, _ = build(50)
    job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    assert job.restored_epoch is None
    assert results == expected(50)


def _graph_with(extra: str | None, n: int = 50) -> tuple[Stream, list[Any]]:
    source = Stream.from_iterable(list(range(n)), name="numbers")
    mapped = source.map(lambda x: x)
    if extra != "removed":
        if extra == "changed":
            mapped.accumulate(total, start=0, name="sum", returns_state=True)
        else:
            mapped.accumulate(total, start=0, name="sum")
    if extra == "added":
        mapped.accumulate(total, start=100, name="extra")
    return source, mapped.sink_to_list()


def test_changed_graph_is_refused_with_diff(tmp_path: Path) -> None:
    Job(_graph_with(None)[0], checkpoint=tmp_path, every=None).run()
    with pytest.raises(CheckpointMismatchError) as info:
        Job(_graph_with("added")[0], checkpoint=tmp_path, every=None).run()
    msg = str(info.value)
    assert "added: extra" in msg and "allow_new_nodes=True" in msg
    with pytest.raises(CheckpointMismatchError, match="removed: sum"):
        Job(_graph_with("removed")[0], checkpoint=tmp_path, every=None, allow_new_nodes=True).run()
    with pytest.raises(CheckpointMismatchError, match="changed: sum: .*returns_state=True"):
        Job(_graph_with("changed")[0], checkpoint=tmp_path, every=None, allow_new_nodes=True).run()
    # the refused jobs released the lock and did not write anything
    assert LocalDirectoryStore(tmp_path).list_epochs() == [1, 2]


def test_node_whose_pipeline_in_front_changed_is_named_in_the_refusal(tmp_path: Path) -> None:
    def graph(insert_map: bool) -> Stream:
        source = Stream.from_iterable(list(range(5)), name="numbers")
        upstream = source.map(lambda x: x) if insert_map else source
        upstream.accumulate(total, start=0).sink_to_list()
        return source

    Job(graph(False), checkpoint=tmp_path, every=None).run()
    with pytest.raises(CheckpointMismatchError) as info:
        Job(graph(True), checkpoint=tmp_path, every=None).run()
    msg = str(info.value)
    # the derived id stays accumulate-1:total; its place in the signature changed
    assert "moved: accumulate-1:total: the pipeline in front of node accumulate-1:total" in msg
    assert "explicit names (e.g. .accumulate(f, name='totals'))" in msg
    # the remedy named in the message works: the id as an explicit name
    remedy = re.search(r"pass name='(accumulate-1:total)' to it", msg)
    assert remedy is not None, msg
    source = Stream.from_iterable(list(range(8)), name="numbers")
    out = source.map(lambda x: x).accumulate(total, start=0, name=remedy.group(1)).sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    # the list sink below it keeps its derived id and place, so it is restored as well
    assert out == [0, 1, 3, 6, 10, 15, 21, 28]


def test_allow_new_nodes_starts_them_empty(tmp_path: Path) -> None:
    def graph(n: int, extra: bool) -> tuple[Stream, list[int], list[int]]:
        source = Stream.from_iterable(list(range(n)), name="numbers")
        mapped = source.map(lambda x: x)
        old = mapped.accumulate(total, start=0, name="sum").sink_to_list(name="old")
        new = mapped.accumulate(total, start=0, name="extra").sink_to_list() if extra else []
        return source, old, new

    Job(graph(10, False)[0], checkpoint=tmp_path, every=None).run()
    source, old, new = graph(20, True)
    job = Job(source, checkpoint=tmp_path, every=None, allow_new_nodes=True)
    job.run()
    assert old == expected(20)
    assert new == [sum(range(10, k + 1)) for k in range(10, 20)]


def test_not_replayable_source_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = Stream.from_iterable(x for x in range(5))
    out = source.sink_to_list()
    with caplog.at_level(logging.WARNING):
        Job(source, checkpoint=tmp_path, every=None).run()
    assert out == [0, 1, 2, 3, 4]
    assert any("at-most-once" in r.getMessage() for r in caplog.records)


def test_every_batches_triggers_checkpoints(tmp_path: Path) -> None:
    source, _, results, _ = build(50000)
    Job(source, checkpoint=tmp_path, every=None, every_batches=2000, keep=100).run()
    assert results == expected(50000)
    assert len(LocalDirectoryStore(tmp_path).list_epochs()) >= 3


def test_explicit_checkpoint_and_stop_from_another_thread(tmp_path: Path) -> None:
    gate = threading.Event()
    source = Stream.from_iterable(list(range(100000)), name="numbers")

    def slow(x: int) -> int:
        if x == 10:
            gate.set()
        return x

    results = source.map(slow).accumulate(total, start=0).sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    t = threading.Thread(target=job.run)
    t.start()
    gate.wait(10)
    wait_for(lambda: job._running)
    epoch = job.checkpoint()
    assert epoch >= 2
    job.stop()
    t.join(20)
    assert not t.is_alive()
    store = LocalDirectoryStore(tmp_path)
    last = store.read_manifest(store.list_epochs()[-1])
    assert last.positions["numbers"] == len(results)


def test_a_checkpoint_asked_for_as_the_job_ends_gets_the_final_epoch(tmp_path: Path) -> None:
    # the request comes after the stop: the job ends without serving it, and
    # the final checkpoint (which covers every record) answers it
    source = Stream.from_iterable(list(range(100)), name="numbers")
    asked: list[asyncio.Future[int]] = []

    def at(x: int) -> None:
        if x == 10:
            job.stop()
            asked.append(asyncio.ensure_future(job.checkpoint_async()))

    source.sink(at)
    job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    assert asked and asked[0].done()
    assert asked[0].result() == job.epoch == LocalDirectoryStore(tmp_path).list_epochs()[-1]


def test_run_async_on_current_loop(tmp_path: Path) -> None:
    async def main() -> list[int]:
        source = Stream.from_iterable(list(range(30)), name="numbers")
        out = source.accumulate(total, start=0).sink_to_list()
        await Job(source, checkpoint=tmp_path, every="10ms").run_async()
        return out

    assert asyncio.run(main()) == expected(30)


def test_bad_arguments_are_configuration_errors(tmp_path: Path) -> None:
    source, *_ = build(3)
    with pytest.raises(ConfigurationError, match="keep"):
        Job(source, checkpoint=tmp_path, keep=0)
    with pytest.raises(ConfigurationError, match="every_batches"):
        Job(source, checkpoint=tmp_path, every_batches=0)


def _boom_graph(n: int) -> tuple[Stream, list[int]]:
    source = Stream.from_iterable(list(range(n)), name="numbers")

    def boom(x: int) -> int:
        if x == 5:
            raise ValueError("boom")
        return x

    return source, source.map(boom).accumulate(total, start=0).sink_to_list()


def test_failing_source_stops_job_and_releases_lock(tmp_path: Path) -> None:
    from rivermark.checkpoint import JobFailedError

    source, _ = _boom_graph(20)
    with pytest.raises(JobFailedError) as info:
        Job(source, checkpoint=tmp_path, every=None).run()
    # the message carries the cause: node, function, record, and what to do
    msg = str(info.value)
    # the node whose function raised is named, not the source that fed it
    assert re.search(r"Job: node map-1:boom failed: Map: user function", msg), msg
    assert "'_boom_graph.<locals>.boom' raised ValueError: boom on record 5" in msg
    assert "numbers" not in msg and "from_iterable" not in msg
    assert re.search(r"\(at .*test_job\.py:\d+ in boom\)", msg), msg
    # the cause is the user's own exception
    assert type(info.value.__cause__) is ValueError
    assert "run again to resume from it" in msg
    # on_error="skip" for the job's nodes: the same directory can be reused
    source, out = _boom_graph(20)
    Job(source, checkpoint=tmp_path, every=None, on_error="skip").run()
    assert out[-1] == sum(range(20)) - 5


@pytest.mark.parametrize("stage", ["delay", "map_async", "buffer"])
def test_failure_in_background_work_stops_the_job_and_a_rerun_loses_nothing(
    tmp_path: Path, stage: str
) -> None:
    """A raise-policy error behind an asynchronous node: no checkpoint passes the record."""

    def graph(fail: bool) -> tuple[Stream, list[int]]:
        source = Stream.from_iterable(list(range(40)), name="numbers")

        def check(x: int) -> int:
            if fail and x == 17:
                raise ValueError("bad record 17")
            return x

        async def acheck(x: int) -> int:
            await asyncio.sleep(0.0005)
            return check(x)

        if stage == "delay":
            held = source.delay(0.002).map(check)
        elif stage == "buffer":
            held = source.buffer(4).map(check)
        else:
            held = source.map_async(acheck, parallelism=3)
        out = held.accumulate(total, start=0, name="sum").sink_to_list(name="out")
        return source, out

    source, _ = graph(fail=True)
    with pytest.raises(JobFailedError) as info:
        Job(source, checkpoint=tmp_path, every=0.002).run()
    assert "bad record 17" in str(info.value)
    source, out = graph(fail=False)
    Job(source, checkpoint=tmp_path, every=None).run()
    assert out == [sum(range(k + 1)) for k in range(40)]


def test_emit_fed_root_warns_and_runs_until_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = Stream(name="manual")
    acc = root.accumulate(total, start=0, name="sum")
    out = acc.sink_to_list()
    job = Job(root, checkpoint=tmp_path, every=None)
    with caplog.at_level(logging.WARNING):
        t = threading.Thread(target=job.run)
        t.start()
        wait_for(lambda: job._running)
        for x in range(5):
            root.emit(x)
        assert job.checkpoint() >= 2
        job.stop()
        t.join(20)
    assert not t.is_alive()
    assert out == [0, 1, 3, 6, 10]
    assert any(
        "manual" in r.getMessage() and "at-most-once" in r.getMessage() for r in caplog.records
    )
    # resume: the accumulator continues from the checkpointed state
    root = Stream(name="manual")
    out2 = root.accumulate(total, start=0, name="sum").sink_to_list()
    job = Job(root, checkpoint=tmp_path, every=None)
    t = threading.Thread(target=job.run)
    t.start()
    wait_for(lambda: job._running)
    root.emit(100)
    job.stop()
    t.join(20)
    assert out2 == [0, 1, 3, 6, 10, 110]


def test_exactly_once_refuses_weak_sinks_and_sources(tmp_path: Path) -> None:
    source = Stream.from_iterable([1, 2], name="numbers")
    source.sink(print)
    with pytest.raises(ConfigurationError, match="exactly_once=True.*<sink: print>"):
        Job(source, checkpoint=tmp_path, exactly_once=True)
    gen = Stream.from_iterable(x for x in range(3))
    gen.sink_to_textfile(str(tmp_path / "out.txt"))
    with pytest.raises(ConfigurationError, match="not replayable"):
        Job(gen, checkpoint=tmp_path, exactly_once=True)
    ok = Stream.from_iterable([1, 2], name="numbers")
    ok.sink_to_textfile(str(tmp_path / "ok.txt"))
    Job(ok, checkpoint=tmp_path / "c", every=None, exactly_once=True).run()
    assert (tmp_path / "ok.txt").read_text() == "1\n2\n"


def test_job_gives_sinks_a_stable_job_id(tmp_path):
    from rivermark import Job, Stream

    def build():
        s = Stream.from_iterable([1, 2])
        sink = s.sink_to_textfile(str(tmp_path / "out.txt"))
        sink.job_id = None  # a sink that asks for the job's id (as to_kafka does)
        return s, sink

    s1, sink1 = build()
    job1 = Job(s1, checkpoint=str(tmp_path / "ckpt"))
    s2, sink2 = build()
    job2 = Job(s2, checkpoint=str(tmp_path / "ckpt"))
    assert sink1.job_id == sink2.job_id == job1.job_id == job2.job_id
    assert job1.job_id.startswith("ckpt-")
    assert Job(build()[0], checkpoint=str(tmp_path / "other")).job_id != job1.job_id


def test_a_failing_builtin_is_not_located_in_generated_code(tmp_path: Path) -> None:
    source = Stream.from_iterable(["1", "x", "3"], name="src")
    source.map(int, name="parse").sink_to_list()
    with pytest.raises(JobFailedError) as err:
        Job(source, checkpoint=tmp_path, every=None).run()
    msg = str(err.value)
    assert "user function 'int' raised ValueError" in msg, msg
    assert "<rivermark" not in msg, msg
