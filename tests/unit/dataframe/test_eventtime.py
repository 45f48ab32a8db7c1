"""Event-time windows on streaming DataFrames: the API, its errors, its state.

The windows' results against pandas are in ``test_eventtime_differential.py``.
"""

from __future__ import annotations

import logging
import math
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as tm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivermark import ConfigurationError, Stream
from rivermark.checkpoint import Job, open_store
from rivermark.checkpoint.state import codec
from rivermark.dataframe import DataFrame
from rivermark.dataframe.eventtime import TimedDataFrame
from rivermark.testing import examples

EXAMPLE = pd.DataFrame(
    {
        "ts": pd.Series([], dtype="float64"),
        "user": pd.Series([], dtype=object),
        "n": pd.Series([], dtype="int64"),
    }
)


def frame(rows: list[tuple[float, str, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": pd.Series([r[0] for r in rows], dtype="float64"),
            "user": pd.Series([r[1] for r in rows], dtype=object),
            "n": pd.Series([r[2] for r in rows], dtype="int64"),
        }
    )


def rows_of(frames: list[pd.DataFrame]) -> list[tuple[Any, ...]]:
    return [tuple(r) for f in frames for r in f.itertuples(index=False, name=None)]


def test_keyed_tumbling_sums_and_the_late_rows() -> None:
    src = Stream()
    sdf = DataFrame(src, example=EXAMPLE)
    timed = sdf.timestamps("ts", max_delay=5)
    assert isinstance(timed, TimedDataFrame)
    sums = timed.tumbling_window(10).groupby("user").n.sum()
    out, late = sums.stream.sink_to_list(), sums.late.stream.sink_to_list()
    src.emit(frame([(1, "a", 1), (4, "b", 2), (12, "a", 3)]))
    assert out == [] and timed.watermark == 7.0
    src.emit(frame([(17, "b", 4), (3, "a", 100), (9, "b", 5)]))  # 3 is late; 9 arrives at wm 12
    assert rows_of(out) == [(0.0, 10.0, "a", 1), (0.0, 10.0, "b", 2)]
    assert rows_of(late) == [(3.0, "a", 100), (9.0, "b", 5)]
    assert list(out[0].columns) == ["start", "end", "user", "n"]
    assert out[0]["n"].dtype == np.int64
    timed.end_of_input()
    assert rows_of(out)[2:] == [(10.0, 20.0, "a", 3), (10.0, 20.0, "b", 4)]
    assert sums.window_node.late_count == 2


def test_the_output_is_the_same_however_the_rows_are_cut_into_batches() -> None:
    rnd = random.Random(7)
    rows = []
    for i in range(300):
        behind = rnd.choice([0, 0, 1, 3, 20])
        rows.append((i / 4 - behind, rnd.choice("abcd"), rnd.randrange(10)))

    def run(cuts: list[int]) -> tuple[list[Any], list[Any]]:
        src = Stream()
        timed = DataFrame(src, example=EXAMPLE).timestamps("ts", max_delay=2)
        results = [
            timed.tumbling_window(5).groupby("user").n.sum(),
            timed.hopping_window(6, 2, grace=1).n.max(),
            timed.session_window(1.5).groupby("user").agg(list),
        ]
        outs = [(r.stream.sink_to_list(), r.late.stream.sink_to_list()) for r in results]
        for a, z in zip([0, *cuts], [*cuts, len(rows)]):
            src.emit(frame(rows[a:z]))
        timed.end_of_input()
        return [rows_of(o) for o, _ in outs], [rows_of(late) for _, late in outs]

    whole = run([])
    assert whole[1][0] and whole[0][2]  # late rows and sessions happened
    for _ in range(3):
        cuts = sorted(rnd.sample(range(1, len(rows)), 25))
        assert run(cuts) == whole
    assert run(list(range(1, len(rows)))) == whole  # one row per batch


def test_the_same_windows_as_the_record_windows() -> None:
    rnd = random.Random(3)
    rows = [(i - rnd.choice([0, 2, 9]), rnd.choice("xyz"), rnd.randrange(5)) for i in range(300)]
    src = Stream()
    timed = DataFrame(src, example=EXAMPLE).timestamps("ts", max_delay=4)
    frames = timed.hopping_window(8, 3, grace=2).groupby("user").n.sum().stream.sink_to_list()
    for i in range(0, len(rows), 25):
        src.emit(frame(rows[i : i + 25]))
    timed.end_of_input()
    s = Stream()
    t = s.timestamps(lambda r: r[0], max_delay=4)
    records = t.hopping_window(8, 3, grace=2, key=lambda r: r[1], agg="sum", value=lambda r: r[2])
    results = records.sink_to_list()
    for r in rows:
        s.emit(r)
    t.end_of_input()
    got = rows_of(frames)
    assert got == sorted(got, key=lambda r: (r[1], r[0], r[2]))  # by end, start, key
    # the record windows break ties between keys by the order the windows opened
    assert sorted(got) == sorted((w.start, w.end, w.key, w.value) for w in results)


def test_all_the_aggregations_and_two_keys() -> None:
    src = Stream()
    ex = pd.DataFrame({"ts": [0], "a": ["x"], "b": [0], "v": [0.0], "w": [0]}).iloc[:0]
    timed = DataFrame(src, example=ex).timestamps("ts")
    w = timed.tumbling_window(10).groupby(["a", "b"])
    results = {
        how: getattr(w, how)().stream.sink_to_list()
        for how in ("count", "size", "sum", "mean", "min", "max")
    }
    spread = w.v.agg(lambda s: float(s.max() - s.min())).stream.sink_to_list()
    batch = pd.DataFrame(
        {"ts": [1, 2, 3, 4, 5], "a": ["x", "x", "y", "x", "x"], "b": [1, 1, 1, 2, 1],
         "v": [1.0, np.nan, 4.0, 2.5, 3.0], "w": [3, 4, 5, 6, 7]}
    )  # fmt: skip
    src.emit(batch)
    timed.end_of_input()
    expect = batch.groupby(["a", "b"])
    for how, out in results.items():
        want = getattr(expect[["v", "w"]], how)() if how != "size" else expect.size()
        want = want.rename("size") if how == "size" else want
        got = out[0].set_index(["a", "b"]).drop(columns=["start", "end"])
        tm.assert_frame_equal(got, want.to_frame() if how == "size" else want, check_dtype=False)
        assert (out[0]["start"] == 0.0).all() and (out[0]["end"] == 10.0).all()
    assert spread[0]["v"].tolist() == [2.0, 0.0, 0.0]
    assert results["sum"][0]["w"].dtype == np.int64 and results["mean"][0]["w"].dtype == float


def test_timezone_aware_times_give_datetime_windows() -> None:
    src = Stream()
    ex = pd.DataFrame(
        {"t": pd.Series([], dtype="datetime64[ns, Europe/Paris]"), "v": pd.Series([], dtype=int)}
    )
    timed = DataFrame(src, example=ex).timestamps("t", max_delay="1min")
    out = timed.tumbling_window("1h").v.sum().stream.sink_to_list()
    t0 = pd.Timestamp("2024-03-01 10:00", tz="Europe/Paris")
    minutes = [5, 50, 70, 200]
    src.emit(
        pd.DataFrame({"t": [t0 + pd.Timedelta(minutes=m) for m in minutes], "v": [1, 2, 3, 4]})
    )
    timed.end_of_input()
    got = pd.concat(out, ignore_index=True)
    assert str(got["start"].dtype) == "datetime64[ns, Europe/Paris]"
    assert got["start"].tolist() == [t0, t0 + pd.Timedelta(hours=1), t0 + pd.Timedelta(hours=3)]
    assert got["v"].tolist() == [3, 3, 4]


def test_rows_without_a_valid_time_go_through_the_error_policy() -> None:
    ex = pd.DataFrame({"ts": pd.Series([], dtype=object), "v": pd.Series([], dtype=float)})
    bad = pd.DataFrame(
        {"ts": pd.Series([1.0, None, "noon", 5.0], dtype=object), "v": [1.0, 2.0, 3.0, 4.0]}
    )
    src = Stream()
    timed = DataFrame(src, example=ex).timestamps("ts")
    sums = timed.tumbling_window(10).v.sum().stream.sink_to_list()
    with pytest.raises(
        ValueError,
        match=re.escape("2 of 4 row(s) have no valid time in column 'ts' (first: None)"),
    ):
        src.emit(bad)
    handled: list[Any] = []
    src = Stream()
    timed = DataFrame(src, example=ex).timestamps(
        "ts", on_error=lambda x, e: handled.append((x, e))
    )
    sums = timed.tumbling_window(10).v.sum().stream.sink_to_list()
    src.emit(bad)
    timed.end_of_input()
    assert handled[0][0]["v"].tolist() == [2.0, 3.0]
    assert sums[0]["v"].tolist() == [5.0]
    src = Stream()
    timed = DataFrame(src, example=ex).timestamps("ts", on_error="skip")
    src.emit(bad.assign(ts=pd.Series([1, 2, 3, 4]).astype("datetime64[ns]")))  # naive: every row
    assert timed.stream.errors_skipped == 1 and timed.watermark == -np.inf


def test_usage_errors_name_the_operation_and_the_remedy() -> None:
    sdf = DataFrame(Stream(), example=EXAMPLE)
    with pytest.raises(ConfigurationError, match=re.escape("'when' is not a column")):
        sdf.timestamps("when")
    naive = DataFrame(Stream(), example=pd.DataFrame({"t": pd.Series([], dtype="datetime64[ns]")}))
    with pytest.raises(ConfigurationError, match=re.escape("holds naive datetimes")):
        naive.timestamps("t")
    timed = sdf.timestamps("ts")
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            "timestamps('ts').tumbling_window(10).sum(): column 'user' is not numeric (object); "
            "select numeric columns"
        ),
    ):
        timed.tumbling_window(10).sum()
    with pytest.raises(ConfigurationError, match=re.escape("step (20.0) is larger than size")):
        timed.hopping_window(10, 20)
    with pytest.raises(ConfigurationError, match=re.escape("'nope' is not a column")):
        timed.tumbling_window(10).groupby("nope")
    with pytest.raises(ConfigurationError, match=re.escape("expected one of 'count'")):
        timed.tumbling_window(10).n.agg("median")
    clash = DataFrame(Stream(), example=pd.DataFrame({"ts": [0.0], "end": [1]}).iloc[:0])
    with pytest.raises(ConfigurationError, match=re.escape("would clash with the window's end")):
        clash.timestamps("ts").session_window(3).max()
    with pytest.raises(ConfigurationError, match=re.escape("window the streaming DataFrame")):
        timed.stream.tumbling_window(10)
    with pytest.raises(ConfigurationError, match="partition= is for streams of records"):
        sdf.timestamps("ts", partition=lambda r: r)
    with pytest.raises(ConfigurationError, match="tumbling_window: emit must be 'final'"):
        timed.tumbling_window(10, emit="always")
    final = DataFrame(Stream(), example=pd.DataFrame({"ts": [0.0], "final": [1]}).iloc[:0])
    final.timestamps("ts").tumbling_window(3).max()  # its own column, without updates
    with pytest.raises(ConfigurationError, match=re.escape("would clash with the window's final")):
        final.timestamps("ts").tumbling_window(3, emit="updates").max()


