"""Event-time windows against a brute-force reference, and the watermark rules.

The reference below recomputes, for each record, what it is judged against
from the whole prefix of the input: the larger of the watermark before it
(minimum over the partitions seen of their largest time, minus the delay,
never decreasing) and its own partition's (the largest time of its partition
up to and including it, minus the delay).  It decides lateness window by
window and groups the records that count by flooring their time: a batch
computation that shares no code with the operators.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivermark import ConfigurationError, Stream
from rivermark.checkpoint import Job
from rivermark.operators.eventtime import Timestamps, WindowResult
from rivermark.testing import examples

from .conftest import roundtrip

Rec = tuple[int, int, int, int]  # partition, time, key, value


def _meta(p: int) -> list[dict[str, Any]]:
    return [{"topic": "t", "partition": p}]


def watermarks_before(records: list[Rec], delay: float) -> list[float]:
    """What each record is judged against (see the module docs)."""
    out, wm = [], -math.inf
    for i in range(len(records)):
        largest: dict[int, int] = {}
        for p, t, _, _ in records[: i + 1]:
            largest[p] = max(largest.get(p, t), t)
        out.append(max(wm, largest[records[i][0]] - delay))
        wm = max(wm, min(largest.values()) - delay)
    return out


def windows_of(t: int, size: int, step: int) -> list[int]:
    return [
        s for s in range(math.floor((t - size) / step) * step, t + 1, step) if s <= t < s + size
    ]


def reference_fixed(
    records: list[Rec], size: int, step: int, delay: float, grace: float
) -> tuple[dict[tuple[float, float, int], list[int]], list[Rec]]:
    groups: dict[tuple[float, float, int], list[int]] = {}
    late = []
    for rec, wm in zip(records, watermarks_before(records, delay)):
        _, t, k, v = rec
        is_late = False
        for s in windows_of(t, size, step):
            if s + size + grace <= wm:
                is_late = True
            else:
                groups.setdefault((float(s), float(s + size), k), []).append(v)
        if is_late:
            late.append(rec)
    return groups, late


def reference_sessions(
    records: list[Rec], gap: int, delay: float, grace: float
) -> tuple[dict[tuple[float, float, int], list[int]], list[Rec]]:
    on_time: dict[int, list[tuple[int, int]]] = {}
    late = []
    for rec, wm in zip(records, watermarks_before(records, delay)):
        _, t, k, v = rec
        if t < wm - grace:
            late.append(rec)
        else:
            on_time.setdefault(k, []).append((t, v))
    groups: dict[tuple[float, float, int], list[int]] = {}
    for k, items in on_time.items():
        items.sort()
        start, end, values = items[0][0], items[0][0] + gap, [items[0][1]]
        for t, v in items[1:]:
            if t < end:
                end, values = max(end, t + gap), [*values, v]
            else:
                groups[(float(start), float(end), k)] = values
                start, end, values = t, t + gap, [v]
        groups[(float(start), float(end), k)] = values
    return groups, late


def run(
    records: list[Rec], make: Callable[[Timestamps], Stream], delay: float
) -> tuple[list[WindowResult], list[Rec]]:
    s = Stream()
    t = s.timestamps(lambda r: r[1], max_delay=delay)
    w = make(t)
    out = w.sink_to_list()
    late = w.late.sink_to_list()
    for rec in records:
        s.emit(rec, metadata=_meta(rec[0]))
    t.end_of_input()
    return out, late


records_st = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 120), st.integers(0, 3), st.integers(-50, 50)),
    max_size=60,
)


def _as_groups(out: list[WindowResult]) -> dict[tuple[float, float, int], list[int]]:
    return {(r.start, r.end, r.key): sorted(r.value) for r in out}


@settings(max_examples=examples(150), deadline=None)
@given(
    records=records_st,
    size_step=st.sampled_from([(10, 10), (10, 5), (7, 3), (1, 1)]),
    delay=st.sampled_from([0, 4, 25]),
    grace=st.sampled_from([0, 6]),
)
def test_fixed_windows_equal_the_batch_reference(
    records: list[Rec], size_step: tuple[int, int], delay: float, grace: float
) -> None:
    size, step = size_step

    def make(t: Timestamps) -> Stream:
        kw: dict[str, Any] = {"key": lambda r: r[2], "value": lambda r: r[3]}
        kw.update(agg="collect", grace=grace or 0)
        if size == step:
            return t.tumbling_window(size, **kw)
        return t.hopping_window(size, step, **kw)

    out, late = run(records, make, delay)
    groups, ref_late = reference_fixed(records, size, step, delay, grace)
    assert _as_groups(out) == {k: sorted(v) for k, v in groups.items()}
    assert len(out) == len(groups)  # each window once
    assert late == ref_late
    ends = [r.end for r in out]
    assert ends == sorted(ends)  # closed in the order of their ends
    assert all(r.final for r in out)


@settings(max_examples=examples(150), deadline=None)
@given(
    records=records_st,
    gap=st.sampled_from([1, 5, 12]),
    delay=st.sampled_from([0, 4, 25]),
    grace=st.sampled_from([0, 6]),
)
def test_session_windows_equal_the_batch_reference(
    records: list[Rec], gap: int, delay: float, grace: float
) -> None:
    def make(t: Timestamps) -> Stream:
        return t.session_window(
            gap, key=lambda r: r[2], value=lambda r: r[3], agg="collect", grace=grace or 0
        )

    out, late = run(records, make, delay)
    groups, ref_late = reference_sessions(records, gap, delay, grace)
    assert _as_groups(out) == {k: sorted(v) for k, v in groups.items()}
    assert len(out) == len(groups)
    assert late == ref_late


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), delay=st.sampled_from([3, 10]))
def test_shuffle_within_max_delay_gives_the_same_windows(data: Any, delay: int) -> None:
    times = sorted(data.draw(st.lists(st.integers(0, 200), max_size=80)))
    recs = [(0, t, t % 3, 1) for t in times]
    rnd = random.Random(data.draw(st.integers(0, 2**32)))
    jitter = {i: rnd.uniform(0, delay) for i in range(len(recs))}
    shuffled = [recs[i] for i in sorted(range(len(recs)), key=lambda i: recs[i][1] + jitter[i])]
    for make in (
        lambda t: t.tumbling_window(10, key=lambda r: r[2], agg="count"),
        lambda t: t.hopping_window(10, 4, key=lambda r: r[2], agg="count"),
        lambda t: t.session_window(6, key=lambda r: r[2], agg="count"),
    ):
        a, late_a = run(recs, make, delay)
        b, late_b = run(shuffled, make, delay)
        assert sorted(a) == sorted(b)
        assert late_a == late_b == []


def _interleaved(records: list[Rec], picks: list[int]) -> list[Rec]:
    """The records, each partition's in its order, the partitions merged as ``picks`` says."""
    queues = {p: [r for r in records if r[0] == p] for p in range(3)}
    out: list[Rec] = []
    for pick in picks:
        live = [p for p in range(3) if queues[p]]
        if not live:
            break
        out.append(queues[live[pick % len(live)]].pop(0))
    return out + [r for p in range(3) for r in queues[p]]


