"""Windows, rolling, expanding and ewm against pandas on the concatenated input."""

from __future__ import annotations

import re

import pandas as pd
import pandas.testing as tm
import pytest

from rivermark.dataframe import Aggregate
from rivermark.errors import ConfigurationError

from .helpers import batches, prefixes, run, source_and_sdf, timed_batches

DATA = batches(20)
PREFIXES = prefixes(DATA)
TDATA = timed_batches(20)
TPREFIXES = prefixes(TDATA)

AGGS = [
    (lambda w: w.amount.sum(), lambda df: df.amount.sum()),
    (lambda w: w[["amount", "x"]].sum(), lambda df: df[["amount", "x"]].sum()),
    (lambda w: w.x.count(), lambda df: df.x.count()),
    (lambda w: w.x.mean(), lambda df: df.x.mean()),
    (lambda w: w.x.var(), lambda df: df.x.var()),
    (lambda w: w.x.std(), lambda df: df.x.std()),
    (lambda w: w.x.size, lambda df: df.x.size),
    (lambda w: w.full(), lambda df: df),
    (lambda w: w.apply(lambda d: d.amount.max()), lambda df: df.amount.max()),
    (lambda w: w.name.value_counts(), lambda df: df.name.value_counts()),
    (lambda w: w.groupby("name").amount.sum(), lambda df: df.groupby("name").amount.sum()),
    (lambda w: w.groupby("name").amount.mean(), lambda df: df.groupby("name").amount.mean()),
    (lambda w: w.groupby("name").amount.count(), lambda df: df.groupby("name").amount.count()),
    (lambda w: w.groupby("name").amount.size(), lambda df: df.groupby("name").amount.size()),
    (lambda w: w.groupby("name").x.var(), lambda df: df.groupby("name").x.var()),
    (lambda w: w.groupby("name").x.std(), lambda df: df.groupby("name").x.std()),
]


def same(got: object, want: object) -> None:
    if isinstance(want, pd.DataFrame):
        tm.assert_frame_equal(got, want)  # type: ignore[arg-type]
    elif isinstance(want, pd.Series):
        if want.name == "count" and want.index.name == "name":  # value_counts order
            got, want = got.sort_index(), want.sort_index()  # type: ignore[union-attr]
        tm.assert_series_equal(got, want, check_dtype=want.dtype.kind != "f", rtol=1e-8)  # type: ignore[arg-type]
    else:
        assert got == pytest.approx(want, nan_ok=True)


@pytest.mark.parametrize("n", [1, 7, 25])
@pytest.mark.parametrize("i", range(len(AGGS)))
def test_window_n_rows(n: int, i: int) -> None:
    build, expected = AGGS[i]
    s, sdf = source_and_sdf()
    L = run(s, build(sdf.window(n=n)), DATA)
    assert len(L) == len(DATA)
    for got, df in zip(L, PREFIXES):
        same(got, expected(df.tail(n)))


@pytest.mark.parametrize("value", ["3s", pd.Timedelta("7s")])
@pytest.mark.parametrize("i", range(len(AGGS)))
def test_window_value_time(value: object, i: int) -> None:
    build, expected = AGGS[i]
    s, sdf = source_and_sdf()
    L = run(s, build(sdf.window(value=value)), TDATA)
    td = pd.Timedelta(value)
    for got, df in zip(L, TPREFIXES):
        same(got, expected(df[df.index > df.index.max() - td]))


def test_window_string_n_means_value() -> None:
    s, sdf = source_and_sdf()
    w = sdf.window("3s")
    assert w.n is None and w.value == pd.Timedelta("3s")


def test_window_memory_bounded_by_window() -> None:
    s, sdf = source_and_sdf()
    out = sdf.window(n=10).groupby("name").amount.sum()
    run(s, out, batches(200))
    node = out.stream
    assert isinstance(node, Aggregate)
    assert node.rows == 10
    assert sum(len(f) for f, _ in node.parts) == 10
    assert len(node.parts) <= 10


@pytest.mark.parametrize("i", range(len(AGGS)))
def test_expanding(i: int) -> None:
    build, expected = AGGS[i]
    s, sdf = source_and_sdf()
    out = build(sdf.expanding())
    L = run(s, out, DATA)
    for got, df in zip(L, PREFIXES):
        same(got, expected(df))
    if isinstance(out.stream, Aggregate) and not out.stream.agg.full:
        assert len(out.stream.parts) == 0  # nothing but the accumulator is stored


@pytest.mark.parametrize("min_periods", [None, 1])
@pytest.mark.parametrize("window", [1, 3, 10])
@pytest.mark.parametrize("op", ["sum", "mean", "min", "max", "median", "std", "var", "count"])
def test_rolling_rows(window: int, op: str, min_periods: int | None) -> None:
    s, sdf = source_and_sdf()
    rolling = sdf.x.rolling(window) if min_periods is None else sdf.x.rolling(window, min_periods)
    L = run(s, getattr(rolling, op)(), DATA)
    whole = pd.concat(DATA)
    expected = getattr(whole.x.rolling(window, min_periods=min_periods), op)()
    tm.assert_series_equal(pd.concat(L), expected)


