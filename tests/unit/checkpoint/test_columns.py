"""Keyed state written column by column: exact round trips, compaction, older state files."""

from __future__ import annotations

import random
import re
import shutil
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.columns import Columns, compact
from rivermark.checkpoint.state.keyed import compacted, materialise
from rivermark.checkpoint.tools.inspection import read_node_state
from rivermark.state import DELETED, apply_delta

#: a checkpoint directory written by rivermark before state files held columns
#: (the windows as tuple columns, the counts as a dict); made by running
#: ``python tests/unit/checkpoint/test_columns.py DIR`` with that version first
#: on ``sys.path``
OLD = Path(__file__).parent / "data" / "old-encoding-windows"

N, STOP_AT = 4000, 2500
_job: list[Job] = []


def event_time(r: tuple[int, int]) -> float:
    return r[0] * 0.05


def value_of(r: tuple[int, int]) -> int:
    return r[0] % 13


def count(acc: KeyedState, r: tuple[int, int]) -> KeyedState:
    acc[r[1]] = acc.get(r[1], 0) + 1
    return acc


def stop_at(r: tuple[int, int]) -> tuple[int, int]:
    if r[0] == STOP_AT and _job:
        _job[0].stop()
    return r


def build(n: int) -> tuple[Stream, list[Any], Stream]:
    source = Stream.from_iterable([(i, (i * 7) % 100) for i in range(n)], name="events")
    rec = source.map(stop_at, name="stopper")
    windows = rec.timestamps(event_time, name="times").tumbling_window(
        10, key=1, agg="sum", value=value_of, grace=100, name="windows"
    )
    out: list[Any] = []
    windows.sink(out.append)
    counts = rec.accumulate(count, start=KeyedState(), name="counts")
    return source, out, counts


def run(ckpt: Path, n: int, stop: bool) -> tuple[Job, list[Any], Stream]:
    source, out, counts = build(n)
    job = Job(source, checkpoint=ckpt, every=None)
    _job[:] = [job] if stop else []
    job.run()
    return job, out, counts


def test_a_mapping_is_written_by_columns_and_reads_back_with_its_types() -> None:
    windows: dict[Any, Any] = {(k % 7, float(k)): (float(k) + 10.0, k, (k, 1)) for k in range(200)}
    windows[(3, 5000.0)] = DELETED
    columns = Columns.of(windows)
    assert isinstance(columns, Columns)
    # numbers are buffers of machine numbers, not one msgpack value each
    assert [type(c) for c in columns.keys] == [array, array]
    assert [type(c) for c in columns.values] == [array, array, list]
    blob = codec.dumps({"keyed": {"open": columns}})
    back = codec.loads(blob)["keyed"]["open"]
    assert back == windows and not codec.has_pickle(blob)
    assert list(map(type, next(iter(back)))) == [int, float]
    # scalar keys and values (a keyed accumulator), and columns that are not
    # all numbers of one type: each value keeps its type
    odd = [True, 2**70, "s", 1.5, 2, None, b"b", (1, 2)]
    scalars: dict[Any, Any] = {k: odd[k % len(odd)] for k in range(100)}
    scalars.update({f"k{k}": k for k in range(100)})
    blob = codec.dumps(Columns.of(scalars))
    back = codec.loads(blob)
    assert back == scalars and [type(v) for v in back.values()] == [
        type(v) for v in scalars.values()
    ]
    floats_and_ints = {k: (float(k) if k % 2 else k,) for k in range(100)}
    back = codec.loads(codec.dumps(Columns.of(floats_and_ints)))
    assert [type(v[0]) for v in back.values()] == [type(v[0]) for v in floats_and_ints.values()]
    # shapes that are not columns stay dicts: short, keys of several lengths
    assert Columns.of({(1, 2): (3,)}) == {(1, 2): (3,)}
    mixed = {**{(k, 0.0): (k,) for k in range(100)}, (1,): (2,)}
    assert Columns.of(mixed) is mixed
    half = {**{k: (k,) for k in range(100)}, "x": 1}
    assert Columns.of(half) is half