@settings(max_examples=examples(100), deadline=None)
@given(
    records=records_st,
    picks=st.lists(st.integers(0, 5), max_size=60),
    kind=st.sampled_from(["tumbling", "hopping", "session"]),
    delay=st.sampled_from([0, 4, 25]),
    grace=st.sampled_from([0, 6]),
)
def test_every_interleaving_of_the_partitions_gives_the_same_windows(
    records: list[Rec], picks: list[int], kind: str, delay: float, grace: float
) -> None:
    # a live read (the partitions interleaved as the records came) and a backfill (one
    # partition after another) write the same windows, in the same order, and the same
    # late records, when every partition is expected from the start (the records of a
    # window reach an aggregation in the order they came, which collect shows)
    def windows(order: list[Rec]) -> tuple[list[WindowResult], list[Rec]]:
        s = Stream()
        t = s.timestamps(lambda r: r[1], max_delay=delay)
        t.expect_partitions([("t", p) for p in range(3)])
        kw: dict[str, Any] = {"key": lambda r: r[2], "value": lambda r: r[3], "grace": grace}
        if kind == "tumbling":
            w = t.tumbling_window(10, agg="collect", **kw)
        elif kind == "hopping":
            w = t.hopping_window(10, 4, agg="sum", **kw)
        else:
            w = t.session_window(5, agg="collect", **kw)
        out, late = w.sink_to_list(), w.late.sink_to_list()
        for rec in order:
            s.emit(rec, metadata=_meta(rec[0]))
        t.end_of_input()
        # collect lists a window's records in the order they came: compare them as sets
        return [r._replace(value=sorted(r.value)) if kind != "hopping" else r for r in out], sorted(
            late
        )

    live = windows(records)
    assert windows(sorted(records, key=lambda r: r[0])) == live  # partition by partition
    assert windows(sorted(records, key=lambda r: -r[0])) == live
    assert windows(_interleaved(records, picks)) == live


def test_windows_of_keys_that_do_not_compare_come_out_in_the_order_they_opened() -> None:
    s = Stream()
    t = s.timestamps(lambda r: r[0], max_delay=0)
    L = t.tumbling_window(10, key=lambda r: r[1], agg="count").sink_to_list()
    rng = random.Random(3)
    numbers: list[Any] = [*range(40), *(i / 2 for i in range(1, 80, 2))]
    rng.shuffle(numbers)
    words = [f"k{i}" for i in range(40)]
    rng.shuffle(words)
    # numbers first: a sort gets far before it compares a number with a word
    keys = numbers[:60] + words[:20] + numbers[60:] + words[20:]
    for k in keys:
        s.emit((rng.uniform(0, 9.9), k))
    s.emit((25.0, "end"))  # closes [0, 10) for every key at once
    assert [r.key for r in L] == keys  # a sort that raised half-way is not kept
    s2 = Stream()
    t2 = s2.timestamps(lambda r: r[0], max_delay=0)
    L2 = t2.tumbling_window(10, key=lambda r: r[1], agg="count").sink_to_list()
    for k in keys:
        if isinstance(k, str):
            s2.emit((5.0, k))
    s2.emit((25.0, "end"))
    assert [r.key for r in L2] == sorted(k for k in keys if isinstance(k, str))


