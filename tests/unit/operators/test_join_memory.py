"""The joins' state stays bounded when keys and records come and go.

Each test runs many records through a join whose keys (or records) are
dropped by the watermark, taking a checkpoint's delta now and then as the
job does at a barrier (``take_delta`` on the node's keyed state), and checks
that what the node keeps (the records held, the record of changes for the
next checkpoint, the keys of a table) does not grow with the number of
records, only with what the watermark holds.
"""

from __future__ import annotations

from pathlib import Path

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.state import DELETED, TOMBSTONE_SLACK, KeyedStore


def _checkpoint(*stores: object) -> None:
    """What a barrier does to a node's keyed state: hand its changes over."""
    for s in stores:
        assert isinstance(s, KeyedStore)
        s.take_delta()


def _bound(store: KeyedStore) -> int:
    return 2 * len(store) + TOMBSTONE_SLACK


def test_keys_set_and_deleted_between_two_checkpoints_leave_a_bounded_record() -> None:
    ks = KeyedState()
    ks.take_delta()
    for i in range(20_000):  # 50 keys live at a time
        ks[i] = i
        if i >= 50 and i % 2:
            del ks[i - 50]
        elif i >= 50:
            ks.pop(i - 50)
    assert len(ks) == 50
    assert ks.pending_changes() <= _bound(ks)
    delta = ks.take_delta()  # the record was dropped: a copy of what is held
    assert delta.complete and delta.changes == {i: i for i in range(19_950, 20_000)}
    ks[1] = "x"
    assert ks.take_delta().changes == {1: "x"}  # recording again


def test_clear_records_no_mark_per_key_and_the_next_checkpoint_is_a_copy() -> None:
    ks = KeyedState({i: i for i in range(10_000)})
    ks.take_delta()
    ks.clear()
    ks["a"] = 1
    assert ks.pending_changes() == 1
    delta = ks.take_delta()
    assert delta.complete and delta.changes == {"a": 1}


def churn(acc: KeyedState, i: int) -> KeyedState:
    """Key i comes, key i - 40 goes; keys 1_000_000.. were there from the start."""
    acc[i] = i
    acc.pop(i - 40, None)
    if i % 1000 == 0:
        acc.pop(1_000_000 + i // 1000, None)
    return acc


def test_a_chain_goes_on_exactly_after_a_mapping_dropped_its_record(tmp_path: Path) -> None:
    start = {1_000_000 + j: "old" for j in range(30)}
    expected = KeyedState(dict(start))
    records = list(range(12_000))
    for i in records:
        churn(expected, i)
    ckpt = tmp_path / "c"
    for part in (records[:6_000], records):  # a run, then a restored run that goes on
        source = Stream.from_iterable(part, name="keys")
        acc = source.accumulate(churn, start=KeyedState(dict(start)), name="acc")
        acc.sink(lambda _x: None, name="out")
        Job(source, checkpoint=ckpt, every=None, every_batches=2_500).run()
    store = LocalDirectoryStore(ckpt)
    last = store.list_epochs()[-1]
    assert dict(acc.state) == dict(expected)
    # a fresh run restores the chain: the keys deleted since the first base stay deleted
    source = Stream.from_iterable(records, name="keys")
    acc = source.accumulate(churn, start=KeyedState(), name="acc")
    acc.sink(lambda _x: None, name="out")
    job = Job(source, checkpoint=ckpt, every=None)
    job.run()
    assert job.restored_epoch == last and dict(acc.state) == dict(expected)


def test_the_interval_join_keeps_what_its_watermarks_hold() -> None:
    a, b = Stream(), Stream()
    join = a.timestamps(lambda r: r[0]).join_interval(
        b.timestamps(lambda r: r[0]), key=1, lower=-2, upper=2, how="left"
    )
    pairs = join.sink_to_list()
    lefts, rights = join.get_state()["lefts"], join.get_state()["rights"]
    _checkpoint(lefts, rights)
    most = 0
    for t in range(30_000):
        a.emit((t, t % 100))
        b.emit((t + 0.5, t % 100))
        most = max(most, lefts.pending_changes(), rights.pending_changes())
        if t % 10_000 == 9_999:
            _checkpoint(lefts, rights)
    assert len(pairs) == 30_000 and all(r is not None for _, r in pairs)
    assert join.waiting <= 10
    assert most <= 2 * 10 + TOMBSTONE_SLACK + 2
    assert len(join._index[0]) + len(join._index[1]) <= 10  # noqa: SLF001 - per-key index


def test_the_window_join_keeps_its_open_windows_only() -> None:
    a, b = Stream(), Stream()
    join = a.timestamps(lambda r: r[0]).join_window(b.timestamps(lambda r: r[0]), key=1, size=1)
    out = join.sink_to_list()
    open_ = join.get_state()["open"]
    _checkpoint(open_)
    most = 0
    for t in range(20_000):
        a.emit((t, t % 7))
        b.emit((t + 0.5, t % 7))
        most = max(most, open_.pending_changes())
        if t % 5_000 == 4_999:
            _checkpoint(open_)
    assert len(out) == 20_000 - 1 and join.open_windows <= 2
    assert most <= 2 * 2 + TOMBSTONE_SLACK + 2


def test_a_table_forgets_keys_deleted_behind_the_floor_that_do_not_change_again() -> None:
    changes, lefts = Stream(), Stream()
    table = changes.timestamps(lambda r: r[0]).to_table(key=1, value=lambda r: r[2])
    joined = lefts.timestamps(lambda r: r[0]).join_asof(table, key=1, how="left")
    out = joined.sink_to_list()
    versions = table.get_state()["versions"]
    _checkpoint(versions)
    most = 0
    for t in range(0, 40_000, 2):  # key t lives two changes, then is deleted for good
        changes.emit((t, f"k{t}", "v"))
        changes.emit((t + 1, f"k{t - 2}", None))
        lefts.emit((t + 1, f"k{t}"))
        most = max(most, table.size, versions.pending_changes())
        if t % 8_000 == 7_998:
            _checkpoint(versions)
    assert table.size <= 4 and most <= 2 * 4 + TOMBSTONE_SLACK + 2
    assert len(out) == 20_000 - 1 and all(v == "v" for _, v in out)
    # what is forgotten answers as the tombstone did
    assert table.get("k100") is None and table.as_of("k100", 50_000) is None
    assert table.as_of("k39998", 39_999) == "v"


def test_pop_many_returns_the_values_records_the_deletes_and_stays_bounded() -> None:
    """The DataFrame windows close a span of windows at once (``KeyedState.pop_many``)."""
    ks = KeyedState({("a", 0): 1, ("b", 0): 2, ("c", 10): 3})
    ks.take_delta()
    assert ks.pop_many([("b", 0), ("a", 0)]) == [2, 1]
    assert dict(ks) == {("c", 10): 3}
    assert ks.take_delta().changes == {("b", 0): DELETED, ("a", 0): DELETED}
    most = 0
    for span in range(2_000):  # 20 windows open a span, closed together
        ks.update({(k, span): k for k in range(20)})
        ks.pop_many([(k, span) for k in range(20)])
        most = max(most, ks.pending_changes())
    assert most <= _bound(ks) + 20
    # the record was dropped for a copy: the next checkpoint is the whole mapping
    delta = ks.take_delta()
    assert delta.complete and delta.changes == {("c", 10): 3}
