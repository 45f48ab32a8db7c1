"""Joins of streaming DataFrames (``merge_asof``, ``join_interval``) equal the record joins.

Random rows of two sides, out of order, cut into batches at random and
interleaved, go once through the DataFrame join and once, row by row in the
same order, through the record join (``to_table`` + ``join_asof``,
``join_interval``): the joined rows, the unmatched left rows and the late
rows are the same.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.dataframe import DataFrame
from rivermark.errors import ConfigurationError
from rivermark.testing import examples

#: a row: (side "L"/"R", time, key, id)
Row = tuple[str, int, int, int]
EX = pd.DataFrame({"ts": [0.0], "k": [0], "id": [0]}).iloc[:0]


@st.composite
def batches(draw: Any) -> list[tuple[str, list[Row]]]:
    """Batches of one side each, in arrival order (key 3: left only, key 4: right only)."""
    out: list[tuple[str, list[Row]]] = []
    i = 0
    for _ in range(draw(st.integers(0, 8))):
        side = draw(st.sampled_from("LR"))
        rows = []
        for _ in range(draw(st.integers(1, 6))):
            key = draw(st.integers(0, 2) | st.just(3 if side == "L" else 4))
            rows.append((side, draw(st.integers(0, 30)), key, i))
            i += 1
        out.append((side, rows))
    return out


def _frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame(
        {"ts": [float(r[1]) for r in rows], "k": [r[2] for r in rows], "id": [r[3] for r in rows]}
    )


def _frames(delay: float) -> tuple[Stream, Stream, Any, Any]:
    ls, rs = Stream(), Stream()
    left = DataFrame(ls, example=EX).timestamps("ts", max_delay=delay)
    right = DataFrame(rs, example=EX).timestamps("ts", max_delay=delay)
    return ls, rs, left, right


def _records(delay: float) -> tuple[Stream, Stream, Any, Any]:
    ls, rs = Stream(), Stream()
    return (
        ls,
        rs,
        ls.timestamps(lambda r: r[1], max_delay=delay),
        rs.timestamps(lambda r: r[1], max_delay=delay),
    )


def _late_ids(late: list[Any]) -> list[int]:
    ids: list[int] = []
    for x in late:
        ids.extend(x["id"].tolist() if isinstance(x, pd.DataFrame) else [x[3]])
    return sorted(ids)


def _frame_asof(
    feed: list[tuple[str, list[Row]]], delay: float, how: str, tol: float | None
) -> tuple[list[tuple[int, Any]], list[int]]:
    ls, rs, left, right = _frames(delay)
    joined = left.merge_asof(right, by="k", tolerance=tol, how=how)
    out, late = joined.stream.sink_to_list(), joined.stream.late.sink_to_list()
    for side, rows in feed:
        (ls if side == "L" else rs).emit(_frame(rows))
    right.end_of_input()
    left.end_of_input()
    got = []
    for f in out:
        assert list(f.columns) == ["ts", "k", "id_x", "id_y"]
        for lid, rid in zip(f["id_x"], f["id_y"], strict=True):
            got.append((int(lid), None if pd.isna(rid) else int(rid)))
    return sorted(got, key=repr), _late_ids(late)


def _record_asof(
    feed: list[tuple[str, list[Row]]], delay: float, how: str, tol: float | None
) -> tuple[list[tuple[int, Any]], list[int]]:
    ls, rs, lc, rc = _records(delay)
    table = rc.to_table(key=2, value=lambda r: r[3])
    joined = lc.join_asof(table, key=2, how=how, tolerance=tol)
    out, late = joined.sink_to_list(), joined.late.sink_to_list()
    table.late.sink(late.append)
    for side, rows in feed:
        for r in rows:
            (ls if side == "L" else rs).emit(r)
    rc.end_of_input()
    lc.end_of_input()
    return sorted(((x[3], v) for x, v in out), key=repr), _late_ids(late)


@settings(max_examples=examples(150), deadline=None)
@given(
    feed=batches(),
    delay=st.sampled_from([0, 4, 50]),
    how=st.sampled_from(["left", "inner"]),
    tol=st.sampled_from([None, 0, 3]),
)
def test_merge_asof_equals_the_record_asof_join(
    feed: list[tuple[str, list[Row]]], delay: float, how: str, tol: float | None
) -> None:
    assert _frame_asof(feed, delay, how, tol) == _record_asof(feed, delay, how, tol)


def _frame_interval(
    feed: list[tuple[str, list[Row]]], delay: float, how: str, lower: float, upper: float
) -> tuple[list[tuple[int, Any]], list[int]]:
    ls, rs, left, right = _frames(delay)
    joined = left.join_interval(right, by="k", lower=lower, upper=upper, how=how)
    out, late = joined.stream.sink_to_list(), joined.stream.late.sink_to_list()
    for side, rows in feed:
        (ls if side == "L" else rs).emit(_frame(rows))
    left.end_of_input()
    right.end_of_input()
    got = []
    for f in out:
        assert list(f.columns) == ["ts_x", "k", "id_x", "ts_y", "id_y"]
        for lid, rid in zip(f["id_x"], f["id_y"], strict=True):
            got.append((int(lid), None if pd.isna(rid) else int(rid)))
    return sorted(got, key=repr), _late_ids(late)


def _record_interval(
    feed: list[tuple[str, list[Row]]], delay: float, how: str, lower: float, upper: float
) -> tuple[list[tuple[int, Any]], list[int]]:
    ls, rs, lc, rc = _records(delay)
    joined = lc.join_interval(rc, key=2, lower=lower, upper=upper, how=how)
    out, late = joined.sink_to_list(), joined.late.sink_to_list()
    for side, rows in feed:
        for r in rows:
            (ls if side == "L" else rs).emit(r)
    lc.end_of_input()
    rc.end_of_input()
    pairs = [(x[3], None if y is None else y[3]) for x, y in out]
    return sorted(pairs, key=repr), _late_ids(late)


@settings(max_examples=examples(150), deadline=None)
@given(
    feed=batches(),
    delay=st.sampled_from([0, 4, 50]),
    how=st.sampled_from(["left", "inner"]),
    bounds=st.sampled_from([(0, 0), (-3, 2), (1, 5)]),
)
def test_join_interval_equals_the_record_interval_join(
    feed: list[tuple[str, list[Row]]], delay: float, how: str, bounds: tuple[float, float]
) -> None:
    got = _frame_interval(feed, delay, how, *bounds)
    assert got == _record_interval(feed, delay, how, *bounds)


def test_merge_asof_waits_for_the_right_watermark_and_keeps_column_names() -> None:
    ls, rs, left, right = _frames(0)
    joined = left.merge_asof(right, on="ts", by="k")
    out = joined.stream.sink_to_list()
    rs.emit(pd.DataFrame({"ts": [1.0, 4.0], "k": [1, 1], "id": [10, 11]}))
    ls.emit(pd.DataFrame({"ts": [2.0, 5.0], "k": [1, 1], "id": [0, 1]}))
    assert len(out) == 1 and out[0]["id_y"].tolist() == [10] and joined.stream.waiting == 1
    rs.emit(pd.DataFrame({"ts": [5.0, 9.0], "k": [1, 1], "id": [12, 13]}))
    assert out[1][["ts", "id_x", "id_y"]].values.tolist() == [[5.0, 1, 12]]
    assert list(joined.example.columns) == ["ts", "k", "id_x", "id_y"]


@pytest.mark.parametrize("state", ["memory", "rocksdb"])
def test_frame_joins_under_a_job_join_every_waiting_row(tmp_path: Path, state: str) -> None:
    rng = np.random.default_rng(5)
    n = 400
    times = np.sort(rng.integers(0, 200, n)).astype(float)
    frame = pd.DataFrame(
        {"ts": times, "k": rng.integers(0, 5, n), "id": np.arange(n), "side": rng.integers(0, 2, n)}
    )
    batches_ = [frame.iloc[i : i + 37] for i in range(0, n, 37)]
    source = Stream.from_iterable(batches_, name="src")
    ex = frame.iloc[:0]
    left = DataFrame(source.map(lambda f: f[f.side == 0], name="lefts"), example=ex).timestamps(
        "ts", name="lts"
    )
    right = DataFrame(source.map(lambda f: f[f.side == 1], name="rights"), example=ex).timestamps(
        "ts", max_delay=1000, name="rts"
    )
    out = left.merge_asof(right, by="k", name="asof").stream.sink_to_list(name="out")
    Job(source, checkpoint=tmp_path / "c", every=None, state=state, state_dir=tmp_path / "s").run()
    got = pd.concat(out).sort_values("id_x")
    lefts, rights = frame[frame.side == 0], frame[frame.side == 1]
    want = pd.merge_asof(lefts, rights[["ts", "k", "id"]], on="ts", by="k").sort_values("id_x")
    assert got["id_x"].tolist() == want["id_x"].tolist() == lefts["id"].tolist()
    assert got["id_y"].fillna(-1).tolist() == want["id_y"].fillna(-1).tolist()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda a, r: a.merge_asof(r, by="k", direction="nearest"),
            "merge_asof: direction must be 'backward'",
        ),
        (
            lambda a, r: a.merge_asof(r, on="id", by="k"),
            "merge_asof: on='id' must be the event-time column of both sides",
        ),
        (lambda a, r: a.merge_asof(r), "merge_asof: by= is required"),
        (
            lambda a, r: a.merge_asof(r, by="x"),
            "merge_asof: by=['x'] is not a column of the left DataFrame",
        ),
        (
            lambda a, r: a.join_interval(r, by="k", lower=3, upper=1),
            "join_interval: lower (3.0) is above upper (1.0)",
        ),
        (
            lambda a, r: a.join_interval(a, by="k"),
            "join_interval: the left and right DataFrames are the same",
        ),
    ],
)
def test_bad_frame_joins_are_refused_in_one_line(call: Any, message: str) -> None:
    _, _, left, right = _frames(0)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        call(left, right)


def test_the_sides_need_event_times() -> None:
    ls, rs = Stream(), Stream()
    plain = DataFrame(rs, example=EX)
    left = DataFrame(ls, example=EX).timestamps("ts")
    with pytest.raises(
        ConfigurationError, match=re.escape("merge_asof: the right DataFrame needs event times")
    ):
        left.merge_asof(plain, by="k")


def test_a_change_at_the_watermark_itself_is_still_seen() -> None:
    # the right side's watermark is 5: a change at 5 is not late yet, so the left row
    # at 5 waits for it (the last change at one time wins)
    feed = [("R", [("R", 5, 1, 0)]), ("L", [("L", 5, 1, 1)]), ("R", [("R", 5, 1, 2)])]
    expected = ([(1, 2)], [])
    assert _frame_asof(feed, 0, "left", None) == _record_asof(feed, 0, "left", None) == expected


@pytest.mark.parametrize("left_first", [True, False])
@pytest.mark.parametrize(
    "example_dtype, batch_dtype", [(object, "str"), ("str", object), (object, object)]
)
def test_merge_asof_joins_keys_typed_differently_in_examples_and_batches(
    left_first: bool, example_dtype: Any, batch_dtype: Any
) -> None:
    # an object example and str batches (pandas 3's default for strings), or the other
    # way round: the rows joined do not depend on which side's batch came first
    def example(value: str) -> pd.DataFrame:
        cols = {"ts": pd.Series([], dtype=float), "sym": pd.Series([], dtype=example_dtype)}
        return pd.DataFrame({**cols, value: pd.Series([], dtype=float)})

    quotes, trades = Stream(), Stream()
    q = DataFrame(quotes, example=example("bid")).timestamps("ts")
    t = DataFrame(trades, example=example("qty")).timestamps("ts")
    out = t.merge_asof(q, by="sym").stream.sink_to_list()
    sym = pd.Series(["a", "a"], dtype=batch_dtype)
    feed = [
        (trades, pd.DataFrame({"ts": [2.0, 4.0], "sym": sym, "qty": [3.0, 4.0]})),
        (quotes, pd.DataFrame({"ts": [1.0, 5.0], "sym": sym, "bid": [10.0, 11.0]})),
    ]
    for source, frame in feed if left_first else feed[::-1]:
        source.emit(frame)
    joined = pd.concat(out)
    assert joined[["ts", "qty", "bid"]].to_numpy().tolist() == [[2.0, 3.0, 10.0], [4.0, 4.0, 10.0]]
    assert joined["sym"].tolist() == ["a", "a"]


@pytest.mark.parametrize("kind", ["merge_asof", "join_interval"])
def test_a_restored_frame_join_goes_on_as_an_uninterrupted_one(kind: str) -> None:
    rng = np.random.default_rng(9)
    feed = []
    for i in range(40):
        side = "L" if rng.random() < 0.5 else "R"
        rows = [
            (side, int(i * 2 + rng.integers(0, 6)), int(rng.integers(0, 4)), i * 10 + j)
            for j in range(5)
        ]
        feed.append((side, rows))

    def graph() -> tuple[Stream, Stream, list[Any], list[Any]]:
        ls, rs, left, right = _frames(3)
        if kind == "merge_asof":
            joined = left.merge_asof(right, by="k")
        else:
            joined = left.join_interval(right, by="k", lower=-2, upper=3, how="left")
        nodes = [left.stream, right.stream, joined.stream]
        return ls, rs, nodes, joined.stream.sink_to_list()

    def feed_to(ls: Stream, rs: Stream, part: list[Any]) -> None:
        for side, rows in part:
            (ls if side == "L" else rs).emit(_frame(rows))

    def pairs(out: list[Any]) -> list[Any]:
        return sorted(
            (int(a), -1 if pd.isna(b) else int(b))
            for f in out
            for a, b in zip(f["id_x"], f["id_y"], strict=True)
        )

    ls, rs, nodes, whole = graph()
    feed_to(ls, rs, feed)
    for n in nodes[:2]:
        n.end_of_input()
    ls1, rs1, nodes1, first = graph()
    feed_to(ls1, rs1, feed[:20])
    assert nodes1[2].waiting > 0
    states = [n.get_state() for n in nodes1]
    ls2, rs2, nodes2, second = graph()
    for n, s in zip(nodes2, states, strict=True):
        n.set_state(s)
    feed_to(ls2, rs2, feed[20:])
    for n in nodes2[:2]:
        n.end_of_input()
    assert pairs(first + second) == pairs(whole) and whole