def test_an_expected_partition_holds_the_watermark_until_its_first_record() -> None:
    s = Stream()
    t = s.timestamps(lambda r: r, max_delay=1)
    t.expect_partitions([("t", 0), ("t", 1)])
    L = t.tumbling_window(10, agg="count").sink_to_list()
    for ts in (3, 15, 27):
        s.emit(ts, metadata=_meta(0))
    assert t.watermark == -math.inf and L == []  # partition 1 has said nothing yet
    assert t.partition_watermarks() == {"t:0": 26.0, "t:1": -math.inf}
    s.emit(8, metadata=_meta(1))  # not late: partition 1's own watermark is 7
    assert t.watermark == 7.0 and L == []
    s.emit(40, metadata=_meta(1))
    assert [(r.start, r.value) for r in L] == [(0.0, 2), (10.0, 1)]
    # a late record is judged by its own partition: behind partition 0's watermark (26)
    s.emit(12, metadata=_meta(0))
    assert t.watermark == 26.0 and len(L) == 2  # window [20, 30) still open


def test_partition_function_gives_each_input_of_a_union_its_own_watermark() -> None:
    # two inputs (two files, say) joined by union: their records name their partition
    a_recs = [("a", t) for t in (1, 5, 12, 3, 25, 31)]  # 3: behind a's own watermark 11
    b_recs = [("b", t) for t in (2, 14, 9, 28)]  # 9: behind b's own watermark 13

    def windows(order: list[tuple[str, int]], **kw: Any) -> tuple[list[Any], list[Any]]:
        a, b = Stream(), Stream()
        t = a.union(b).timestamps(lambda r: r[1], max_delay=1, **kw)
        w = t.tumbling_window(10, key=lambda r: r[0], agg="count")
        out, late = w.sink_to_list(), w.late.sink_to_list()
        for rec in order:
            (a if rec[0] == "a" else b).emit(rec)
        t.end_of_input()
        return [(r.start, r.key, r.value) for r in out], sorted(late)

    mixed = [x for pair in zip(a_recs, b_recs) for x in pair] + a_recs[4:]
    kw: dict[str, Any] = {"partition": lambda r: r[0], "partitions": ["a", "b"]}
    live = windows(mixed, **kw)
    assert windows(a_recs + b_recs, **kw) == windows(b_recs + a_recs, **kw) == live
    assert live[1] == [("a", 3), ("b", 9)]
    assert live[0] == [(0.0, "a", 2), (0.0, "b", 1), (10.0, "a", 1), (10.0, "b", 1),
                       (20.0, "a", 1), (20.0, "b", 1), (30.0, "a", 1)]  # fmt: skip
    # as one partition, one input read ahead makes the other's records late
    assert windows(a_recs + b_recs) != windows(b_recs + a_recs)


def test_a_partition_function_that_fails_goes_through_the_error_policy() -> None:
    s = Stream()
    t = s.timestamps(lambda r: r["ts"], partition=lambda r: r["file"], on_error="skip")
    L = t.sink_to_list()
    s.emit({"ts": 1, "file": "x"})
    s.emit({"ts": 2})  # no partition
    s.emit({"ts": 3, "file": ["not", "hashable"]})
    assert L == [{"ts": 1, "file": "x"}] and t.errors_skipped == 2
    with pytest.raises(ConfigurationError, match="partitions= names the partitions"):
        s.timestamps(lambda r: r, partitions=["a"])
    with pytest.raises(ConfigurationError, match="partition"):
        s.timestamps(lambda r: r, partition="file")


def test_builtin_aggregations_and_reduce_fold() -> None:
    recs = [(0, t, 0, v) for t, v in [(1, 4), (2, 2), (3, 9), (12, 5)]]
    expected = {
        "count": [3, 1],
        "sum": [15, 5],
        "mean": [5.0, 5.0],
        "min": [2, 5],
        "max": [9, 5],
        "collect": [(4, 2, 9), (5,)],
    }

    def fourth(r: Rec) -> int:
        return r[3]

    for agg, values in expected.items():
        out, _ = run(recs, lambda t, a=agg: t.tumbling_window(10, agg=a, value=fourth), 0)
        assert [r.value for r in out] == values, agg
    out, _ = run(
        recs, lambda t: t.tumbling_window(10, reduce=lambda a, r: a if a[3] > r[3] else r), 0
    )
    assert out[0].value == (0, 3, 0, 9)
    out, _ = run(recs, lambda t: t.tumbling_window(10, fold=lambda a, r: a + [r[3]], start=[]), 0)
    assert [r.value for r in out] == [[4, 2, 9], [5]]


