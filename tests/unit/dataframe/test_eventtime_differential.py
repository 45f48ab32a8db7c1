"""Event-time windows on streaming DataFrames equal a batch computation in pandas.

A differential property test: random batches of timestamped rows, out of
order within and beyond ``max_delay``, from three input partitions (a
batch's Kafka partition is its metadata), one of which goes quiet and is
left out of the watermark after ``idle_timeout`` (the node's wall clock is
replaced by one that advances a second per batch).  After the end of the
input, every window emitted and every late row must be what pandas computes
over the concatenated input:

* the watermark of each row: per partition the running maximum of its times
  (``groupby().cummax()``, forward-filled across the other partitions'
  rows), the row-wise minimum over the partitions that count (its own, and
  those seen within ``idle_timeout`` before its batch), minus the delay,
  then the running maximum over the rows; a row is judged against the
  larger of that and its own partition's running maximum minus the delay;
* fixed windows: the rows exploded into their windows (``floor``), a pair
  late when ``end + grace <= watermark``; sessions: a row late when
  ``time + grace < watermark``, the others split per key where consecutive
  times are ``gap`` or more apart;
* then ``groupby([start, end, key]).agg(...)`` over the pairs that count.

This shares no code with the node (which works batch by batch, with partials
kept per window).

The time column is float epoch seconds, or timezone-aware datetimes of a
unit (``ms``, ``us``, ``ns``) near today's epoch seconds, where a float
division of nanoseconds would move a row on a window's edge (times step by
1/8 s and land on edges; sessions' rows come exactly ``gap`` apart): the
windows and late rows are the same, their times the datetimes of the
oracle's seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as tm
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rivermark import Stream
from rivermark.dataframe import DataFrame

from .test_differential import budget

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

EXAMPLE = pd.DataFrame(
    {
        "ts": pd.Series([], dtype="float64"),
        "k": pd.Series([], dtype=object),
        "v": pd.Series([], dtype="float64"),
    }
)
PARTITIONS = 3
#: datetimes are this many seconds after the epoch (a multiple of every size and step)
BASE = 210 * 8_415_565
#: the time column's dtypes besides float seconds
DATETIMES = [
    "datetime64[ms, UTC]",
    "datetime64[us, UTC]",
    "datetime64[ns, UTC]",
    "datetime64[ms, Europe/Paris]",
]
IDLE = 4.0  # seconds of the fake clock: four batches


def last(s: pd.Series) -> Any:
    """An order-dependent function: the window's last value in arrival order."""
    return s.iloc[-1]


def spread(s: pd.Series) -> Any:
    return s.max() - s.min()


HOWS: list[Any] = ["count", "size", "sum", "mean", "min", "max", last, spread]


@dataclass(frozen=True)
class Case:
    kind: str  # tumbling, hopping, session
    size: float
    step: float
    gap: float
    delay: float
    grace: float
    keyed: bool
    how: Any
    idle: bool
    times: str | None = None  # a datetime dtype of the time column (None: float seconds)


@st.composite
def cases(draw: Any) -> Case:
    kind = draw(st.sampled_from(["tumbling", "hopping", "session"]))
    size, step = draw(st.sampled_from([(10.0, 10.0), (10.0, 5.0), (7.0, 3.0), (1.0, 1.0)]))
    if kind == "tumbling":
        step = size
    elif step == size:
        step = size / 2
    return Case(
        kind,
        size,
        step,
        draw(st.sampled_from([1.0, 5.0, 12.0])),
        draw(st.sampled_from([0.0, 4.0, 25.0])),
        draw(st.sampled_from([0.0, 6.0])),
        draw(st.booleans()),
        draw(st.sampled_from(HOWS)),
        draw(st.booleans()),
        draw(st.sampled_from([None, None, *DATETIMES])),
    )


@st.composite
def inputs(draw: Any) -> list[tuple[int, pd.DataFrame]]:
    """Batches ``(partition, frame)``; partition 2 sends only in the first batches."""
    n_batches = draw(st.integers(1, 14))
    heads = [0.0] * PARTITIONS
    out = []
    for b in range(n_batches):
        p = draw(st.integers(0, PARTITIONS - 1 if b < 3 else PARTITIONS - 2))
        rows = draw(st.integers(0, 8))
        data: dict[str, list[Any]] = {"ts": [], "k": [], "v": []}
        for _ in range(rows):
            heads[p] += draw(st.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0, 1.0, 3.0, 9.0]))
            behind = draw(st.sampled_from([0.0, 0.0, 2.0, 5.0, 30.0]))  # within / beyond the delay
            data["ts"].append(heads[p] - behind)
            data["k"].append(draw(st.sampled_from(["p", "q", "r", None])))
            v = draw(st.one_of(st.integers(-20, 20), st.none()))
            data["v"].append(math.nan if v is None else float(v))
        frame = pd.DataFrame(
            {
                "ts": pd.Series(data["ts"], dtype="float64"),
                "k": pd.Series(data["k"], dtype=object),
                "v": pd.Series(data["v"], dtype="float64"),
            }
        )
        out.append((p, frame))
    return out


