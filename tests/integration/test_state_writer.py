"""``write_savepoint``: state read from one job, written back, resumed by another, exactly.

Real jobs on real directories (and a real S3 API server on loopback): every
built-in stateful operator round-trips through ``read`` and
``write_savepoint``; one key's value is corrected; a source's position is
moved; ids the graph does not have and non-empty locations are refused; a
configured key signs the savepoint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore, codec, read, write_savepoint
from rivermark.checkpoint.errors import CheckpointSignatureError
from rivermark.checkpoint.signing import Keyring, Trust
from rivermark.core import graph
from rivermark.core.inputend import EndsWithInput
from rivermark.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
N = 40
DATA = list(range(N))
#: the first run stops right after this record: part way, with state held
STOP = 22
KEY = "k" * 32
OTHER_KEY = "o" * 32


def _count_by_three(acc: KeyedState, x: int) -> KeyedState:
    acc[x % 3] = acc.get(x % 3, 0) + 1
    return acc


def _event_time(x: int) -> float:
    return float(x + 10 * (x // 8))  # gaps of 10 s after every 8 records


def _process(ctx: Any, x: int) -> None:
    if ctx.state is None:
        ctx.set_timer(ctx.time + 6)
    ctx.state = (ctx.state or 0) + x


def _report(ctx: Any, t: float) -> None:
    ctx.emit((ctx.key, t, ctx.state))
    ctx.state = None


def _collect(src: Stream) -> list[Any]:
    c = src.collect(name="op")
    out = c.sink_to_list(name="out")
    src.filter(lambda x: x % 5 == 4).sink(c.flush)
    return out


@dataclass(frozen=True)
class Case:
    """A pipeline on top of the source; its stateful node under test is named ``op``."""

    name: str
    build: Callable[[Stream], list[Any]]
    #: windows cut by wall-clock time: the records, in order, are what is compared
    flat: bool = False
    #: whether the state of ``op`` at the stop is certain to matter to the output
    holds: bool = True


CASES = [
    Case(
        "accumulate",
        lambda s: s.accumulate(lambda a, x: a + x, start=0, name="op").sink_to_list(name="out"),
    ),
    Case(
        "accumulate-keyed",
        lambda s: (
            s.accumulate(_count_by_three, start=KeyedState(), name="op")
            .map(dict)
            .sink_to_list(name="out")
        ),
    ),
    Case("frequencies", lambda s: s.map(lambda x: x % 4).frequencies(name="op").sink_to_list()),
    Case("slice", lambda s: s.slice(3, 35, 4, name="op").sink_to_list(name="out")),
    Case("unique", lambda s: s.map(lambda x: x % 7).unique(name="op").sink_to_list(name="out")),
    Case(
        "unique-lru",
        lambda s: s.map(lambda x: x // 2 % 5).unique(maxsize=3, name="op").sink_to_list(name="out"),
    ),
    Case("collect", _collect),
    Case("sliding_window", lambda s: s.sliding_window(4, name="op").sink_to_list(name="out")),
    Case("partition", lambda s: s.partition(5, name="op").sink_to_list(name="out")),
    Case(
        "partition-keyed",
        lambda s: s.partition(4, key=lambda x: x % 3, name="op").sink_to_list(name="out"),
    ),
    Case(
        "partition_unique",
        lambda s: s.map(lambda x: x % 9).partition_unique(4, name="op").sink_to_list(name="out"),
    ),
    Case(
        "zip",
        lambda s: s.zip(s.filter(lambda x: x % 2 == 0), maxsize=1000, name="op").sink_to_list(
            name="out"
        ),
    ),
    Case(
        "zip_latest",
        lambda s: s.zip_latest(s.filter(lambda x: x % 5 == 0), name="op").sink_to_list(name="out"),
    ),
    Case(
        "combine_latest",
        lambda s: s.combine_latest(s.filter(lambda x: x % 5 == 3), name="op").sink_to_list(
            name="out"
        ),
    ),
    Case("sink_to_list", lambda s: s.map(lambda x: x * 2).sink_to_list(name="op")),
    Case("timed_window", lambda s: s.timed_window("1s", name="op").sink_to_list(), flat=True),
    Case(
        "timed_window_unique",
        lambda s: s.timed_window_unique("1s", name="op").sink_to_list(),
        flat=True,
    ),
    Case("delay", lambda s: s.delay("1s", name="op").sink_to_list(name="out"), flat=True),
    # what a buffer holds at the stop depends on how fast its downstream was
    Case("buffer", lambda s: s.buffer(8, name="op").sink_to_list(name="out"), holds=False),
    Case(
        "tumbling_window",
        lambda s: (
            s.timestamps(_event_time, name="ts")
            .tumbling_window(6, agg="count", name="op")
            .map(tuple)  # a WindowResult is pickled in a state file; a tuple is data
            .sink_to_list(name="out")
        ),
    ),
    Case(
        "hopping_window",
        lambda s: (
            s.timestamps(_event_time, name="ts")
            .hopping_window(10, 5, agg="sum", name="op")
            .map(tuple)  # a WindowResult is pickled in a state file; a tuple is data
            .sink_to_list(name="out")
        ),
    ),
    Case(
        "session_window",
        lambda s: (
            s.timestamps(_event_time, name="ts")
            .session_window(4, key=lambda x: x % 2, agg="collect", name="op")
            .map(tuple)  # a WindowResult is pickled in a state file; a tuple is data
            .sink_to_list(name="out")
        ),
    ),
    Case(
        "keyed_process",
        lambda s: (
            s.timestamps(_event_time, name="ts")
            .keyed_process(_process, key=lambda x: x % 3, on_timer=_report, name="op")
            .sink_to_list(name="out")
        ),
    ),
]


def pipeline(
    case: Case, items: list[Any], jobs: list[Job] | None = None, savepoint: bool = False
) -> tuple[Stream, list[Any]]:
    """The case's graph on ``items``; with ``jobs``, ``jobs[0]`` stops after record STOP."""
    source = Stream.from_iterable(items, name="numbers")
    out = case.build(source)
    # the same graph in every run: only what the stopper does differs
    source.sink(lambda x: jobs is not None and x == STOP and jobs[0].stop(savepoint=savepoint))
    return source, out