def test_rolling_dataframe_time_and_quantile() -> None:
    s, sdf = source_and_sdf()
    L = run(s, sdf[["amount", "x"]].rolling("4s").sum(), TDATA)
    whole = pd.concat(TDATA)
    tm.assert_frame_equal(pd.concat(L), whole[["amount", "x"]].rolling("4s").sum())
    s2, sdf2 = source_and_sdf()
    L2 = run(s2, sdf2.rolling(5).x.quantile(0.5), DATA)
    tm.assert_series_equal(pd.concat(L2), pd.concat(DATA).x.rolling(5).quantile(0.5))


@pytest.mark.parametrize("kw", [{"com": 0.5}, {"span": 4}, {"halflife": 2.0}, {"alpha": 0.3}])
def test_ewm_mean(kw: dict[str, float]) -> None:
    s, sdf = source_and_sdf()
    L = run(s, sdf.x.ewm(**kw).mean(), DATA)
    for got, df in zip(L, PREFIXES):
        # as streamz: the value at the batch's newest row, labelled with that row
        want = df.x.ewm(**kw).mean().iloc[-1:]
        tm.assert_series_equal(got, want, check_names=False, rtol=1e-9)
    s2, sdf2 = source_and_sdf()
    L2 = run(s2, sdf2[["amount", "x"]].ewm(**kw).mean(), DATA)
    want_frame = pd.concat(DATA)[["amount", "x"]].astype(float).ewm(**kw).mean().iloc[-1:]
    tm.assert_frame_equal(L2[-1], want_frame, rtol=1e-9)


def test_window_errors() -> None:
    _, sdf = source_and_sdf()
    with pytest.raises(
        ConfigurationError, match=re.escape("window: n must be a positive number of rows, got 0")
    ):
        sdf.window(n=0)
    with pytest.raises(ConfigurationError, match="pass exactly one of n="):
        sdf.window()
    with pytest.raises(ConfigurationError, match=re.escape("got 'soon'")):
        sdf.window(value="soon")
    with pytest.raises(ConfigurationError, match="Must pass one of com=, span="):
        sdf.ewm()
    with pytest.raises(
        ConfigurationError,
        match=re.escape("Can only provide one of com=, span=, halflife=, alpha="),
    ):
        sdf.ewm(com=1, halflife=1)
    with pytest.raises(ConfigurationError, match="not supported on streams"):
        sdf.ewm(com=1).var()
    with pytest.raises(ConfigurationError, match=re.escape("rolling: window must be >= 1, got 0")):
        sdf.rolling(0)


def window_func(window_gdf):
    """The window function of the streamz pipeline rivermark started from: state passes through."""
    state = None
    if isinstance(window_gdf, tuple):
        state = window_gdf[0]
        window_gdf = window_gdf[1]
    aggs = window_gdf.groupby(["Name"]).agg({"Amount": "sum"}).reset_index()
    return state, aggs


SEED_EXAMPLE = pd.DataFrame(
    {"Name": pd.Series([], dtype=object), "Amount": pd.Series([], dtype="int64")}
)


def seed_batches() -> list[pd.DataFrame]:
    out = []
    for i, b in enumerate(batches(12, seed=5)):
        out.append(pd.DataFrame({"Name": b.name.values, "Amount": b.amount.values}))
        out[-1].index = pd.RangeIndex(100 * i, 100 * i + len(b))
    return out


def test_seed_with_state_and_start_resume() -> None:
    from rivermark import Stream
    from rivermark.dataframe import DataFrame

    data = seed_batches()

    def pipeline(start):
        s = Stream()
        sdf = DataFrame(s, example=SEED_EXAMPLE)
        out = sdf.window(5, with_state=True, start=start).apply(window_func).stream
        return s, out.sink_to_list()

    s, full = pipeline(None)
    for b in data:
        s.emit(b)
    # every output is (state, aggs); aggs equals pandas on the last 5 rows
    for (state, aggs), df in zip(full, prefixes(data)):
        assert isinstance(state, dict)
        want = df.tail(5).groupby(["Name"]).agg({"Amount": "sum"}).reset_index()
        tm.assert_frame_equal(aggs, want)
    # resume from the state published after batch 6: the rest equals the uninterrupted run
    s1, first = pipeline(None)
    for b in data[:6]:
        s1.emit(b)
    published = first[-1][0]
    s2, second = pipeline(published)
    for b in data[6:]:
        s2.emit(b)
    for (_, a), (_, b) in zip(second, full[6:]):
        tm.assert_frame_equal(a, b)


def test_with_state_on_builtin_aggregation_and_bad_start() -> None:
    s, sdf = source_and_sdf()
    L = run(s, sdf.window(4, with_state=True).groupby("name").amount.sum(), DATA)
    state, result = L[-1]
    tm.assert_series_equal(result, PREFIXES[-1].tail(4).groupby("name").amount.sum())
    s2, sdf2 = source_and_sdf()
    L2 = run(s2, sdf2.window(4, start=state).groupby("name").amount.sum(), [DATA[0]])
    tm.assert_series_equal(
        L2[0], pd.concat([DATA[-1], DATA[0]]).tail(4).groupby("name").amount.sum()
    )
    with pytest.raises(ConfigurationError, match="start/state must be a state this node emitted"):
        sdf.window(4, start=[1, 2]).sum()