def as_datetimes(seconds: pd.Series, dtype: str) -> pd.Series:
    """Seconds (multiples of 1/8) as datetimes ``BASE`` seconds later, by integer ms."""
    ms = ((seconds + BASE) * 1000).round().astype("int64")
    return pd.Series(pd.to_datetime(ms, unit="ms", utc=True), index=seconds.index).astype(dtype)


def as_seconds(times: pd.Series) -> pd.Series:
    """Datetimes back as seconds after ``BASE`` (exact: integer ms)."""
    ms = times.to_numpy(dtype="datetime64[ms]").view("int64")
    return pd.Series((ms - BASE * 1000) / 1000, index=times.index, name=times.name)


def stream_windows(
    case: Case, batches: list[tuple[int, pd.DataFrame]], emit: str = "final"
) -> tuple[Any, Any]:
    src = Stream()
    example = EXAMPLE
    if case.times is not None:
        example = EXAMPLE.assign(ts=EXAMPLE.ts.astype(case.times))
        batches = [(p, f.assign(ts=as_datetimes(f.ts, case.times))) for p, f in batches]
    sdf = DataFrame(src, example=example)
    timed = sdf.timestamps("ts", max_delay=case.delay, idle_timeout=IDLE if case.idle else None)
    now = [0.0]
    timed.stream.tracker.clock = lambda: now[0]  # type: ignore[attr-defined]
    if case.kind == "tumbling":
        windows = timed.tumbling_window(case.size, grace=case.grace, emit=emit)
    elif case.kind == "hopping":
        windows = timed.hopping_window(case.size, case.step, grace=case.grace, emit=emit)
    else:
        windows = timed.session_window(case.gap, grace=case.grace, emit=emit)
    if case.keyed:
        windows = windows.groupby("k")
    if case.how != "size":
        windows = windows["v"]
    result = windows.agg(case.how)
    out, late = result.stream.sink_to_list(), result.late.stream.sink_to_list()
    for b, (p, frame) in enumerate(batches):
        now[0] = float(b)
        src.emit(frame, metadata=[{"topic": "t", "partition": p}])
    timed.end_of_input()
    ends = [e for f in out for e in f["end"] if emit == "final"]
    assert ends == sorted(ends)  # emitted in the order of their ends
    got = pd.concat(out, ignore_index=True) if out else None
    late_rows = pd.concat(late, ignore_index=True) if late else example
    if case.times is not None:
        assert late_rows.ts.dtype == case.times
        late_rows = late_rows.assign(ts=as_seconds(late_rows.ts))
        if got is not None:
            assert got.start.dtype == got.end.dtype == case.times
            got = got.assign(start=as_seconds(got.start), end=as_seconds(got.end))
    return got, late_rows


def watermarks(rows: pd.DataFrame, case: Case) -> np.ndarray:
    """The watermark each row is judged against (see the module docs)."""
    largest = pd.DataFrame({q: rows["ts"].where(rows["p"] == q) for q in range(PARTITIONS)})
    largest = largest.cummax().ffill()
    # when each partition last sent a batch (the other partitions' as of before this batch)
    seen = pd.DataFrame({q: rows["clock"].where(rows["p"] == q) for q in range(PARTITIONS)})
    seen_before = seen.ffill()
    own = rows["p"].to_numpy()[:, None] == np.arange(PARTITIONS)[None, :]
    counts = largest.notna().to_numpy().copy()
    if case.idle:
        fresh = (seen_before.to_numpy() > (rows["clock"].to_numpy() - IDLE)[:, None]) | own
        counts &= fresh
    low = np.where(counts, largest.to_numpy(), np.inf).min(axis=1)
    watermark = np.maximum.accumulate(np.concatenate([[-np.inf], low - case.delay]))[1:]
    # judged against the larger of the watermark and the row's own partition's
    mine = largest.to_numpy()[own]
    return np.maximum(watermark, mine - case.delay)