def run_part_way(case: Case, ckpt: Path, savepoint: bool = False) -> None:
    jobs: list[Job] = []
    source, _ = pipeline(case, DATA, jobs, savepoint)
    jobs.append(Job(source, checkpoint=str(ckpt), every=None))
    jobs[0].run()


def resume(case: Case, savepoint: str | Path, ckpt: Path) -> list[Any]:
    source, out = pipeline(case, DATA)
    Job(source, checkpoint=str(ckpt), every=None, from_savepoint=str(savepoint)).run()
    return out


def uninterrupted(case: Case) -> list[Any]:
    """The case's pipeline fed every record by ``emit``, without a job or checkpoints."""
    if case.flat:
        return list(DATA)
    root = Stream()
    out = case.build(root)
    for x in DATA:
        root.emit(x)
    for n in graph.topological(root):
        if isinstance(n, EndsWithInput):
            n.end_of_input()
    return out


def shown(case: Case, out: list[Any]) -> list[Any]:
    if case.flat and out and isinstance(out[0], (list, tuple)):
        return [x for window in out for x in window]
    return list(out)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_stateful_operator_round_trips_through_read_and_write(
    case: Case, tmp_path: Path
) -> None:
    run_part_way(case, tmp_path / "first")
    old = read(tmp_path / "first")
    assert STOP < old.positions["numbers"] < N  # stopped part way
    assert "op" in old.state

    source, _ = pipeline(case, DATA)
    epoch = write_savepoint(tmp_path / "sp", source, state=old.state, positions=old.positions)
    manifest = LocalDirectoryStore(tmp_path / "sp").load_manifest(epoch)
    assert manifest.savepoint and manifest.format == 4
    assert all(link == {"parent": None, "base": epoch} for link in manifest.chains.values())

    expected = uninterrupted(case)
    assert shown(case, resume(case, tmp_path / "sp", tmp_path / "resumed")) == expected
    if case.holds:
        # the state of op is what made it exact: without it the output differs
        without = {nid: s for nid, s in old.state.items() if nid != "op"}
        source, _ = pipeline(case, DATA)
        write_savepoint(tmp_path / "sp2", source, state=without, positions=old.positions)
        assert shown(case, resume(case, tmp_path / "sp2", tmp_path / "resumed2")) != expected


def test_a_written_savepoint_is_byte_for_byte_what_the_job_wrote(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "accumulate-keyed")
    run_part_way(case, tmp_path / "job", savepoint=True)
    ours = LocalDirectoryStore(tmp_path / "job")
    real = ours.load_manifest(ours.list_epochs()[-1])
    assert real.savepoint and set(real.chains) == {"op"}

    old = read(tmp_path / "job")
    assert old.state["op"] == {"state": {0: 8, 1: 8, 2: 7}}
    source, _ = pipeline(case, DATA)
    epoch = write_savepoint(
        tmp_path / "sp", source, state=old.state, positions=old.positions, epoch=real.epoch
    )
    store = LocalDirectoryStore(tmp_path / "sp")
    written = store.load_manifest(epoch)
    assert written.fingerprint == real.fingerprint
    assert written.chains == real.chains and written.positions == real.positions
    assert {n: e["sha256"] for n, e in written.state.items()} == {
        n: e["sha256"] for n, e in real.state.items()
    }
    for nid in written.state:
        blob = store.read_state(epoch, nid)
        assert blob.startswith(codec.MAGIC) and not codec.has_pickle(blob)