def test_a_bad_columns_part_is_refused_as_not_valid() -> None:
    bad = codec.MAGIC + codec.pack(
        __import__("msgpack").ExtType(
            int(codec.Tag.COLUMNS), codec.pack([0, 0, [["<x", b""]], [], []])
        )
    )
    with pytest.raises(ValueError, match="not a column: kind '<x'"):
        codec.loads(bad)


def _chain(rng: random.Random, key: Any) -> list[dict[Any, Any]]:
    """A base and deltas over keys made by ``key(i)``: updates, deletions, keys coming back."""
    base = {key(i): (float(i), i, rng.choice([1, 2.5, "x"])) for i in range(300)}
    chain = [base]
    for d in range(4):
        delta: dict[Any, Any] = {}
        for i in rng.sample(range(400), 150):
            delta[key(i)] = DELETED if rng.random() < 0.3 else (float(i), d, rng.random())
        chain.append(delta)
    return chain


@pytest.mark.parametrize(
    "key",
    [
        lambda i: (i % 37, float(i // 37) * 10.0),  # numbers: merged as numpy arrays
        lambda i: (f"user-{i % 37}", float(i // 37)),  # strings: by the dict's equality
        lambda i: i,  # scalar keys
        lambda i: (i % 5 if i % 2 else float(i % 5), i // 5),  # 1 and 1.0 are one key
    ],
    ids=["numbers", "strings", "scalars", "ints-and-floats"],
)
def test_compaction_by_columns_gives_the_dicts_merge(key: Any) -> None:
    rng = random.Random(7)
    chain = _chain(rng, key)
    expected: dict[Any, Any] = {}
    for d in chain:
        apply_delta(expected, d)
    columns = [Columns.from_mapping(d) for d in chain]
    assert None not in columns
    merged = compact(columns)  # type: ignore[arg-type]
    assert merged is not None and not merged.deleted
    # the same keys and values, in the same order (a key updated keeps its place,
    # one deleted and set again goes last), with the same key objects
    assert list(merged.to_dict().items()) == list(expected.items())
    assert list(map(type, merged.to_dict())) == list(map(type, expected))
    # through the state files, as a compaction reads its chain from the store
    blobs = [codec.dumps({"rest": {}, "keyed": {"a": Columns.of(d)}}) for d in chain[:-1]]
    out = compacted(blobs, {"a": chain[-1]})
    assert list(codec.loads(codec.dumps(out))["a"].items()) == list(expected.items())


@pytest.mark.parametrize("empty_first", ["empty base", "deletes only"])
def test_compaction_after_a_chunk_without_live_rows_keeps_the_values_whole(
    empty_first: str,
) -> None:
    # a join's waiting records: a base written when nothing waited (value width 0),
    # or a delta that only deleted, then deltas of (time, key, record) rows
    first: dict[Any, Any] = {} if empty_first == "empty base" else {1: DELETED, 2: DELETED}
    chain: list[dict[Any, Any]] = [
        first,
        {i: (float(i), f"k{i % 3}", {"n": i}) for i in range(3, 9)},
        {3: DELETED, 9: (9.5, "k0", {"n": 9})},
    ]
    expected: dict[Any, Any] = {}
    for d in chain:
        apply_delta(expected, d)
    columns = [Columns.from_mapping(d) for d in chain]
    assert None not in columns and columns[0].value_width == 0  # type: ignore[union-attr]
    merged = compact(columns)  # type: ignore[arg-type]
    assert merged is not None
    assert list(merged.to_dict().items()) == list(expected.items())


def _versions(rng: random.Random, k: int) -> tuple[tuple[float, Any], ...]:
    """A table's versions of key ``k``: 1-4 ``(time, value)`` pairs (value None: deleted)."""
    n = rng.randint(1, 4)
    return tuple((float(j) + 0.5, rng.choice([k, None, "s", 2.5])) for j in range(n))


def test_a_tables_versions_are_written_by_nested_columns_and_read_back_exactly() -> None:
    rng = random.Random(11)
    table: dict[Any, Any] = {k: _versions(rng, k) for k in range(300)}
    table[1000] = DELETED
    columns = Columns.of(table)
    # tuples of (time, value) pairs, 1 to 4 of them: the pairs' columns and their counts
    assert isinstance(columns, Columns) and columns.counts is not None
    assert columns.value_width == 2 and type(columns.values[0]) is array
    assert sum(columns.counts) == sum(len(v) for v in table.values() if v is not DELETED)
    blob = codec.dumps({"keyed": {"versions": columns}})
    back = codec.loads(blob)["keyed"]["versions"]
    assert back == table and not codec.has_pickle(blob)

    def types(m: dict[Any, Any]) -> list[type]:
        return [type(x) for v in m.values() if v is not DELETED for pair in v for x in pair]

    assert types(back) == types(table)  # None, str, float and int each come back as such
    # values of one length whose items are tuples: nested too (what a table often holds)
    pairs = {k: ((1.0, k), (2.0, k)) for k in range(100)}
    assert Columns.of(pairs).counts is not None  # type: ignore[union-attr]
    assert codec.loads(codec.dumps(Columns.of(pairs))) == pairs
    # not nested: items that are not tuples of one length, or values that are not all tuples
    odd = {**{k: ((1.0, k),) for k in range(100)}, "x": ((1.0, 2, 3),)}
    not_nested = Columns.of(odd)
    assert isinstance(not_nested, Columns) and not_nested.counts is None
    assert codec.loads(codec.dumps(not_nested)) == odd
    mixed = {**{k: ((1.0, k),) for k in range(100)}, "y": 5}
    assert Columns.of(mixed) is mixed


def test_a_nested_columns_part_with_bad_counts_is_refused_as_not_valid() -> None:
    columns = Columns.of({k: ((1.0, k),) * (k % 3 + 1) for k in range(100)})
    parts = columns.parts()
    assert len(parts) == 6
    msgpack = __import__("msgpack")
    bad_counts = [*parts[:5], ["", [1, 2]]]
    blob = codec.MAGIC + codec.pack(msgpack.ExtType(int(codec.Tag.COLUMNS), codec.pack(bad_counts)))
    with pytest.raises(ValueError, match=re.escape("the counts of nested values are not integers")):
        codec.loads(blob)
    few = array("q", [1] * 100)  # fewer items than the values hold
    blob = codec.MAGIC + codec.pack(
        msgpack.ExtType(int(codec.Tag.COLUMNS), codec.pack([*parts[:5], ["<i8", few.tobytes()]]))
    )
    with pytest.raises(ValueError, match=re.escape("more nested items than their counts")):
        codec.loads(blob)


def test_compaction_of_a_tables_chain_by_nested_columns_gives_the_dicts_merge() -> None:
    rng = random.Random(5)
    chain: list[dict[Any, Any]] = [{k: _versions(rng, k) for k in range(300)}]
    for _ in range(4):
        delta: dict[Any, Any] = {}
        for k in rng.sample(range(400), 150):
            delta[k] = DELETED if rng.random() < 0.3 else _versions(rng, k)
        chain.append(delta)
    expected: dict[Any, Any] = {}
    for d in chain:
        apply_delta(expected, d)
    columns = [Columns.from_mapping(d) for d in chain]
    assert None not in columns  # versions of 1 to 4 pairs: columns, not dicts
    merged = compact(columns)  # type: ignore[arg-type]
    assert merged is not None and merged.counts is not None
    assert list(merged.to_dict().items()) == list(expected.items())
    blobs = [codec.dumps({"rest": {}, "keyed": {"a": Columns.of(d)}}) for d in chain[:-1]]
    out = compacted(blobs, {"a": chain[-1]})
    assert type(out["a"]) is Columns  # merged by columns
    assert list(codec.loads(codec.dumps(out))["a"].items()) == list(expected.items())


def test_a_jobs_table_is_checkpointed_by_nested_columns_and_read_back_by_the_tools(
    tmp_path: Path,
) -> None:
    # 300 keys, 1 to 3 versions each at the end (a join keeps the older ones it may need)
    changes = [(float(t), t % 300, t * 10) for t in range(900)]
    lefts = [(float(t) + 0.5, t % 300) for t in range(0, 900, 7)]
    records = sorted([("T", *c) for c in changes] + [("L", *x) for x in lefts], key=lambda r: r[1])
    source = Stream.from_iterable(records, name="input")
    table = (
        source.filter(lambda r: r[0] == "T", name="changes")
        .timestamps(lambda r: r[1], max_delay=50, name="table_times")
        .to_table(key=2, value=lambda r: r[3], name="table")
    )
    source.filter(lambda r: r[0] == "L", name="lefts").timestamps(
        lambda r: r[1], max_delay=50, name="left_times"
    ).join_asof(table, key=2, how="left", name="join").sink_to_list()
    job = Job(source, checkpoint=tmp_path / "c", every=None)
    job.run()
    store = LocalDirectoryStore(tmp_path / "c")
    blob = store.load_chains(job.epoch)[1]["table"][-1]
    part = codec.loads(blob, columns=True)["keyed"]["versions"]
    assert type(part) is Columns and part.counts is not None  # nested, not a dict
    assert max(part.counts) > 1  # keys with several versions
    assert not codec.has_pickle(blob)
    # the state tools read the versions back as the table holds them
    assert read_node_state(store, job.epoch, "table")["versions"] == dict(table._versions)


def test_a_checkpoint_of_the_older_encoding_restores_and_compacts(tmp_path: Path) -> None:
    ckpt = tmp_path / "c"
    shutil.copytree(OLD, ckpt)
    store = LocalDirectoryStore(ckpt)
    epoch = store.list_epochs()[-1]
    blob = store.load_chains(epoch)[1]["windows"][-1]
    assert codec.MAGIC in blob[:4] and b"\xc7" in blob  # written with tuple columns
    old_windows = read_node_state(store, epoch, "windows")["open"]
    old_counts = read_node_state(store, epoch, "counts")["state"]
    assert len(old_windows) >= 1000 and len(old_counts) == 100
    # compacting the old chain by columns gives what restoring it gives, in order
    old_blobs = store.load_chains(epoch)[1]["windows"]
    _, content = materialise(old_blobs)
    by_columns = compacted(old_blobs, {})
    assert type(by_columns["open"]) is Columns  # merged by columns, not by dicts
    merged = codec.loads(codec.dumps(by_columns))
    assert [list(v.items()) for v in merged.values()] == [list(v.items()) for v in content.values()]
    # the same windows as this version computes for the records before the stop
    _, first, counts_then = run(tmp_path / "again", N, stop=True)
    assert dict(counts_then.state) == old_counts
    # resumed from the old checkpoint: the rest of the windows, exactly
    job, rest, counts = run(ckpt, N, stop=False)
    assert job.restored_epoch == epoch
    _, whole, all_counts = run(tmp_path / "whole", N, stop=False)
    assert first + rest == whole and dict(counts.state) == dict(all_counts.state)
    # the new checkpoint (a base compacted from the old chain: its deltas outweigh
    # the empty start) restores
    assert job.checkpoints[-1].kind == "full"
    assert read_node_state(store, job.epoch, "counts")["state"] == dict(all_counts.state)


if __name__ == "__main__":  # writes the directory OLD with the rivermark on sys.path
    target = Path(sys.argv[1])
    run(target, N, stop=True)
    print(sorted(p.name for p in target.iterdir()))