def _graph() -> tuple[Stream, Any, Any, list[Any], list[Any]]:
    src = Stream()
    timed = DataFrame(src, example=EXAMPLE).timestamps("ts", max_delay=3, name="times")
    sessions = timed.session_window(2).groupby("user").agg(tuple, name="sessions")
    hops = timed.hopping_window(4, 2).n.mean(name="hops")
    return src, timed, (sessions, hops), sessions.stream.sink_to_list(), hops.stream.sink_to_list()


def test_state_is_data_and_a_restored_graph_goes_on_the_same() -> None:
    rnd = random.Random(5)
    rows = [(i / 3 - rnd.choice([0, 1, 2]), rnd.choice("ab"), rnd.randrange(9)) for i in range(400)]
    batches = [frame(rows[i : i + 30]) for i in range(0, len(rows), 30)]
    src, timed, _, s_all, h_all = _graph()
    for b in batches:
        src.emit(b)
    timed.end_of_input()
    src, timed, nodes, s1, h1 = _graph()
    for b in batches[:7]:
        src.emit(b)
    states = {n.window_node: n.window_node.get_state() for n in nodes}
    blob = codec.dumps({"t": timed.stream.get_state(), "w": [dict(s["open"]) for s in states.values()],
                        "rest": [{**s, "open": None} for s in states.values()]})  # fmt: skip
    assert not codec.has_pickle(blob)  # plain data: numbers, strings, tuples, dtypes
    saved = codec.loads(blob)
    src2, timed2, nodes2, s2, h2 = _graph()
    timed2.stream.set_state(saved["t"])
    for n, opened, rest in zip(nodes2, saved["w"], saved["rest"]):
        n.window_node.set_state({**rest, "open": opened})
    assert [n.window_node.open_windows for n in nodes2] == [
        n.window_node.open_windows for n in nodes
    ]
    for b in batches[7:]:
        src2.emit(b)
    timed2.end_of_input()
    assert rows_of(s1 + s2) == rows_of(s_all) and rows_of(h1 + h2) == rows_of(h_all)