def test_one_keys_value_is_corrected_and_the_job_counts_on_from_it(tmp_path: Path) -> None:
    words = ["river", "mark", "stream", "river", "mark", "river"] * 10

    def build(items: list[str]) -> tuple[Stream, list[dict[str, int]]]:
        source = Stream.from_iterable(items, name="words")
        counts = source.frequencies(name="counts")
        return source, counts.sink_to_list()

    source, _ = build(words[:30])
    Job(source, checkpoint=str(tmp_path / "ckpt"), every=None).run()
    old = read(tmp_path / "ckpt")
    assert old.state["counts"] == {"counts": {"river": 15, "mark": 10, "stream": 5}}

    state = dict(old.state)
    state["counts"] = {"counts": {**old.state["counts"]["counts"], "mark": 1000}}
    source, out = build(words)
    write_savepoint(tmp_path / "fixed", source, state=state, positions=old.positions)
    Job(
        source, checkpoint=str(tmp_path / "new"), every=None, from_savepoint=tmp_path / "fixed"
    ).run()
    assert out[-1] == {"river": 30, "mark": 1010, "stream": 10}
    # the sink's list came back with the savepoint too: the first 30 counts, then 30 more
    assert len(out) == 60 and out[29] == {"river": 15, "mark": 10, "stream": 5}
    assert out[30] == {"river": 16, "mark": 1000, "stream": 5}


def test_a_moved_text_file_position_resumes_at_the_line_it_names(tmp_path: Path) -> None:
    lines = [f"line {i}\n" for i in range(50)]
    path = tmp_path / "in.txt"
    path.write_text("".join(lines))
    source = Stream.from_textfile(str(path), stop_at_eof=True, poll_interval="5ms", name="lines")
    out = source.sink_to_list(name="out")
    offset = len("".join(lines[:37]).encode())
    write_savepoint(tmp_path / "sp", source, positions={"lines": {"offset": offset}})
    Job(source, checkpoint=str(tmp_path / "ckpt"), every=None, from_savepoint=tmp_path / "sp").run()
    assert out == lines[37:]


def test_a_moved_iterable_position_skips_ahead_and_keeps_the_state(tmp_path: Path) -> None:
    source = Stream.from_iterable(DATA, name="numbers")
    out = source.accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
    write_savepoint(
        tmp_path / "sp", source, state={"sum": {"state": 1000}}, positions={"numbers": 30}
    )
    Job(source, checkpoint=str(tmp_path / "ckpt"), every=None, from_savepoint=tmp_path / "sp").run()
    total = 1000
    expected = []
    for x in DATA[30:]:
        total += x
        expected.append(total)
    assert out == expected


