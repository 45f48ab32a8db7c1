"""The window join (co-group, ``join_window``).

The differential test compares the join with a pandas groupby of both sides
by key and window over the records that are not late, a record being late
when its own side's partition watermark (its largest time so far minus
``max_delay``) has passed its window: ``end + grace <= watermark`` for fixed
windows, ``time + grace < watermark`` for sessions.
"""

from __future__ import annotations

import math
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
from rivermark.operators.windowjoin import WindowJoin
from rivermark.testing import examples

from ..helpers import interleave

#: a record: (side "L"/"R", partition, key, time, id)
Rec = tuple[str, int, int, int, int]
PARTS = [0, 1]
#: window shapes: tumbling, hopping, sessions
SHAPES: list[dict[str, Any]] = [{"size": 5}, {"size": 6, "step": 3}, {"gap": 3}]


@st.composite
def inputs(draw: Any) -> list[Rec]:
    n = draw(st.integers(0, 40))
    out: list[Rec] = []
    for i in range(n):
        side = draw(st.sampled_from(["L", "R"]))
        # key 3 only on the left, key 4 only on the right
        key = draw(st.integers(0, 2) | st.just(3 if side == "L" else 4))
        out.append((side, draw(st.sampled_from(PARTS)), key, draw(st.integers(0, 30)), i))
    return out


def _graph(
    shape: dict[str, Any], delay: float, how: str, grace: float
) -> tuple[Stream, Stream, Any, Any, WindowJoin, list[Any], list[Any]]:
    lefts, rights = Stream(), Stream()
    lc = lefts.timestamps(
        lambda r: r[3], max_delay=delay, partition=lambda r: r[1], partitions=PARTS
    )
    rc = rights.timestamps(
        lambda r: r[3], max_delay=delay, partition=lambda r: r[1], partitions=PARTS
    )
    joined = lc.join_window(rc, key=lambda r: r[2], how=how, grace=grace, **shape)
    return lefts, rights, lc, rc, joined, joined.sink_to_list(), joined.late.sink_to_list()


def _feed(lefts: Stream, rights: Stream, part: list[Rec]) -> None:
    for r in part:
        (lefts if r[0] == "L" else rights).emit(r)


Window = tuple[float, float, int, tuple[int, ...], tuple[int, ...]]


def _windows(out: list[Any]) -> list[Window]:
    return sorted(
        (w.start, w.end, w.key, tuple(r[4] for r in w.value[0]), tuple(r[4] for r in w.value[1]))
        for w in out
    )


def _run(
    order: list[Rec], shape: dict[str, Any], delay: float, how: str, grace: float
) -> tuple[list[Window], list[int]]:
    lefts, rights, lc, rc, _, out, late = _graph(shape, delay, how, grace)
    _feed(lefts, rights, order)
    lc.end_of_input()
    rc.end_of_input()
    return _windows(out), sorted(r[4] for r in late)


def _judges(order: list[Rec], delay: float) -> dict[int, float]:
    """Each record's watermark to be judged by: its side's partition's largest time - delay."""
    largest: dict[tuple[str, int], float] = {}
    judge = {}
    for r in order:
        top = max(largest.get((r[0], r[1]), r[3]), r[3])
        largest[(r[0], r[1])] = top
        judge[r[4]] = top - delay
    return judge