def test_emit_updates_then_final() -> None:
    recs = [(0, 1, 0, 1), (0, 2, 0, 1), (0, 11, 0, 1)]
    out, _ = run(recs, lambda t: t.tumbling_window(10, agg="count", emit="updates"), 0)
    assert out == [
        WindowResult(0.0, 10.0, None, 1, False),
        WindowResult(0.0, 10.0, None, 2, False),
        WindowResult(0.0, 10.0, None, 2, True),  # closed by the next record's watermark
        WindowResult(10.0, 20.0, None, 1, False),
        WindowResult(10.0, 20.0, None, 1, True),
    ]


def test_watermark_is_the_minimum_over_partitions_and_never_goes_back() -> None:
    s = Stream()
    t = s.timestamps(lambda r: r, max_delay=2)
    seen = []
    for p, ts in [(0, 10), (1, 20), (0, 30), (1, 5), (1, 40)]:
        s.emit(ts, metadata=_meta(p))
        seen.append(t.watermark)
    assert seen == [8.0, 8.0, 18.0, 18.0, 28.0]


def test_idle_partition_is_left_out_after_idle_timeout() -> None:
    now = [0.0]
    s = Stream()
    t = s.timestamps(lambda r: r, idle_timeout="10s")
    t.tracker.clock = lambda: now[0]
    L = t.tumbling_window(5, agg="count").sink_to_list()
    s.emit(1, metadata=_meta(1))  # partition 1 then falls silent
    for ts in (2, 7, 12):
        s.emit(ts, metadata=_meta(0))
    assert t.watermark == 1.0 and L == []  # held back by partition 1
    now[0] = 11.0
    s.emit(13, metadata=_meta(0))
    assert t.watermark == 13.0
    assert [(r.start, r.value) for r in L] == [(0.0, 2), (5.0, 1)]


def test_time_convention_datetimes_and_errors() -> None:
    utc1 = dt.timezone(dt.timedelta(hours=1))
    s = Stream()
    t = s.timestamps(lambda r: r["ts"])
    s.emit({"ts": dt.datetime(1970, 1, 1, 1, 0, 30, tzinfo=utc1)})
    assert t.watermark == 30.0
    for bad, exc in [({"ts": dt.datetime(2024, 1, 1)}, TypeError), ({"ts": "12"}, TypeError)]:
        with pytest.raises(exc, match="event time"):
            s.emit(bad)
    with pytest.raises(KeyError):
        s.emit({"other": 1})
    handled: list[Any] = []
    s2 = Stream()
    t2 = s2.timestamps(lambda r: r["ts"], on_error=lambda x, e: handled.append(x))
    L = t2.sink_to_list()
    s2.emit({"x": 1})
    s2.emit({"ts": math.nan})
    s2.emit({"ts": 5})
    assert [sorted(h) for h in handled] == [["x"], ["ts"]]
    assert L == [{"ts": 5}] and t2.errors_handled == 2


def test_numpy_scalars_are_epoch_seconds_and_integers_exactly() -> None:
    import numpy as np  # a test dependency: never skipped

    s = Stream()
    t = s.timestamps(lambda r: r[0])
    w = t.tumbling_window(10, agg="count").sink_to_list()
    # what pandas hands out: numpy integers and floats of every width
    times = [np.int64(3), np.float32(4.5), np.int32(9), np.uint16(11), np.float16(12.0)]
    for x in times:
        s.emit((x, 1))
    assert t.watermark == 12.0 and type(t.watermark) is float
    assert w == [WindowResult(0.0, 10.0, None, 3)]
    # an integer beyond a float's 53 bits is rounded once, as the same Python int is
    big = 2**62 + 1
    s.emit((np.int64(big), 1))
    assert t.watermark == float(big)
    for bad in (np.bool_(True), np.datetime64(1, "s"), np.float64(np.nan)):
        with pytest.raises((TypeError, ValueError), match="event time"):
            s.emit((bad, 1))


def test_datetimes_are_converted_by_whole_seconds_and_exact_nanoseconds() -> None:
    import pandas as pd  # a test dependency: never skipped

    quarter = pd.Timestamp("2026-01-01 12:00:00.250", tz="UTC")
    edge = pd.Timestamp("2026-01-01 12:00:10", tz="UTC").tz_convert("Europe/Paris")
    s = Stream()
    t = s.timestamps(lambda r: r)
    out = t.tumbling_window(0.25, agg="count").sink_to_list()
    for x in (quarter, quarter.to_pydatetime(), edge):
        s.emit(x)
    t.end_of_input()
    assert [r.start for r in out] == [quarter.value / 10**9, edge.value / 10**9]
    assert [r.value for r in out] == [2, 1]