def test_a_checkpoint_delta_holds_only_the_changed_windows() -> None:
    src = Stream()
    timed = DataFrame(src, example=EXAMPLE).timestamps("ts", max_delay=100)
    counts = timed.tumbling_window(10).groupby("user").n.count()
    src.emit(frame([(5, f"u{k}", 1) for k in range(1000)]))
    opened = counts.window_node.get_state()["open"]
    assert len(opened.take_delta().changes) == 1000  # the first checkpoint: a base
    src.emit(frame([(6, "u7", 1), (15, "u8", 1)]))
    changes = opened.take_delta().changes
    assert {k: (v[0], v[2]) for k, v in changes.items()} == {
        ("u7", 0.0): (10.0, (2,)),
        ("u8", 10.0): (20.0, (1,)),
    }
    assert changes[("u8", 10.0)][1] == 1000  # the 1001st window opened


def test_late_rows_without_a_sink_are_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    src = Stream()
    timed = DataFrame(src, example=EXAMPLE).timestamps("ts")
    sums = timed.tumbling_window(10).n.sum()
    sums.stream.sink_to_list()
    with caplog.at_level(logging.WARNING):
        src.emit(frame([(25, "a", 1), (3, "a", 1), (4, "b", 1)]))
    assert sums.window_node.late_count == 2
    assert "2 row(s) arrived after their window closed" in caplog.text


