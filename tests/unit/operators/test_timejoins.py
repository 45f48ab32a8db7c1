"""Versioned tables and the as-of join (``to_table``, ``join_asof``).

The differential test compares the join with ``pandas.merge_asof(direction=
"backward", by=key)`` applied by the documented rule: a change of the table
or a left record is late when its time is below its own partition's largest
time so far minus ``max_delay``; every other left record is joined with the
latest non-late version of its key at or before its time.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.errors import ConfigurationError
from rivermark.operators.timejoins import AsofJoin, IntervalJoin, Table
from rivermark.testing import examples

from ..helpers import interleave

#: a table change ("T", partition, key, time, value or None, id) or a left record
#: ("L", partition, key, time, None, id)
Rec = tuple[str, int, int, int, Any, int]
PARTS = [0, 1]


def _table_rec(draw: Any, i: int) -> Rec:
    key = draw(st.integers(0, 3))
    value = draw(st.one_of(st.none(), st.integers(0, 99)))
    # a key's changes stay in one partition (ties at one time: the later one wins)
    return ("T", key % 2, key, draw(st.integers(0, 30)), value, i)


@st.composite
def inputs(draw: Any) -> list[Rec]:
    n = draw(st.integers(0, 40))
    out: list[Rec] = []
    for i in range(n):
        if draw(st.booleans()):
            out.append(_table_rec(draw, i))
        else:
            # key 4 never appears in the table
            key, part = draw(st.integers(0, 4)), draw(st.sampled_from(PARTS))
            out.append(("L", part, key, draw(st.integers(0, 30)), None, i))
    return out


def _run(
    order: list[Rec], delay: float, how: str, table_first_end: bool = True
) -> tuple[list[tuple[int, Any]], list[int], list[int]]:
    """Join in arrival ``order``; return sorted (left id, value), late left ids, late change ids."""
    changes, lefts = Stream(), Stream()
    table_clock = changes.timestamps(
        lambda r: r[3], max_delay=delay, partition=lambda r: r[1], partitions=PARTS
    )
    table = table_clock.to_table(key=lambda r: r[2], value=lambda r: r[4])
    left_clock = lefts.timestamps(
        lambda r: r[3], max_delay=delay, partition=lambda r: r[1], partitions=PARTS
    )
    joined = left_clock.join_asof(table, key=lambda r: r[2], how=how)
    out, late, late_changes = joined.sink_to_list(), joined.late.sink_to_list(), []
    table.late.sink(late_changes.append)
    for r in order:
        (changes if r[0] == "T" else lefts).emit(r)
    ends = [table_clock, left_clock] if table_first_end else [left_clock, table_clock]
    for clock in ends:
        clock.end_of_input()
    return (
        sorted((x[5], v) for x, v in out),
        sorted(r[5] for r in late),
        sorted(r[5] for r in late_changes),
    )


def _late_ids(recs: list[Rec], delay: float) -> set[int]:
    largest: dict[int, float] = {}
    late = set()
    for r in recs:
        top = max(largest.get(r[1], r[3]), r[3])
        largest[r[1]] = top
        if r[3] < top - delay:
            late.add(r[5])
    return late


def _oracle(
    order: list[Rec], delay: float, how: str
) -> tuple[list[tuple[int, Any]], list[int], list[int]]:
    changes = [r for r in order if r[0] == "T"]
    lefts = [r for r in order if r[0] == "L"]
    late_t, late_l = _late_ids(changes, delay), _late_ids(lefts, delay)
    right = pd.DataFrame(
        {
            "t": pd.Series([float(r[3]) for r in changes if r[5] not in late_t], dtype=float),
            "key": pd.Series([r[2] for r in changes if r[5] not in late_t], dtype="int64"),
            "val": pd.Series([r[4] for r in changes if r[5] not in late_t], dtype=object),
        }
    )
    right["present"] = True
    left = pd.DataFrame(
        {
            "t": pd.Series([float(r[3]) for r in lefts if r[5] not in late_l], dtype=float),
            "key": pd.Series([r[2] for r in lefts if r[5] not in late_l], dtype="int64"),
            "id": pd.Series([r[5] for r in lefts if r[5] not in late_l], dtype="int64"),
        }
    )
    right = right.sort_values("t", kind="mergesort")  # ties: arrival order, the last wins
    left = left.sort_values("t", kind="mergesort")
    merged = pd.merge_asof(left, right, on="t", by="key", direction="backward")
    expected = []
    for row in merged.itertuples():
        value = row.val if row.present is True and row.val is not None else None
        if value is None and how == "inner":
            continue
        expected.append((int(row.id), None if value is None else int(value)))
    return sorted(expected), sorted(late_l), sorted(late_t)


@settings(max_examples=examples(200), deadline=None)
@given(order=inputs(), delay=st.sampled_from([0, 3, 50]), how=st.sampled_from(["inner", "left"]))
def test_asof_join_equals_merge_asof_by_the_watermark_rule(
    order: list[Rec], delay: float, how: str
) -> None:
    assert _run(order, delay, how) == _oracle(order, delay, how)


@settings(max_examples=examples(100), deadline=None)
@given(
    order=inputs(),
    seed=st.integers(0, 10**6),
    delay=st.sampled_from([0, 4]),
    how=st.sampled_from(["inner", "left"]),
)
def test_every_interleaving_gives_the_same_joins(
    order: list[Rec], seed: int, delay: float, how: str
) -> None:
    # a live read (sides and partitions interleaved as records came) and a backfill
    # (the table first, or the left side first, one partition after another) agree
    live = _run(order, delay, how)
    rnd = random.Random(seed)
    assert _run(interleave(order, rnd), delay, how, table_first_end=False) == live
    by_side = sorted(order, key=lambda r: (r[0] != "T", r[1]))  # stable: each queue's order
    assert _run(by_side, delay, how) == live
    assert _run(sorted(order, key=lambda r: (r[0] == "T", -r[1])), delay, how) == live


def _pair(**kw: Any) -> tuple[Stream, Stream, Table, AsofJoin, list[Any]]:
    changes, lefts = Stream(), Stream()
    table = changes.timestamps(lambda r: r[0]).to_table(key=1, value=lambda r: r[2])
    joined = lefts.timestamps(lambda r: r[0]).join_asof(table, key=1, **kw)
    return changes, lefts, table, joined, joined.sink_to_list()


def test_a_record_waits_until_the_table_watermark_passes_its_time() -> None:
    changes, lefts, table, joined, out = _pair()
    changes.emit((10, "a", "v10"))
    lefts.emit((10, "a"))  # a change at 10 may still come: waits
    assert (out, joined.waiting) == ([], 1)
    changes.emit((10, "a", "v10b"))  # the same time again: the later change wins
    assert out == []
    changes.emit((11, "b", "x"))
    assert (out, joined.waiting) == ([((10, "a"), "v10b")], 0)
    lefts.emit((10.5, "a"))  # below the table's watermark: joined at once
    assert out[-1] == ((10.5, "a"), "v10b")


def test_lookup_mode_joins_at_once_with_the_newest_version() -> None:
    changes, lefts = Stream(), Stream()
    table = changes.timestamps(lambda r: r[0]).to_table(key=1, value=lambda r: r[2])
    out = lefts.join_asof(table, key=1, mode="lookup", how="left").sink_to_list()
    changes.emit((5, "a", "old"))
    changes.emit((9, "a", "new"))
    lefts.emit((1, "a"))
    lefts.emit((1, "b"))
    assert out == [((1, "a"), "new"), ((1, "b"), None)]


def test_late_records_of_both_sides_go_to_late() -> None:
    changes, lefts = Stream(), Stream()
    table = changes.timestamps(lambda r: r[0], max_delay=2).to_table(key=1, value=lambda r: r[2])
    joined = lefts.timestamps(lambda r: r[0], max_delay=2).join_asof(table, key=1, how="left")
    out, late, late_changes = joined.sink_to_list(), joined.late.sink_to_list(), []
    table.late.sink(late_changes.append)
    changes.emit((10, "a", "v"))
    changes.emit((7, "a", "too late"))  # below 10 - 2
    lefts.emit((20, "a"))
    lefts.emit((17, "a"))  # below 20 - 2
    changes.emit((30, "z", None))
    assert out == [((20, "a"), "v")]
    assert late == [(17, "a")] and late_changes == [(7, "a", "too late")]
    assert (joined.late_count, table.late_count) == (1, 1)


def test_a_late_record_without_a_late_sink_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    changes, lefts, table, joined, out = _pair()
    lefts.emit((5, "a"))
    lefts.emit((1, "a"))
    assert joined.late_count == 1
    assert "sink join_asof.late to keep them" in caplog.text


def test_versions_are_kept_only_as_far_back_as_a_join_may_need() -> None:
    changes, lefts, table, joined, out = _pair(how="left")
    for t in range(1000):
        changes.emit((t, "k", t))
        lefts.emit((t, "k"))
    # when the last change came the left watermark was 998: the versions before the
    # newest at or before it are gone
    assert table.get_state()["versions"]["k"] == ((998.0, 998), (999.0, 999))
    assert table.versions_dropped == 998
    assert [v for _, v in out] == list(range(999))  # the record at 999 waits
    changes.emit((1000, "k", None))  # deleted
    lefts.emit((1001, "k"))
    changes.emit((1002, "x", 0))
    assert out[-2:] == [((999, "k"), 999), ((1001, "k"), None)]
    # the change of another key found k's tombstone (1000) behind the floor: k is forgotten
    assert "k" not in table.get_state()["versions"] and table.get("k") is None
    changes.emit((1003, "k", "not needed"))
    assert table.get_state()["versions"]["k"] == ((1003.0, "not needed"),)


def test_a_waiting_record_keeps_the_version_it_needs() -> None:
    changes, lefts = Stream(), Stream()
    table = changes.timestamps(lambda r: r[0], max_delay=10).to_table(key=1, value=lambda r: r[2])
    out = lefts.timestamps(lambda r: r[0]).join_asof(table, key=1).sink_to_list()
    changes.emit((1, "k", "one"))
    lefts.emit((2, "k"))  # waits for the table
    lefts.emit((50, "j"))  # the left watermark moves far ahead
    changes.emit((5, "k", "five"))  # the floor is the waiting record's time, not 50
    assert table.get_state()["versions"]["k"] == ((1.0, "one"), (5.0, "five"))
    changes.emit((20, "x", 0))
    assert out == [((2, "k"), "one")]


def test_a_deleted_key_is_forgotten_once_no_join_and_no_change_can_see_before_it() -> None:
    changes, lefts, table, joined, out = _pair(how="left")
    changes.emit((1, "k", "v"))
    changes.emit((2, "k", None))
    assert table.get("k") is None and table.as_of("k", 1.5) == "v"
    lefts.emit((20, "k"))  # waits; the left watermark is 20
    changes.emit((12, "k", None))  # at the table's watermark: nothing older can come
    assert "k" not in table.get_state()["versions"]
    changes.emit((25, "j", None))  # after the left watermark: a join may see it, it stays
    assert table.get_state()["versions"]["j"] == ((25.0, None),)
    assert table.size == 1
    assert out == [((20, "k"), None)]


def test_as_of_takes_the_times_event_times_take_and_refuses_others_in_one_line() -> None:
    utc = dt.timezone.utc
    changes = Stream()
    # (a minute of delay: both versions are kept, the floor is before them)
    stamped = changes.timestamps(lambda c: c[0], max_delay=60)
    table = stamped.to_table(key=1, value=lambda c: c[2])
    t0 = dt.datetime(2024, 1, 1, 12, tzinfo=utc)
    changes.emit((t0, "ann", "gold"))
    changes.emit((t0 + dt.timedelta(seconds=10), "ann", "silver"))
    assert table.as_of("ann", t0 + dt.timedelta(seconds=1)) == "gold"
    assert table.as_of("ann", t0.timestamp() + 10) == "silver"
    assert table.as_of("ann", t0 - dt.timedelta(seconds=1), default="none") == "none"
    for bad, why in [("soon", "got str 'soon'"), (dt.datetime(2024, 1, 1), "naive datetime")]:
        with pytest.raises(ConfigurationError, match=rf"as_of\(key, time\): .*{re.escape(why)}"):
            table.as_of("ann", bad)


def test_the_waiting_records_and_the_versions_survive_a_restore() -> None:
    rnd = random.Random(7)
    recs: list[Rec] = []
    for i in range(400):
        key = rnd.randrange(4)
        if rnd.random() < 0.5:
            recs.append(("T", key % 2, key, i // 4 + rnd.randrange(6), rnd.randrange(9), i))
        else:
            recs.append(("L", rnd.randrange(2), key, i // 4 + rnd.randrange(6), None, i))

    def graph() -> tuple[Stream, Stream, Any, Any, Table, AsofJoin, list[Any]]:
        changes, lefts = Stream(), Stream()
        tc = changes.timestamps(lambda r: r[3], max_delay=3, partition=lambda r: r[1])
        table = tc.to_table(key=lambda r: r[2], value=lambda r: r[4])
        lc = lefts.timestamps(lambda r: r[3], max_delay=3, partition=lambda r: r[1])
        joined = lc.join_asof(table, key=lambda r: r[2], how="left")
        return changes, lefts, tc, lc, table, joined, joined.sink_to_list()

    def feed(changes: Stream, lefts: Stream, part: list[Rec]) -> None:
        for r in part:
            (changes if r[0] == "T" else lefts).emit(r)

    c, l_, tc, lc, table, joined, whole = graph()
    feed(c, l_, recs)
    tc.end_of_input()
    c1, l1, tc1, lc1, table1, joined1, first = graph()
    feed(c1, l1, recs[:200])
    assert joined1.waiting > 0
    states = [n.get_state() for n in (tc1, lc1, table1, joined1)]
    c2, l2, tc2, lc2, table2, joined2, second = graph()
    for n, s in zip((tc2, lc2, table2, joined2), states, strict=True):
        n.set_state(s)
    feed(c2, l2, recs[200:])
    tc2.end_of_input()
    assert first + second == whole


@pytest.mark.parametrize("state", ["memory", "rocksdb"])
def test_a_job_joins_every_waiting_record_at_the_end_of_input(tmp_path: Path, state: str) -> None:
    recs = [("T", 0, t % 3, t, t, t) if t % 2 else ("L", 0, t % 3, t, None, t) for t in range(200)]
    source = Stream.from_iterable(recs, name="src")
    table = (
        source.filter(lambda r: r[0] == "T", name="changes")
        .timestamps(lambda r: r[3], max_delay=1000, name="tts")
        .to_table(key=lambda r: r[2], value=lambda r: r[4], name="table")
    )
    joined = (
        source.filter(lambda r: r[0] == "L", name="lefts")
        .timestamps(lambda r: r[3], name="lts")
        .join_asof(table, key=lambda r: r[2], how="left", name="join")
    )
    out = joined.sink_to_list(name="out")
    pairs = (
        source.filter(lambda r: r[0] == "L", name="lefts2")
        .timestamps(lambda r: r[3], name="lts2")
        .join_interval(
            source.filter(lambda r: r[0] == "T", name="changes2").timestamps(
                lambda r: r[3], max_delay=1000, name="tts2"
            ),
            key=lambda r: r[2],
            lower=0,
            upper=3,
            name="pairs",
        )
        .sink_to_list(name="pairs_out")
    )
    Job(source, checkpoint=tmp_path / "c", every=None, state=state, state_dir=tmp_path / "s").run()
    assert sorted((x[5], v) for x, v in out) == _oracle(recs, 1000, "left")[0]
    # left t pairs with the change at t + 3 of the same key (t % 3): one pair each
    assert sorted((x[3], y[3]) for x, y in pairs) == [(t, t + 3) for t in range(0, 197, 2)]
    assert len(out) == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"how": "outer"}, "join_asof: how must be 'inner' or 'left', got 'outer'"),
        (
            {"mode": "fast"},
            "join_asof: mode must be 'event_time' (deterministic) or 'lookup' (the newest "
            "version present, not deterministic), got 'fast'",
        ),
        ({"key": None}, "join_asof: key= is required"),
    ],
)
def test_bad_options_are_refused_in_one_line(kwargs: dict[str, Any], message: str) -> None:
    changes = Stream()
    table = changes.timestamps(lambda r: r[0]).to_table(key=1)
    opts: dict[str, Any] = {"key": 1, **kwargs}
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Stream().timestamps(lambda r: r[0]).join_asof(table, **opts)


def test_a_join_needs_a_table_and_event_times() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("join_asof: table must be a table")):
        Stream().timestamps(lambda r: r).join_asof(Stream(), key=0)
    table = Stream().timestamps(lambda r: r[0]).to_table(key=1)
    with pytest.raises(
        ConfigurationError, match=re.escape("join_asof: needs event times from the node right")
    ):
        Stream().map(str).join_asof(table, key=0)
    with pytest.raises(
        ConfigurationError, match=re.escape("to_table: needs event times from the node right")
    ):
        Stream().to_table(key=0)


@st.composite
def pairs_input(draw: Any) -> list[Rec]:
    n = draw(st.integers(0, 40))
    out: list[Rec] = []
    for i in range(n):
        side = draw(st.sampled_from(["L", "R"]))
        key = draw(st.integers(0, 3 if side == "L" else 4))  # key 4: right only
        out.append((side, draw(st.sampled_from(PARTS)), key, draw(st.integers(0, 30)), None, i))
    return out


def _run_interval(
    order: list[Rec], delay: float, lower: float, upper: float, how: str
) -> tuple[list[tuple[int, int]], list[int]]:
    a, b = Stream(), Stream()

    def clock(s: Stream) -> Any:
        return s.timestamps(
            lambda r: r[3], max_delay=delay, partition=lambda r: r[1], partitions=PARTS
        )

    joined = clock(a).join_interval(clock(b), key=lambda r: r[2], lower=lower, upper=upper, how=how)
    out, late = joined.sink_to_list(), joined.late.sink_to_list()
    for r in order:
        (a if r[0] == "L" else b).emit(r)
    for up in joined.upstreams:
        up.end_of_input()
    assert joined.waiting == 0
    return sorted((x[5], -1 if y is None else y[5]) for x, y in out), sorted(r[5] for r in late)


def _oracle_interval(
    order: list[Rec], delay: float, lower: float, upper: float, how: str
) -> tuple[list[tuple[int, int]], list[int]]:
    lefts = [r for r in order if r[0] == "L"]
    rights = [r for r in order if r[0] == "R"]
    late = _late_ids(lefts, delay) | _late_ids(rights, delay)
    cols = ["id", "key", "t"]
    left = pd.DataFrame([(r[5], r[2], r[3]) for r in lefts if r[5] not in late], columns=cols)
    right = pd.DataFrame([(r[5], r[2], r[3]) for r in rights if r[5] not in late], columns=cols)
    m = left.merge(right, on="key", suffixes=("_l", "_r"))
    m = m[(m.t_l + lower <= m.t_r) & (m.t_r <= m.t_l + upper)]
    expected = [(int(a), int(b)) for a, b in zip(m.id_l, m.id_r, strict=True)]
    if how == "left":
        matched = set(m.id_l)
        expected += [(int(i), -1) for i in left.id if i not in matched]
    return sorted(expected), sorted(late)


@settings(max_examples=examples(200), deadline=None)
@given(
    order=pairs_input(),
    delay=st.sampled_from([0, 3, 50]),
    bounds=st.sampled_from([(0, 0), (-2, 3), (1, 5), (-6, -1)]),
    how=st.sampled_from(["inner", "left"]),
    seed=st.integers(0, 10**6),
)
def test_interval_join_equals_merge_filtered_by_the_interval(
    order: list[Rec], delay: float, bounds: tuple[float, float], how: str, seed: int
) -> None:
    lower, upper = bounds
    got = _run_interval(order, delay, lower, upper, how)
    assert got == _oracle_interval(order, delay, lower, upper, how)
    # another interleaving of the sides and partitions (each one's own order kept)
    other = interleave([r if r[0] == "L" else ("T", *r[1:]) for r in order], random.Random(seed))
    again = [r if r[0] == "L" else ("R", *r[1:]) for r in other]
    assert _run_interval(again, delay, lower, upper, how) == got


def test_interval_join_drops_records_by_the_watermark() -> None:
    a, b = Stream(), Stream()
    joined = a.timestamps(lambda r: r[0]).join_interval(
        b.timestamps(lambda r: r[0]), key=1, lower="-1s", upper="2s", how="left"
    )
    out = joined.sink_to_list()
    for t in range(0, 1000, 2):
        a.emit((t, "k"))
        b.emit((t + 1, "k"))
    assert joined.waiting <= 4  # held only while a record to come may pair with it
    assert len(out) == 2 * 500 - 1  # (t, t+1) and (t+2, t+1) pairs; t=0 pairs once
    a.emit((5000, "z"))
    b.emit((6000, "w"))
    assert out[-1] == ((5000, "z"), None)


def test_interval_join_options_are_checked() -> None:
    a, b = Stream().timestamps(lambda r: r), Stream().timestamps(lambda r: r)
    with pytest.raises(ConfigurationError, match=re.escape("join_interval: lower (5.0) is above")):
        a.join_interval(b, key=0, lower=5, upper=1)
    with pytest.raises(ConfigurationError, match=re.escape("the right stream needs event times")):
        a.join_interval(Stream(), key=0)
    with pytest.raises(ConfigurationError, match=re.escape("how must be 'inner' or 'left'")):
        a.join_interval(b, key=0, how="right")


def test_interval_join_waiting_records_survive_a_restore() -> None:
    rnd = random.Random(3)
    recs: list[Rec] = [
        (rnd.choice("LR"), rnd.randrange(2), rnd.randrange(5), i // 5 + rnd.randrange(4), None, i)
        for i in range(400)
    ]

    def graph() -> tuple[Stream, Stream, IntervalJoin, list[Any]]:
        a, b = Stream(), Stream()
        j = a.timestamps(lambda r: r[3], max_delay=2, partition=lambda r: r[1]).join_interval(
            b.timestamps(lambda r: r[3], max_delay=2, partition=lambda r: r[1]),
            key=lambda r: r[2], lower=-3, upper=3, how="left",
        )  # fmt: skip
        return a, b, j, j.sink_to_list()

    def feed(a: Stream, b: Stream, j: IntervalJoin, part: list[Rec], end: bool) -> None:
        for r in part:
            (a if r[0] == "L" else b).emit(r)
        if end:
            for up in j.upstreams:
                up.end_of_input()

    a, b, j, whole = graph()
    feed(a, b, j, recs, True)
    a1, b1, j1, first = graph()
    feed(a1, b1, j1, recs[:200], False)
    assert j1.waiting > 0
    nodes1 = [*j1.upstreams, j1]
    a2, b2, j2, second = graph()
    for n1, n2 in zip(nodes1, [*j2.upstreams, j2], strict=True):
        n2.set_state(n1.get_state())
    feed(a2, b2, j2, recs[200:], True)
    assert first + second == whole


def test_tolerance_leaves_out_a_version_older_than_it() -> None:
    changes, lefts = Stream(), Stream()
    table = changes.timestamps(lambda r: r[0]).to_table(key=1, value=lambda r: r[2])
    joined = lefts.timestamps(lambda r: r[0]).join_asof(table, key=1, how="left", tolerance="2s")
    out = joined.sink_to_list()
    changes.emit((1, "a", "v1"))
    changes.emit((10, "b", "w"))
    for t in (2, 3, 4):
        lefts.emit((t, "a"))
    assert out == [((2, "a"), "v1"), ((3, "a"), "v1"), ((4, "a"), None)]
    assert "tolerance=2.0" in joined.state_signature()


def test_a_job_over_the_left_source_runs_the_table_and_its_own_source(tmp_path: Path) -> None:
    # the table is read from a source of its own: the job finds it through the join
    changes = Stream.from_iterable([(0, "a", "x"), (5, "a", "y"), (100, "a", "z")], name="changes")
    lefts = Stream.from_iterable([(3, "a"), (7, "a")], name="lefts")
    table = changes.timestamps(lambda r: r[0], name="tt").to_table(
        key=1, value=lambda r: r[2], name="table"
    )
    joined = lefts.timestamps(lambda r: r[0], name="lt").join_asof(table, key=1, name="join")
    out = joined.sink_to_list(name="out")
    Job(lefts, checkpoint=tmp_path / "c", every=None).run()
    assert out == [((3, "a"), "x"), ((7, "a"), "y")]