def _oracle(
    order: list[Rec], shape: dict[str, Any], delay: float, how: str, grace: float
) -> tuple[list[Window], list[int]]:
    judge = _judges(order, delay)
    rows, late = [], set()
    for arrival, r in enumerate(order):
        t = r[3]
        if "gap" in shape:
            if t + grace < judge[r[4]]:
                late.add(r[4])
            else:
                rows.append((r[0], r[2], t, arrival, r[4], math.nan, math.nan))
            continue
        size, step = shape["size"], shape.get("step", shape["size"])
        for start in range(t - t % step - size + step, t + 1, step):
            if start + size + grace <= judge[r[4]]:
                late.add(r[4])
            else:
                rows.append((r[0], r[2], t, arrival, r[4], float(start), float(start + size)))
    df = pd.DataFrame(rows, columns=["side", "key", "t", "arrival", "id", "start", "end"])
    if "gap" in shape and len(df):
        df = df.sort_values(["key", "t", "arrival"])
        brk = df.groupby("key")["t"].diff().fillna(math.inf) >= shape["gap"]
        df["session"] = brk.astype(int).groupby(df["key"]).cumsum()
        g = df.groupby(["key", "session"])["t"]
        df["start"] = g.transform("min").astype(float)
        df["end"] = g.transform("max").astype(float) + shape["gap"]
    expected: list[Window] = []
    for (start, end, key), grp in df.groupby(["start", "end", "key"]):
        grp = grp.sort_values(["t", "arrival"])
        ls = tuple(grp[grp.side == "L"]["id"])
        rs = tuple(grp[grp.side == "R"]["id"])
        keep = {"inner": ls and rs, "left": ls, "right": rs, "outer": ls or rs}[how]
        if keep:
            expected.append((float(start), float(end), int(key), ls, rs))
    return sorted(expected), sorted(late)


@settings(max_examples=examples(150), deadline=None)
@given(
    order=inputs(),
    shape=st.sampled_from(SHAPES),
    delay=st.sampled_from([0, 4, 50]),
    how=st.sampled_from(["inner", "left", "right", "outer"]),
    grace=st.sampled_from([0, 2]),
)
def test_window_join_equals_a_groupby_of_both_sides_by_window(
    order: list[Rec], shape: dict[str, Any], delay: float, how: str, grace: float
) -> None:
    assert _run(order, shape, delay, how, grace) == _oracle(order, shape, delay, how, grace)


def _as_sets(result: tuple[list[Window], list[int]]) -> Any:
    windows, late = result
    return sorted((s, e, k, sorted(ls), sorted(rs)) for s, e, k, ls, rs in windows), late


@settings(max_examples=examples(60), deadline=None)
@given(order=inputs(), seed=st.integers(0, 10**6), shape=st.sampled_from(SHAPES))
def test_every_interleaving_gives_the_same_windows(
    order: list[Rec], seed: int, shape: dict[str, Any]
) -> None:
    # ties at one time may come in another order; the records of each window do not change
    live = _as_sets(_run(order, shape, 3, "outer", 0))
    assert _as_sets(_run(interleave(order, random.Random(seed)), shape, 3, "outer", 0)) == live
    by_side = sorted(order, key=lambda r: (r[0], r[1]))  # a backfill, one side after the other
    assert _as_sets(_run(by_side, shape, 3, "outer", 0)) == live