NOW = 1_767_268_800.0  # the wall clock of the tests below


def test_a_time_far_ahead_of_the_wall_clock_is_warned_about_once_naming_the_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = Stream()
    t = s.timestamps(lambda r: r["ts"], name="times")
    t.wall_clock = lambda: NOW
    w = t.tumbling_window(10, agg="count")
    late = w.late.sink_to_list()
    with caplog.at_level(logging.WARNING, logger="rivermark.operators.timestamps"):
        s.emit({"ts": NOW})
        s.emit({"ts": NOW + 3600})  # an hour ahead: nothing said
        s.emit({"ts": NOW * 1000, "id": "in ms"})  # milliseconds among seconds
        s.emit({"ts": NOW * 1000 + 1})
        s.emit({"ts": NOW + 5})
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert (
        "Timestamps('times'): event time 1767268800000.0 of record "
        "{'ts': 1767268800000.0, 'id': 'in ms'} is 55,945 years ahead"
    ) in warned[0]
    assert "years ahead of the wall clock" in warned[0] and "max_future=" in warned[0]
    assert t.watermark == NOW * 1000 + 1 and late == [{"ts": NOW + 5}]


def test_max_future_sends_a_far_future_time_through_the_error_policy() -> None:
    s = Stream()
    refused: list[Any] = []
    t = s.timestamps(
        lambda r: r["ts"], max_future="1h", on_error=lambda x, e: refused.append((x, str(e)))
    )
    t.wall_clock = lambda: NOW
    out = t.tumbling_window(10, agg="count").sink_to_list()
    for ts in (NOW, NOW + 3, NOW * 1000, NOW + 12):
        s.emit({"ts": ts})
    t.end_of_input()
    assert [x for x, _ in refused] == [{"ts": NOW * 1000}]
    assert refused[0][1] == (
        "timestamps: event time 1767268800000.0 is 55,945 years ahead of the wall clock, "
        "beyond max_future=3600 s; it would move the watermark there for good and make every "
        "later record late (a time in milliseconds? return seconds)"
    )
    # the watermark did not move: the later record is on time
    assert [r.value for r in out] == [2, 1] and t.errors_handled == 1
    with pytest.raises(ValueError, match=re.escape("beyond max_future=3600 s")):
        s2 = Stream()
        t2 = s2.timestamps(lambda r: r, max_future=3600)
        t2.wall_clock = lambda: NOW
        s2.emit(NOW * 1000)
    with pytest.raises(ConfigurationError, match="max_future"):
        Stream().timestamps(lambda r: r, max_future="soon")


def test_configuration_errors_name_the_node_and_the_remedy() -> None:
    s = Stream()
    with pytest.raises(ConfigurationError, match=r"tumbling_window: needs event times.*timestamps"):
        s.map(str).tumbling_window(5)
    t = s.timestamps(lambda r: r)
    with pytest.raises(ConfigurationError, match="hopping_window: step"):
        t.hopping_window(5, 10)
    with pytest.raises(ConfigurationError, match="agg must be one of"):
        t.tumbling_window(5, agg="median")
    with pytest.raises(ConfigurationError, match="one of agg=, reduce=, fold="):
        t.tumbling_window(5, agg="sum", reduce=max)
    with pytest.raises(ConfigurationError, match="session_window: fold= needs merge="):
        t.session_window(5, fold=lambda a, r: a, start=0)
    with pytest.raises(ConfigurationError, match="emit must be"):
        t.session_window(5, emit="sometimes")
    with pytest.raises(ConfigurationError, match="max_delay"):
        s.timestamps(lambda r: r, max_delay="soon")


def _keyed_graph() -> tuple[Stream, Timestamps, Stream, list[Any]]:
    s = Stream()
    t = s.timestamps(lambda r: r[1], max_delay=5, name="ts")
    w = t.session_window(4, key=lambda r: r[2], agg="count", name="w")
    return s, t, w, w.sink_to_list()


def test_state_restored_in_a_fresh_graph_gives_the_same_windows() -> None:
    rnd = random.Random(3)
    recs = [(0, rnd.randrange(0, 300), rnd.randrange(20), 1) for _ in range(400)]
    s, t, w, whole = _keyed_graph()
    for r in recs:
        s.emit(r)
    t.end_of_input()
    s1, t1, w1, first = _keyed_graph()
    for r in recs[:250]:
        s1.emit(r)
    saved = roundtrip({"t": t1.get_state(), "w": w1.get_state()})
    s2, t2, w2, second = _keyed_graph()
    t2.set_state(saved["t"])
    w2.set_state(saved["w"])
    assert w2.records_held() == w1.records_held() > 0
    for r in recs[250:]:
        s2.emit(r)
    t2.end_of_input()
    assert first + second == whole