def test_a_job_reads_batches_to_the_end_and_emits_every_window(tmp_path: Path) -> None:
    batches = [frame([(t, "ab"[t % 2], t) for t in range(i, i + 50)]) for i in range(0, 500, 50)]
    batches.insert(5, frame([(3, "a", 1000), (7, "b", 1000)]))  # at watermark 249: late
    source = Stream.from_iterable(batches, name="src")
    sdf = DataFrame(source, example=EXAMPLE)
    sums = sdf.timestamps("ts", name="times").tumbling_window(100).groupby("user").n.sum(name="w")
    out = sums.stream.sink_to_list()
    job = Job(source, checkpoint=tmp_path / "ckpt", every=None)
    job.run()
    got = pd.concat(out, ignore_index=True)
    whole = pd.concat(batches)
    whole = whole[whole.n < 1000]
    want = whole.groupby([whole.ts // 100 * 100.0, "user"]).n.sum()
    assert got.set_index(["start", "user"])["n"].tolist() == want.tolist()
    store = open_store(str(tmp_path / "ckpt"), create=False)
    assert store.list_epochs()
    # what the metrics (terminal, page, Prometheus) show of it
    snap = job.metrics.read()
    assert snap.node("w").late_records == 2 and snap.node("w").open_windows == 0
    assert snap.node("times").watermark == float("inf")
    assert snap.sources[0].watermark == float("inf") and snap.sources[0].event_time_lag is None


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(
    ticks=st.lists(st.integers(-(2**52), 2**52) | st.none(), min_size=1, max_size=20),
    unit=st.sampled_from(["s", "ms", "us", "ns"]),
    tz=st.sampled_from(["UTC", "Europe/Paris", "America/St_Johns"]),
)
def test_a_datetime_column_gives_each_row_the_seconds_a_record_of_it_gets(
    ticks: list[int | None], unit: str, tz: str
) -> None:
    from rivermark.dataframe.eventtime import column_times
    from rivermark.operators.watermarks import to_epoch

    # near today's epoch (in the unit), where float nanoseconds lose digits
    per = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    base = 1_767_268_800 * per
    span = 10**6 * per
    raw = [None if t is None else base + t % span for t in ticks]
    times = pd.Series(pd.array(raw, dtype="Int64")).astype(f"datetime64[{unit}]")
    times = times.dt.tz_localize("UTC").dt.tz_convert(tz)
    want = [math.nan if t is pd.NaT else to_epoch(t) for t in times]
    got = column_times(times).tolist()
    assert got == pytest.approx(want, nan_ok=True, abs=0, rel=0)
    # and exactly the whole seconds and the fraction of each time
    for t, g in zip(raw, got, strict=True):
        if t is not None:
            assert g == (t // per) + (t % per) * (10**9 // per) / 10**9


def test_rows_far_ahead_of_the_wall_clock_are_warned_about_or_refused_with_max_future(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = 1_767_268_800.0
    batches = [
        pd.DataFrame({"ts": [now, now + 1], "v": [1, 2]}),
        pd.DataFrame({"ts": [now * 1000, now + 2], "v": [3, 4]}),  # one time in ms
        pd.DataFrame({"ts": [now + 3], "v": [5]}),
    ]
    example = batches[0].iloc[:0]

    def run(**kwargs: Any) -> tuple[Any, list[Any], list[Any]]:
        src = Stream()
        timed = DataFrame(src, example=example).timestamps("ts", **kwargs)
        timed.stream.wall_clock = lambda: now  # type: ignore[attr-defined]
        sums = timed.tumbling_window(10).v.sum()
        out, late = sums.stream.sink_to_list(), sums.late.stream.sink_to_list()
        for b in batches:
            src.emit(b)
        timed.end_of_input()
        return timed, out, late

    with caplog.at_level(logging.WARNING, logger="rivermark.dataframe.eventtime"):
        timed, out, late = run()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "row 1767268800000.0 of column 'ts' is 55,945 years" in warned[0]
    assert pd.concat(late).v.tolist() == [4, 5]  # late, as said once
    refused: list[Any] = []
    timed, out, late = run(max_future="1h", on_error=lambda x, e: refused.append((x, str(e))))
    assert [x.v.tolist() for x, _ in refused] == [[3]]
    assert refused[0][1].startswith(
        "timestamps: 1 of 2 row(s) have a time in column 'ts' beyond max_future=3600 s of the "
        "wall clock (first: 1767268800000.0, 55,945 years ahead)"
    )
    assert late == [] and pd.concat(out).v.tolist() == [1 + 2 + 4 + 5]


def test_a_checkpoint_writes_the_open_windows_by_columns_and_reads_them_back(
    tmp_path: Path,
) -> None:
    from rivermark.checkpoint import LocalDirectoryStore
    from rivermark.checkpoint.tools.inspection import read_node_state

    # 300 users in one window each, none closed when the job ends (stopped)
    batches = [frame([(5, f"u{k}", k) for k in range(i, i + 100)]) for i in range(0, 300, 100)]
    source = Stream.from_iterable(batches, name="src")
    sdf = DataFrame(source, example=EXAMPLE)
    sums = sdf.timestamps("ts", name="times").tumbling_window(10).groupby("user").n.sum(name="w")
    sums.stream.sink_to_list()
    job = Job(source, checkpoint=tmp_path / "c", every=None)
    source.sink(lambda b: job.stop() if b is batches[-1] else None)
    job.run()
    store = LocalDirectoryStore(tmp_path / "c")
    blob = store.load_chains(job.epoch)[1]["w"][-1]
    # the windows' part is one Columns extension, not a dict of tuples
    assert type(codec.loads(blob, columns=True)["keyed"]["open"]).__name__ == "Columns"
    live = dict(sums.window_node.get_state()["open"])
    assert len(live) == 300
    assert read_node_state(store, job.epoch, "w")["open"] == live
