"""unique, frequencies and partition(key=...) keep KeyedState: delta chains restore exactly."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.state import codec
from rivermark.operators.stateful import Frequencies, Unique
from rivermark.operators.windows import Partition
from rivermark.state import DELETED

NODES = ("firsts", "freq", "groups")


def square_key(v: int) -> int:
    return v * v % 4099


def weekday(v: int) -> int:
    return v % 7


def eleventh(v: int) -> int:
    return v % 11


def build(records: list[int], out: Path) -> tuple[Stream, dict[str, Stream]]:
    source = Stream.from_iterable(records, name="values")
    firsts = source.map(square_key).unique(name="firsts")
    freq = source.map(weekday).frequencies(name="freq")
    groups = source.partition(4, key=eleventh, name="groups")
    lines = firsts.map(str).union(freq.map(str), groups.map(str))
    lines.sink_to_textfile(str(out))
    return source, {"firsts": firsts, "freq": freq, "groups": groups}


def plain(node: Stream) -> Any:
    """The node's state as plain values (a KeyedState as a dict)."""
    state = node.get_state()
    return {a: dict(v) if isinstance(v, KeyedState) else v for a, v in state.items()}


@pytest.mark.parametrize("compact_every", [50, 2])
def test_each_operator_is_restored_exactly_from_its_delta_chain(
    tmp_path: Path, compact_every: int
) -> None:
    # the first 3,000 records fill the states; later ones change few keys
    records = list(range(3000)) + [i * 13 % 3000 for i in range(1500)]
    ref_out = tmp_path / "ref.txt"
    source, ref = build(records, ref_out)
    Job(source, checkpoint=tmp_path / "ref", every=None).run()  # one uninterrupted run

    out, ckpt = tmp_path / "out.txt", tmp_path / "c"
    steps = 6
    for i in range(1, steps + 1):
        source, nodes = build(records[: len(records) * i // steps], out)
        Job(source, checkpoint=ckpt, every=None, compact_every=compact_every).run()
    assert out.read_bytes() == ref_out.read_bytes()

    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    last = store.verify(epochs[-1])
    for name in NODES:
        links = [store.read_manifest(e).chains[name] for e in epochs]
        assert links[0]["parent"] is None  # the start checkpoint is a base
        # deltas on bases (small states compact often: their deltas outweigh the base)
        assert any(link["parent"] is not None for link in links)
        if compact_every == 2:
            assert any(link["parent"] is None for link in links[1:])  # compacted
    # the last delta of the seen-set holds the few new keys, not all the keys seen
    if compact_every == 50:
        base = last.chains["firsts"]["base"]
        assert epochs[-1] - base >= 3  # several deltas on the base
        size = store.read_manifest(base).state["firsts"]["size"]
        assert last.state["firsts"]["size"] * 5 < size

    # restored from the chain (no record left to process): exactly the reference state
    source, restored = build(records, out)
    job = Job(source, checkpoint=ckpt, every=None, compact_every=compact_every)
    job.run()
    assert job.restored_epoch == epochs[-1]
    for name in NODES:
        assert plain(restored[name]) == plain(ref[name]), name
    assert isinstance(restored["firsts"], Unique) and isinstance(restored["freq"], Frequencies)
    assert isinstance(restored["groups"], Partition)
    assert dict(restored["groups"].get_state()["buffers"])  # groups were waiting


def test_partition_copies_changed_groups_at_the_barrier() -> None:
    s = Stream()
    p = s.partition(3, key=eleventh)
    L = p.sink_to_list()
    for v in (1, 12, 2):
        s.emit(v)
    buffers = p.get_state()["buffers"]
    delta = buffers.take_delta()
    assert delta.changes == {1: [1, 12], 2: [2]}
    s.emit(23)  # fills the group of key 1: emitted and removed
    s.emit(13)
    assert delta.changes == {1: [1, 12], 2: [2]}  # the view did not move
    assert L == [(1, 12, 23)]
    later = buffers.take_delta().changes
    assert later == {1: pickle.loads(pickle.dumps(later[1])), 2: [2, 13]}
    assert dict(buffers) == {2: [2, 13]}


@pytest.mark.parametrize(
    ("make", "old", "expected"),
    [
        (lambda s: s.unique(), {"seen": [3, 1, 2]}, {3: None, 1: None, 2: None}),
        (lambda s: s.frequencies(), {"counts": {"a": 2}}, {"a": 2}),
        (lambda s: s.partition(3, key=eleventh), {"buffers": [(1, [1])]}, {1: [1]}),
    ],
)
def test_a_checkpoint_written_before_keyed_state_is_restored(
    make: Any, old: dict[str, Any], expected: dict[Any, Any]
) -> None:
    node = make(Stream())
    node.set_state(old)
    (state,) = node.get_state().values()
    assert isinstance(state, KeyedState) and dict(state) == expected
    # nothing pending: the next checkpoint starts a chain with a base (a full copy)
    assert state.pending_changes() == 0


def test_unique_with_maxsize_or_unhashable_keys_keeps_its_plain_state() -> None:
    s = Stream()
    lru = s.unique(maxsize=2)
    lists = s.unique(hashable=False)
    for v in (1, 2, 1, 3):
        s.emit(v)
    assert lru.get_state() == {"seen": [1, 3]}
    assert lists.get_state() == {"seen": [3, 1, 2]}  # most recent first


def test_every_dict_method_that_changes_a_keyed_state_records_its_keys() -> None:
    ks = KeyedState({"a": 1, "b": 2, "c": 3, "d": 4})
    ks.take_delta()
    assert ks.pop("a") == 1 and ks.pop("zz", 0) == 0
    with pytest.raises(KeyError):
        ks.pop("zz")
    assert ks.popitem() == ("d", 4)
    assert ks.setdefault("e", 5) == 5 and ks.setdefault("b", 9) == 2
    ks.update({"f": 6}, g=7)
    ks |= {"h": 8}
    ks["i"] = 9
    del ks["i"]
    assert ks.take_delta().changes == {
        "a": DELETED, "d": DELETED, "e": 5, "f": 6, "g": 7, "h": 8, "i": DELETED,
    }  # fmt: skip
    assert ks == {"b": 2, "c": 3, "e": 5, "f": 6, "g": 7, "h": 8}
    ks.clear()  # no mark per key: the next checkpoint copies the (empty) mapping
    cleared = ks.take_delta()
    assert cleared.complete and cleared.changes == {} and not ks
    assert type(ks.copy()) is dict and isinstance(ks, dict)


def test_a_base_is_restored_as_unpickled_and_an_older_base_with_deleted_keys_too() -> None:
    from rivermark.checkpoint.state.keyed import KeyedView, materialise

    ks = KeyedState({1: "a", 2: "b"})
    del ks[2]  # before the first checkpoint, which copies the content
    view = KeyedView("n", pickle.dumps({}), {"state": ks.take_delta().changes}, None, 1)
    part = codec.loads(view.serialise())
    assert part["keyed"] == {"state": {1: "a"}} and part["base"] is True
    older = {"rest": pickle.dumps({}), "keyed": {"state": {1: "a", 2: DELETED}}}
    delta = {"rest": pickle.dumps({"x": 1}), "keyed": {"state": {3: "c", 1: DELETED}}}
    rest, content = materialise([pickle.dumps(older), pickle.dumps(delta)], allow_pickle=True)
    assert rest == {"x": 1} and content == {"state": {3: "c"}}


def test_without_checkpoints_nothing_is_recorded_and_the_first_checkpoint_copies_all() -> None:
    s = Stream()
    node = s.unique()
    for v in range(1000):
        s.emit(v % 300)
    seen = node.get_state()["seen"]
    assert seen._changes is None  # a pipeline that never checkpoints keeps no changes
    first = seen.take_delta()
    assert first.complete and first.changes == dict.fromkeys(range(300))
    s.emit(500)
    s.emit(5)
    assert seen.take_delta().changes == {500: None} and seen.pending_changes() == 0