def test_checkpoint_delta_holds_only_the_changed_windows() -> None:
    s = Stream()
    t = s.timestamps(lambda r: r[0], max_delay=1000)
    w = t.tumbling_window(10, key=lambda r: r[1], agg="count")
    for k in range(1000):
        s.emit((5, k))
    w.get_state()["open"].take_delta()  # the first checkpoint: a base
    s.emit((5, 7))
    s.emit((15, 8))
    assert w.get_state()["open"].take_delta().changes == {
        (7, 0.0): (10.0, 7, 2),
        (8, 10.0): (20.0, 1000, 1),
    }


def test_a_job_ends_the_input_and_emits_every_window(tmp_path: Path) -> None:
    recs = [(t, t % 4) for t in range(0, 1000, 3)]
    source = Stream.from_iterable(recs, name="src")
    w = source.timestamps(lambda r: r[0], name="ts").tumbling_window(
        100, key=lambda r: r[1], agg="count", name="w"
    )
    out = w.sink_to_list(name="out")
    Job(source, checkpoint=tmp_path / "c", every=None).run()
    expected: dict[tuple[float, int], int] = {}
    for ts, k in recs:
        expected[(ts // 100 * 100.0, k)] = expected.get((ts // 100 * 100.0, k), 0) + 1
    assert {(r.start, r.key): r.value for r in out} == expected
    assert len(out) == len(expected)


def _timer_graph() -> tuple[Stream, Timestamps, Stream, list[Any]]:
    def count(ctx: Any, r: Rec) -> None:
        if ctx.state is None:
            ctx.set_timer(ctx.time + 10)
        ctx.state = (ctx.state or 0) + 1

    def report(ctx: Any, t: float) -> None:
        ctx.emit((ctx.key, t, ctx.state))
        ctx.state = None

    s = Stream()
    t = s.timestamps(lambda r: r[1], max_delay=3, name="ts")
    p = t.keyed_process(count, key=lambda r: r[2], on_timer=report, name="p")
    return s, t, p, p.sink_to_list()


def test_keyed_process_timers_fire_in_time_order_and_survive_a_restore() -> None:
    rnd = random.Random(5)
    recs = [(0, i // 3 + rnd.randrange(3), rnd.randrange(6), 1) for i in range(300)]
    s, t, p, whole = _timer_graph()
    for r in recs:
        s.emit(r)
    t.end_of_input()
    # brute force: per key, a report 10 s after its first record counting the records before it
    assert [w[1] for w in whole] == sorted(w[1] for w in whole)
    assert sum(w[2] for w in whole) == len(recs)
    s1, t1, p1, first = _timer_graph()
    for r in recs[:150]:
        s1.emit(r)
    saved = roundtrip({"t": t1.get_state(), "p": p1.get_state()})
    s2, t2, p2, second = _timer_graph()
    t2.set_state(saved["t"])
    p2.set_state(saved["p"])
    assert p2.records_held() == p1.records_held() > 0  # pending timers
    for r in recs[150:]:
        s2.emit(r)
    t2.end_of_input()
    assert first + second == whole


def test_keyed_process_call_that_raises_leaves_nothing_behind() -> None:
    def func(ctx: Any, r: Rec) -> None:
        ctx.state = "changed"
        ctx.set_timer(5)
        ctx.emit("out")
        if r[3] < 0:
            raise ValueError("negative")

    def rearm(ctx: Any, t: float) -> None:
        ctx.emit(("timer", t))
        ctx.set_timer(t + 1)  # set from a timer: fires at the next watermark step

    s = Stream()
    t = s.timestamps(lambda r: r[1])
    p = t.keyed_process(func, key=lambda r: r[2], on_timer=rearm, on_error="skip")
    L = p.sink_to_list()
    s.emit((0, 1, "a", -1))
    assert L == [] and p.get_state()["values"] == {} and p.records_held() == 0
    assert p.errors_skipped == 1
    s.emit((0, 1, "b", 1))
    s.emit((0, 9, "b", 1))
    assert L == ["out", ("timer", 5.0), "out"]
    # pending: 6 (set by the timer at 5) and 5 again (set by the record at 9, after 5 fired);
    # at the end both fire in time order, and what they set waits: nothing moves +inf further
    t.end_of_input()
    assert L == ["out", ("timer", 5.0), "out", ("timer", 5.0), ("timer", 6.0)]
    assert p.records_held() == 1  # (b, 7); the 6 that 5 set was pending already: one timer
    with pytest.raises(ConfigurationError, match="keyed_process: needs event times"):
        s.keyed_process(func, key=0)


def reference_float_windows(
    times: list[float], size: float, step: float
) -> dict[tuple[float, int], list[int]]:
    """Window ``j`` holds ``t`` when ``j*step <= t < j*step + size`` in exact arithmetic."""
    fs, fstep = Fraction(size), Fraction(step)
    groups: dict[tuple[float, int], list[int]] = {}
    for i, t in enumerate(times):
        ft = Fraction(t)
        j = math.floor(ft / fstep)
        while j * fstep + fs > ft:
            groups.setdefault((j * step, i % 2), []).append(i)
            j -= 1
    return {key: sorted(v) for key, v in groups.items()}


@settings(max_examples=examples(200), deadline=None)
@given(
    data=st.data(),
    size=st.sampled_from([0.1, 0.3, 0.7, 1e-3, 2.5]) | st.floats(1e-3, 10.0),
    hops=st.sampled_from([1, 1, 2, 3, 7]),
)
def test_float_sizes_and_times_put_each_record_in_the_exact_windows(
    data: Any, size: float, hops: int
) -> None:
    step = size / hops
    near_edges = st.integers(0, 3000).map(lambda j: j * step)
    times = data.draw(st.lists(near_edges | st.floats(0.0, 300.0), min_size=1, max_size=40))
    records = [(0, i, t) for i, t in enumerate(times)]
    s = Stream()
    stamped = s.timestamps(lambda r: r[2], max_delay=1e9)
    if hops == 1:
        w = stamped.tumbling_window(size, key=lambda r: r[1] % 2, agg="collect")
    else:
        w = stamped.hopping_window(size, step, key=lambda r: r[1] % 2, agg="collect")
    out = w.sink_to_list()
    for rec in records:
        s.emit(rec, metadata=_meta(0))
    stamped.end_of_input()
    got = {(r.start, r.key): sorted(x[1] for x in r.value) for r in out}
    assert got == reference_float_windows(times, size, step)


def reference_float_sessions(
    times: list[float], keys: list[int], gap: float, delay: float, grace: float
) -> tuple[dict[tuple[float, float, int], list[int]], list[int]]:
    """Sessions of the records that are not late, in exact arithmetic on the float values.

    The watermark before a record is the float ``max(earlier times) - delay``;
    a record is late when ``t + grace < watermark`` exactly; records of a key
    whose exact times are less than ``gap`` apart share a session, reported as
    ``[first, float(last + gap))``.
    """
    fg, fgrace = Fraction(gap), Fraction(grace)
    on_time: dict[int, list[tuple[Fraction, int]]] = {}
    late, wm = [], -math.inf
    for i, (t, k) in enumerate(zip(times, keys)):
        if wm != -math.inf and Fraction(t) + fgrace < Fraction(wm):
            late.append(i)
        else:
            on_time.setdefault(k, []).append((Fraction(t), i))
        wm = max(wm, t - delay)
    groups: dict[tuple[float, float, int], list[int]] = {}
    for k, items in on_time.items():
        items.sort()
        first, last, members = items[0][0], items[0][0], [items[0][1]]
        for t, i in items[1:]:
            if t - last < fg:
                last, members = t, [*members, i]
            else:
                groups[(float(first), float(last + fg), k)] = sorted(members)
                first, last, members = t, t, [i]
        groups[(float(first), float(last + fg), k)] = sorted(members)
    return groups, late


@settings(max_examples=examples(200), deadline=None)
@given(
    data=st.data(),
    gap=st.sampled_from([0.1, 0.3, 0.7, 1e-3, 2.5]) | st.floats(1e-3, 10.0),
    delay=st.sampled_from([0.0, 0.3, 1e9]),
    grace=st.sampled_from([0.0, 0.1, 0.7]),
)
def test_float_gaps_and_times_join_sessions_exactly(
    data: Any, gap: float, delay: float, grace: float
) -> None:
    # times at a float gap (or one ulp either side) from an earlier time: the session boundary
    base = data.draw(st.lists(st.floats(0.0, 50.0), min_size=1, max_size=10))
    times: list[float] = []
    for t in base:
        times.append(t)
        for _ in range(data.draw(st.integers(0, 3))):
            edge = data.draw(st.sampled_from(times)) + gap
            nudge = data.draw(st.sampled_from([0, 1, -1]))
            times.append(math.nextafter(edge, nudge * math.inf) if nudge else edge)
    times = data.draw(st.permutations(times))
    keys = [i % 2 for i in range(len(times))]
    s = Stream()
    stamped = s.timestamps(lambda r: r[2], max_delay=delay)
    w = stamped.session_window(gap, key=lambda r: r[1], agg="collect", grace=grace)
    out, late = w.sink_to_list(), w.late.sink_to_list()
    for i, (t, k) in enumerate(zip(times, keys)):
        s.emit((i, k, t), metadata=_meta(0))
    stamped.end_of_input()
    got = {(r.start, r.end, r.key): sorted(x[0] for x in r.value) for r in out}
    groups, ref_late = reference_float_sessions(times, keys, gap, delay, grace)
    assert got == groups
    assert len(out) == len(groups)
    assert [x[0] for x in late] == ref_late


def test_timestamps_without_a_function_take_the_source_timestamp_from_the_metadata() -> None:
    s = Stream()
    t = s.map(lambda r: r.upper()).timestamps(max_delay=1, on_error="skip")
    w = t.tumbling_window(10, agg="collect")
    out = w.sink_to_list()
    for value, ts, p in [("a", 1.5, 0), ("b", 9.0, 1), ("c", 12.25, 0), ("d", None, 0)]:
        s.emit(value, metadata=[{"topic": "t", "partition": p, "offset": 0, "timestamp": ts}])
    s.emit("e")  # no metadata at all
    assert t.errors_skipped == 2
    assert t.tracker.get_state() is not None
    t.end_of_input()
    assert out == [
        WindowResult(0.0, 10.0, None, ("A", "B")),
        WindowResult(10.0, 20.0, None, ("C",)),
    ]
    assert "source timestamp" in t.state_signature()
    strict = Stream()
    strict.timestamps().tumbling_window(5).sink_to_list()
    with pytest.raises(ValueError, match=r"from_kafka\(\.\.\., timestamps=True\)"):
        strict.emit("x", metadata=[{"topic": "t", "partition": 0, "offset": 3}])


def test_a_session_stays_open_while_the_exact_gap_is_not_over() -> None:
    # 0.1 + 0.6 rounds down to 0.7: the session [0.1, 0.1 + 0.6) still holds time 0.7, so
    # the watermark 0.7 must not close it, and a record of its key at 0.7 (not late) joins it
    assert 0.1 + 0.6 == 0.7 and Fraction(0.1) + Fraction(0.6) > Fraction(0.7)
    s = Stream()
    t = s.timestamps(lambda r: r[1])
    w = t.session_window(0.6, key=lambda r: r[0], agg="collect")
    out, late = w.sink_to_list(), w.late.sink_to_list()
    s.emit(("a", 0.1))
    s.emit(("b", 0.7))  # watermark 0.7
    assert out == []
    s.emit(("a", 0.7))
    s.emit(("b", 2.0))  # watermark 2.0: both sessions are over
    assert out == [
        WindowResult(0.1, 0.7 + 0.6, "a", (("a", 0.1), ("a", 0.7))),
        WindowResult(0.7, 0.7 + 0.6, "b", (("b", 0.7),)),
    ]
    assert late == []


def test_sessions_restore_from_state_without_their_last_time() -> None:
    # open sessions written as (end, seq, acc): the last time is taken as end - gap
    s = Stream()
    t = s.timestamps(lambda r: r[1], max_delay=100, name="ts")
    w = t.session_window(4, key=lambda r: r[0], agg="count", name="w")
    out = w.sink_to_list()
    t.set_state({"watermarks": t.tracker.get_state()})
    w.set_state({"open": {("a", 10.0): (16.0, 0, 2), ("b", 1.0): (5.0, 1, 1)}, "seq": 2})
    s.emit(("a", 15.5))  # within 4 of 12 (16 - 4): joins
    s.emit(("b", 5.0))  # 4 after 1: a new session
    t.end_of_input()
    assert sorted(out) == [
        WindowResult(1.0, 5.0, "b", 1),
        WindowResult(5.0, 9.0, "b", 1),
        WindowResult(10.0, 19.5, "a", 3),
    ]


def test_whole_second_times_on_window_edges_go_in_the_window_they_start() -> None:
    # a time on an edge takes the exact path: whole numbers are computed as integers
    from rivermark.operators.windowstore import slot as _slot

    times = [0, 10, 20, 30, -10, 10**12, 10**12 + 10, 7, 9, 11]
    for t in times:
        for offset in (0.0, 3.0, -5.0):
            assert _slot(float(t), 10.0, offset) == math.floor((t - offset) / 10)
    s = Stream()
    w = s.timestamps(lambda r: r).tumbling_window(10, agg="collect")
    out = w.sink_to_list()
    for t in (0, 9, 10, 19, 20, 30):
        s.emit(t)
    w.upstream.end_of_input()
    assert [(r.start, r.value) for r in out] == [
        (0.0, (0, 9)),
        (10.0, (10, 19)),
        (20.0, (20,)),
        (30.0, (30,)),
    ]


def test_the_watermark_and_window_configuration_is_fixed_when_the_node_is_created() -> None:
    # the tracker keeps its own max_delay: a new value on the node would change nothing
    s = Stream()
    t = s.timestamps(lambda r: r, max_delay=5, name="times")
    w = t.tumbling_window(10, agg="count", name="counts")
    with pytest.raises(
        ConfigurationError, match=re.escape("Timestamps('times').max_delay is fixed when")
    ):
        t.max_delay = 1.0
    with pytest.raises(
        ConfigurationError, match=re.escape("Timestamps('times').idle_timeout is fixed")
    ):
        t.idle_timeout = 1.0
    with pytest.raises(
        ConfigurationError, match=re.escape("TumblingWindow('counts').agg is fixed when")
    ):
        w.agg = None
    out = w.sink_to_list()
    for ts in (1, 12, 16):
        s.emit(ts)
    assert t.max_delay == 5.0 and t.watermark == 11.0
    assert [(r.start, r.value) for r in out] == [(0.0, 1)]