@pytest.mark.parametrize("shape", SHAPES)
def test_a_restored_join_goes_on_as_an_uninterrupted_one(shape: dict[str, Any]) -> None:
    rnd = random.Random(3)
    recs: list[Rec] = [
        (rnd.choice("LR"), rnd.randrange(2), rnd.randrange(4), i // 4 + rnd.randrange(5), i)
        for i in range(400)
    ]
    lefts, rights, lc, rc, _, whole, _ = _graph(shape, 2, "outer", 1)
    _feed(lefts, rights, recs)
    lc.end_of_input()
    rc.end_of_input()
    l1, r1, lc1, rc1, j1, first, _ = _graph(shape, 2, "outer", 1)
    _feed(l1, r1, recs[:200])
    assert j1.waiting > 0 and first
    states = [n.get_state() for n in (lc1, rc1, j1)]
    l2, r2, lc2, rc2, j2, second, _ = _graph(shape, 2, "outer", 1)
    for n, s in zip((lc2, rc2, j2), states, strict=True):
        n.set_state(s)
    _feed(l2, r2, recs[200:])
    lc2.end_of_input()
    rc2.end_of_input()
    assert first + second == whole
    assert j2.waiting == 0


@pytest.mark.parametrize("state", ["memory", "rocksdb"])
def test_a_job_emits_every_window_at_the_end_of_input(tmp_path: Path, state: str) -> None:
    recs = [("L" if t % 2 else "R", 0, t % 3, t, t) for t in range(300)]
    source = Stream.from_iterable(recs, name="src")
    joined = (
        source.filter(lambda r: r[0] == "L", name="lefts")
        .timestamps(lambda r: r[3], name="lts")
        .join_window(
            source.filter(lambda r: r[0] == "R", name="rights").timestamps(
                lambda r: r[3], max_delay=1000, name="rts"
            ),
            key=lambda r: r[2],
            size=10,
            func=lambda ls, rs: (len(ls), len(rs)),
            how="outer",
            name="cogroup",
        )
    )
    out = joined.sink_to_list(name="out")
    Job(source, checkpoint=tmp_path / "c", every=None, state=state, state_dir=tmp_path / "s").run()
    got = sorted((w.start, w.key, w.value) for w in out)
    expected: dict[tuple[float, int], list[int]] = {}
    for side, _, k, t, _ in recs:
        counts = expected.setdefault((float(t - t % 10), k), [0, 0])
        counts[side == "R"] += 1
    assert got == sorted((s, k, tuple(c)) for (s, k), c in expected.items())


def test_a_late_record_goes_to_late_and_sessions_span_both_sides() -> None:
    a, b = Stream(), Stream()
    j = a.timestamps(lambda r: r[0], max_delay=2).join_window(
        b.timestamps(lambda r: r[0], max_delay=2), key=1, gap=5
    )
    out, late = j.sink_to_list(), j.late.sink_to_list()
    for side, r in [(a, (1, "k")), (b, (4, "k")), (a, (8, "k"))]:
        side.emit(r)
    a.emit((20, "k"))
    a.emit((3, "k"))  # 3 + 0 < 18: late on its own side
    assert late == [(3, "k")] and j.late_count == 1
    assert out == []  # the right side's watermark (2) holds the session
    b.emit((30, "k"))
    assert [(w.start, w.end, w.value) for w in out] == [
        (1.0, 13.0, (((1, "k"), (8, "k")), ((4, "k"),)))
    ]


def test_the_user_function_that_raises_goes_through_the_error_policy() -> None:
    a, b = Stream(), Stream()
    j = a.timestamps(lambda r: r[0]).join_window(
        b.timestamps(lambda r: r[0]), key=1, size=5, func=lambda ls, rs: 1 / 0, on_error="skip"
    )
    out = j.sink_to_list()
    for side, r in [(a, (1, "k")), (b, (2, "k")), (a, (9, "k")), (b, (9, "k"))]:
        side.emit(r)
    assert out == [] and j.waiting == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"size": 5, "how": "full"},
            "join_window: how must be one of 'inner', 'left', 'right', 'outer', got 'full'",
        ),
        (
            {},
            "join_window: pass size= (tumbling; with step=, hopping) or gap= (sessions), one of the two",
        ),
        ({"size": 5, "gap": 2}, "join_window: pass size= (tumbling; with step=, hopping) or gap="),
        ({"size": 5, "step": 6}, "join_window: step (6.0) is larger than size (5.0)"),
        ({"size": 5, "key": None}, "join_window: key= is required"),
    ],
)
def test_bad_configuration_is_refused_in_one_line(kwargs: dict[str, Any], message: str) -> None:
    a, b = Stream(), Stream()
    kw = {"key": 1, **kwargs}
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        a.timestamps(lambda r: r[0]).join_window(b.timestamps(lambda r: r[0]), **kw)


def test_the_right_stream_needs_timestamps() -> None:
    a, b = Stream(), Stream()
    with pytest.raises(
        ConfigurationError, match=re.escape("join_window: the right stream needs event times")
    ):
        a.timestamps(lambda r: r[0]).join_window(b, key=1, size=5)