def _refusal(excinfo: pytest.ExceptionInfo[BaseException], *needles: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def _graph() -> Stream:
    return _graph_and_output()[0]


def _graph_and_output() -> tuple[Stream, list[int]]:
    source = Stream.from_iterable(DATA, name="numbers")
    out = source.accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list(name="out")
    return source, out


def test_ids_the_graph_does_not_have_are_refused_with_the_ids_it_has(tmp_path: Path) -> None:
    sp = tmp_path / "sp"
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(sp, _graph(), state={"total": {"state": 1}})
    _refusal(e, "'total'", "not a stateful node", "out, sum")
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(sp, _graph(), positions={"sum": 3})
    _refusal(e, "'sum'", "not a source", "sources: numbers")
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(sp, _graph(), sinks={"out": {"length": 3}})
    _refusal(e, "'out'", "not a checkpointed sink", "(none)")
    assert not (sp / "checkpoints").exists() or not any((sp / "checkpoints").iterdir())


def test_a_state_that_cannot_fit_the_node_is_refused_at_write_time(tmp_path: Path) -> None:
    sp = tmp_path / "sp"
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(sp, _graph(), state={"sum": 6})
    _refusal(e, "'sum'", "must be a dict with the keys 'state'", "int 6")
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(sp, _graph(), state={"sum": {"total": 6}})
    _refusal(e, "'sum'", "has no key 'state'")
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(sp, _graph(), state={"out": {"L": [], "extra": 1}})
    _refusal(e, "'out'", "has a key 'extra'", "keeps the keys 'L'")
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(sp, _graph(), positions={"numbers": {1, 2}})
    _refusal(e, "'numbers'", "must be JSON")


def test_a_location_that_holds_checkpoints_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    Job(_graph(), checkpoint=str(ckpt), every=None).run()
    before = LocalDirectoryStore(ckpt).list_epochs()
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(ckpt, _graph(), state={"sum": {"state": 1}})
    _refusal(e, str(ckpt), "already holds checkpoints", "new, empty location")
    assert LocalDirectoryStore(ckpt).list_epochs() == before

    write_savepoint(tmp_path / "sp", _graph())
    with pytest.raises(ConfigurationError) as e:
        write_savepoint(tmp_path / "sp", _graph())
    _refusal(e, "already holds checkpoints (1)")


def test_with_a_key_the_savepoint_is_signed_and_another_key_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIVERMARK_CHECKPOINT_KEY", KEY)
    monkeypatch.delenv("RIVERMARK_CHECKPOINT_KEY_FILE", raising=False)
    epoch = write_savepoint(
        tmp_path / "sp", _graph(), state={"sum": {"state": 500}}, positions={"numbers": 38}
    )
    signed = json.loads(
        (tmp_path / "sp" / "checkpoints" / f"{epoch:012d}" / "manifest.json").read_text()
    )
    assert set(signed["signature"]) == {"key", "hmac"}
    store = LocalDirectoryStore(tmp_path / "sp", create=False)
    store.trust = Trust(Keyring.configured(KEY))
    assert store.load_manifest(epoch).signature_status == "ok"

    source, out = _graph_and_output()
    Job(source, checkpoint=str(tmp_path / "ok"), every=None, from_savepoint=tmp_path / "sp").run()
    assert out == [538, 577]

    with pytest.raises(CheckpointSignatureError, match="none of this job's keys"):
        Job(
            _graph(),
            checkpoint=str(tmp_path / "other"),
            every=None,
            from_savepoint=tmp_path / "sp",
            checkpoint_key=OTHER_KEY,
        ).run()
    assert not LocalDirectoryStore(tmp_path / "other").list_epochs()


def test_a_savepoint_read_from_a_directory_and_written_to_s3_resumes_exactly(
    tmp_path: Path, bucket: str
) -> None:
    case = next(c for c in CASES if c.name == "partition-keyed")
    run_part_way(case, tmp_path / "local")
    old = read(tmp_path / "local")
    url = f"s3://{bucket}/savepoints/moved"
    source, _ = pipeline(case, DATA)
    write_savepoint(url, source, state=old.state, positions=old.positions)
    assert read(url).state == old.state
    assert shown(case, resume(case, url, tmp_path / "resumed")) == uninterrupted(case)


def test_the_example_of_docs_upgrading_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = (ROOT / "docs" / "upgrading.md").read_text()
    blocks = [
        b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S) if "write_savepoint" in b
    ]
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "docs/upgrading.md", "exec"), namespace)
    assert namespace["fixed"][-1] == {"river": 8, "mark": 2}


def test_dataframe_aggregations_round_trip_without_a_key(tmp_path: Path) -> None:
    # a groupby sum over string keys and a mean: their state (partials, the
    # frame's schema) is data, read and written back without a key
    import pandas as pd

    from rivermark.dataframe import DataFrame

    frames = [
        pd.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]}),
        pd.DataFrame({"k": ["c", "b"], "v": [4, 5]}),
        pd.DataFrame({"k": ["a", "d"], "v": [10, 1]}),
    ]

    def build(items: list[Any]) -> tuple[Stream, list[Any], list[Any]]:
        source = Stream.from_iterable(items, name="frames")
        sdf = DataFrame(source, example=frames[0])
        sums = sdf.groupby("k").v.sum().stream.sink_to_list(name="sums")
        means = sdf.v.mean().stream.sink_to_list(name="means")
        return source, sums, means

    first, _, _ = build(frames[:2])
    Job(first, checkpoint=tmp_path / "first", every=None).run()
    old = read(tmp_path / "first")
    aggregates = {nid: s for nid, s in old.state.items() if nid not in ("sums", "means")}
    assert len(aggregates) == 2
    source, sums, means = build(frames)
    write_savepoint(tmp_path / "sp", source, state=aggregates, positions=old.positions)
    Job(source, checkpoint=tmp_path / "resumed", every=None, from_savepoint=tmp_path / "sp").run()
    assert sums[-1].to_dict() == {"a": 14, "b": 7, "c": 4, "d": 1}
    assert means[-1] == pytest.approx(sum([1, 2, 3, 4, 5, 10, 1]) / 7)
    assert len(sums) == len(means) == 1  # only the third frame was read