def pandas_windows(case: Case, batches: list[tuple[int, pd.DataFrame]]) -> tuple[Any, Any]:
    frames = [f.assign(p=p, batch=b, clock=float(b)) for b, (p, f) in enumerate(batches) if len(f)]
    if not frames:
        return None, EXAMPLE
    rows = pd.concat(frames, ignore_index=True)
    rows["wm"] = watermarks(rows, case)
    rows["row"] = np.arange(len(rows))
    if case.kind == "session":
        late = rows["ts"] + case.grace < rows["wm"]
        on_time = rows[~late & rows["k"].notna()] if case.keyed else rows[~late]
        key = on_time["k"] if case.keyed else pd.Series(0, index=on_time.index)
        ordered = on_time.assign(key=key).sort_values(["key", "ts"], kind="stable")
        new = (ordered["key"] != ordered["key"].shift()) | (ordered["ts"].diff() >= case.gap)
        ordered["session"] = new.cumsum()
        bounds = ordered.groupby("session")["ts"].agg(["min", "max"])
        pairs = on_time.assign(session=ordered["session"].reindex(on_time.index))
        pairs["start"] = bounds["min"].reindex(pairs["session"]).to_numpy()
        pairs["end"] = bounds["max"].reindex(pairs["session"]).to_numpy() + case.gap
    else:
        first = np.floor((rows["ts"] - case.size) / case.step).astype(int) + 1
        lastw = np.floor(rows["ts"] / case.step).astype(int)
        rows["w"] = [list(range(a, z + 1)) for a, z in zip(first, lastw)]
        pairs = rows.explode("w")
        pairs["start"] = pairs["w"].astype(int) * case.step
        pairs["end"] = pairs["start"] + case.size
        pair_late = pairs["end"] + case.grace <= pairs["wm"]
        late = pair_late.groupby(pairs["row"]).any().reindex(rows["row"]).to_numpy()
        pairs = pairs[~pair_late]
        if case.keyed:
            pairs = pairs[pairs["k"].notna()]
    late_rows = rows.loc[np.asarray(late), ["ts", "k", "v"]].reset_index(drop=True)
    by = ["start", "end", *(["k"] if case.keyed else [])]
    if not len(pairs):
        return None, late_rows
    grouped = pairs.sort_values("row", kind="stable").groupby(by, sort=True)
    if case.how == "size":
        expect = grouped.size().rename("size").reset_index()
    else:
        expect = grouped["v"].agg(case.how).reset_index()
    return expect, late_rows


def _on_edges() -> list[tuple[int, pd.DataFrame]]:
    """Rows exactly on window edges (size 1 and 10) and exactly ``gap`` (1) apart, in ms."""
    ts = [0.0, 0.25, 1.0, 2.0, 2.125, 3.125, 10.0, 11.0, 11.0, 9.875]
    frame = pd.DataFrame(
        {
            "ts": pd.Series(ts, dtype="float64"),
            "k": pd.Series(["p", "q"] * 5, dtype=object),
            "v": pd.Series([float(i) for i in range(10)], dtype="float64"),
        }
    )
    return [(0, frame.iloc[:5]), (0, frame.iloc[5:])]


def _edge_case(kind: str, size: float, times: str) -> Case:
    return Case(kind, size, size, 1.0, 0.0, 0.0, False, "count", False, times)


@settings(max_examples=budget(250), **SETTINGS)
@given(case=cases(), batches=inputs())
@example(case=_edge_case("tumbling", 1.0, "datetime64[ms, UTC]"), batches=_on_edges())
@example(case=_edge_case("tumbling", 10.0, "datetime64[us, Europe/Paris]"), batches=_on_edges())
@example(case=_edge_case("session", 1.0, "datetime64[ms, UTC]"), batches=_on_edges())
@example(case=_edge_case("session", 1.0, "datetime64[ns, UTC]"), batches=_on_edges())
def test_dataframe_windows_and_late_rows_equal_pandas(
    case: Case, batches: list[tuple[int, pd.DataFrame]]
) -> None:
    got, late = stream_windows(case, batches)
    expect, expect_late = pandas_windows(case, batches)
    tm.assert_frame_equal(
        late.reset_index(drop=True), expect_late, check_dtype=False, check_index_type=False
    )
    if expect is None:
        assert got is None
        return
    assert got is not None
    value = "size" if case.how == "size" else "v"
    order = ["end", "start", *(["k"] if case.keyed else [])]
    got = got.sort_values(order, kind="stable").reset_index(drop=True)
    expect = expect.sort_values(order, kind="stable").reset_index(drop=True)
    assert list(got.columns) == list(expect.columns)
    tm.assert_frame_equal(got.drop(columns=value), expect.drop(columns=value), check_dtype=False)
    # integral values: sums and means are exact, as pandas' are
    tm.assert_series_equal(
        got[value], expect[value], check_dtype=False, check_exact=False, rtol=1e-12
    )


@settings(max_examples=budget(100), **SETTINGS)
@given(case=cases(), batches=inputs())
def test_updates_after_each_batch_end_in_the_final_windows(
    case: Case, batches: list[tuple[int, pd.DataFrame]]
) -> None:
    final, late = stream_windows(case, batches)
    got, late_too = stream_windows(case, batches, emit="updates")
    tm.assert_frame_equal(late_too, late)
    if final is None:
        assert got is None or not got["final"].any()
        return
    assert got is not None and got["final"].dtype == bool
    closed = got[got["final"]].drop(columns="final").reset_index(drop=True)
    tm.assert_frame_equal(closed, final.reset_index(drop=True))
    # every window was passed on after the batches that changed it; its last
    # update is its final result
    keys = ["start", "end", *(["k"] if case.keyed else [])]
    last: dict[tuple[Any, ...], pd.Series] = {}
    for _, row in got[~got["final"]].iterrows():
        last[tuple(row[keys])] = row.drop("final")
    for _, row in closed.iterrows():
        tm.assert_series_equal(last[tuple(row[keys])], row, check_names=False, check_dtype=False)
