"""streamz users' streaming-DataFrame code against ``rivermark.dataframe``.

Written after the streamz "DataFrames" documentation: build a
``DataFrame(stream, example=df)``, reduce, filter, group and window it, and
read results with ``.stream.sink_to_list()``.  Where the installed streamz
still works with this pandas, its output is the expected value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
import streamz
import streamz.dataframe

import rivermark
import rivermark.dataframe


def batches() -> list[pd.DataFrame]:
    return [
        pd.DataFrame({"name": ["Alice", "Bob"], "amount": [100, 200], "x": [1.0, 2.0]}),
        pd.DataFrame({"name": ["Alice", "Carol"], "amount": [-50, 300], "x": [3.0, 4.0]}),
        pd.DataFrame({"name": ["Bob"], "amount": [10], "x": [5.0]}),
    ]


EXAMPLE = pd.DataFrame({"name": pd.Series([], dtype=object), "amount": [], "x": []}).astype(
    {"amount": "int64", "x": "float64"}
)


def run(sz: Any, sdfmod: Any, build: Callable[[Any], Any]) -> list[Any]:
    source = sz.Stream()
    sdf = sdfmod.DataFrame(source, example=EXAMPLE)
    L = build(sdf).stream.sink_to_list()
    for df in batches():
        source.emit(df)
    return L


def compare(build: Callable[[Any], Any]) -> list[Any]:
    got = run(rivermark, rivermark.dataframe, build)
    expected = run(streamz, streamz.dataframe, build)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if isinstance(e, pd.DataFrame):
            pd.testing.assert_frame_equal(g, e, check_dtype=False)
        elif isinstance(e, pd.Series):
            pd.testing.assert_series_equal(g, e, check_dtype=False, check_names=False)
        else:
            assert g == pytest.approx(e)
    return got


def test_column_sum() -> None:
    assert compare(lambda sdf: sdf.amount.sum()) == [300, 550, 560]


def test_filter_then_reduce() -> None:
    got = compare(lambda sdf: sdf[sdf.name == "Alice"].amount.sum())
    assert got == [100, 50, 50]


def test_elementwise_and_mean() -> None:
    got = compare(lambda sdf: (sdf.x * 2 + 1).mean())
    assert got == pytest.approx([4.0, 6.0, 7.0])


def test_groupby_sum() -> None:
    got = compare(lambda sdf: sdf.groupby(sdf.name).amount.sum())
    assert dict(got[-1]) == {"Alice": 50, "Bob": 210, "Carol": 300}


def test_groupby_by_column_name_count() -> None:
    compare(lambda sdf: sdf.groupby("name").amount.count())


def test_window_n_mean_and_sum() -> None:
    got = compare(lambda sdf: sdf.window(n=2).amount.sum())
    assert got == [300, 250, 310]
    compare(lambda sdf: sdf.window(n=3).x.mean())


def test_rolling_and_cumsum() -> None:
    compare(lambda sdf: sdf.amount.cumsum())
    compare(lambda sdf: sdf.x.rolling(2, min_periods=2).sum())


def test_rolling_default_min_periods_is_pandas() -> None:
    # streamz's rolling() never passes min_periods on to pandas, so a first
    # partial window is NaN, as in pandas' rolling on the whole data
    got = compare(lambda sdf: sdf.x.rolling(2).sum())
    assert pd.concat(got).fillna(-1.0).tolist() == [-1.0, 3.0, 5.0, 7.0, 9.0]


def test_rolling_explicit_min_periods_is_applied() -> None:
    got = run(rivermark, rivermark.dataframe, lambda sdf: sdf.x.rolling(2, min_periods=1).sum())
    assert pd.concat(got).tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]


def test_rolling_state_is_streamz_and_resumes_from_its_form() -> None:
    # streamz's rolling state is the last `window` rows; a state it emitted is a valid start=
    def build(sdf: Any) -> Any:
        return sdf.rolling(2, with_state=True, start=()).amount.sum()

    got = run(rivermark, rivermark.dataframe, build)
    expected = run(streamz, streamz.dataframe, build)
    assert len(got) == len(expected)
    for (gs, gr), (es, er) in zip(got, expected):
        pd.testing.assert_series_equal(gs, es, check_dtype=False)
        pd.testing.assert_series_equal(gr, er, check_dtype=False)
    source = rivermark.Stream()
    sdf = rivermark.dataframe.DataFrame(source, example=EXAMPLE)
    resumed = sdf.rolling(2, start=expected[-1][0]).amount.sum().stream.sink_to_list()
    source.emit(pd.DataFrame({"name": ["Dan"], "amount": [7], "x": [6.0]}))
    assert resumed[0].tolist() == [17.0]  # 10 (the last row of the state) + 7


def test_windowed_groupby_by_index_keeps_its_freq() -> None:
    # pandas keeps the freq of an index it groups by; so does streamz's result
    index = pd.date_range("2000-01-01", periods=30, freq="1h")
    df = pd.DataFrame({"x": range(30)}, index=index, dtype=float)
    source = rivermark.Stream()
    sdf = rivermark.dataframe.DataFrame(source, example=df.iloc[:0])
    w = sdf.window("10h")
    L = w.groupby(w.index).x.sum().stream.sink_to_list()
    for i in range(0, 30, 13):
        source.emit(df.iloc[i : i + 13])
    for got, end in zip(L, (13, 26, 30)):
        part = df.iloc[:end]
        part = part[part.index.max() - pd.Timedelta("10h") + pd.Timedelta("1ns") :]
        pd.testing.assert_series_equal(got, part.groupby(part.index).x.sum())
        assert got.index.freq == pd.tseries.frequencies.to_offset("h")


def test_frame_selection_and_assign() -> None:
    compare(lambda sdf: sdf[["name", "amount"]])
    compare(lambda sdf: sdf.assign(y=sdf.x + 1))


def test_size_and_count() -> None:
    compare(lambda sdf: sdf.size)
    compare(lambda sdf: sdf.amount.count())


def test_sdf_emit_and_stream_attribute() -> None:
    sdf = rivermark.dataframe.DataFrame(example=EXAMPLE)
    total = sdf.amount.sum()
    L = total.stream.sink_to_list()
    for df in batches():
        sdf.emit(df)
    assert L == [300, 550, 560]
    assert isinstance(sdf.stream, rivermark.Stream)


def test_to_dataframe_from_stream_of_frames() -> None:
    source = rivermark.Stream()
    sdf = source.to_dataframe(example=EXAMPLE)
    L = sdf.x.sum().stream.sink_to_list()
    for df in batches():
        source.emit(df)
    assert L == [3.0, 10.0, 15.0]


def test_map_partitions_and_columns_attribute() -> None:
    source = rivermark.Stream()
    sdf = rivermark.dataframe.DataFrame(source, example=EXAMPLE)
    assert list(sdf.columns) == ["name", "amount", "x"]
    L = sdf.map_partitions(len, sdf).stream.sink_to_list()
    for df in batches():
        source.emit(df)
    assert L == [2, 2, 1]


def timed_batches() -> list[pd.DataFrame]:
    idx = pd.date_range("2000-01-01", periods=6, freq="1h")
    df = pd.DataFrame(
        {
            "name": ["a", "b", "a", "c", "b", "a"],
            "amount": [1, 2, 3, 4, 5, 6],
            "x": [1.0, 2, 3, 4, 5, 6],
        },
        index=idx,
    )
    return [df.iloc[:2], df.iloc[2:4], df.iloc[4:]]


def run_timed(sz: Any, sdfmod: Any, build: Callable[[Any], Any]) -> list[Any]:
    source = sz.Stream()
    sdf = sdfmod.DataFrame(source, example=timed_batches()[0].iloc[:0])
    L = build(sdf).stream.sink_to_list()
    for df in timed_batches():
        source.emit(df)
    return L


TIMED_CASES: dict[str, Callable[[Any], Any]] = {
    "window_time_groupby_sum": lambda sdf: sdf.window("2h").groupby("name").amount.sum(),
    "window_time_mean": lambda sdf: sdf.window("2h").x.mean(),
    "window_n_value_counts": lambda sdf: sdf.window(n=3).name.value_counts(),
    "value_counts": lambda sdf: sdf.name.value_counts(),
    "rolling_time_mean": lambda sdf: sdf.x.rolling("2h").mean(),
    "groupby_series_mean": lambda sdf: sdf.groupby(sdf.name).amount.mean(),
    "groupby_count": lambda sdf: sdf.groupby("name").count(),
    "window_full": lambda sdf: sdf.window(n=3).full(),
    "window_groupby_series": lambda sdf: sdf.window(n=3).groupby(sdf.name).amount.sum(),
    "tail": lambda sdf: sdf.tail(2),
    "cummax": lambda sdf: sdf.x.cummax(),
    "window_apply": lambda sdf: sdf.window(n=2).apply(lambda df: df.amount.max()),
    "window_count": lambda sdf: sdf.window(n=2).count(),
    "astype": lambda sdf: sdf.x.astype(int),
    "round": lambda sdf: (sdf.x / 3).round(2),
    "filter_ne_columns": lambda sdf: sdf[sdf.name != "a"][["amount"]],
    "index": lambda sdf: sdf.index,
    "reset_index": lambda sdf: sdf.reset_index(),
}


@pytest.mark.parametrize("case", sorted(TIMED_CASES))
def test_documented_frame_operations_match_streamz(case: str) -> None:
    build = TIMED_CASES[case]
    expected = run_timed(streamz, streamz.dataframe, build)
    got = run_timed(rivermark, rivermark.dataframe, build)
    assert len(got) == len(expected) == 3
    if "value_counts" in case:
        # rivermark orders counts as pandas does (most frequent first), streamz does not
        got = [g.sort_index() for g in got]
        expected = [e.sort_index() for e in expected]
    for g, e in zip(got, expected):
        if isinstance(e, pd.Index):
            pd.testing.assert_index_equal(g, e)
        elif isinstance(e, pd.DataFrame):
            pd.testing.assert_frame_equal(g, e, check_dtype=False)
        elif isinstance(e, pd.Series):
            pd.testing.assert_series_equal(g, e, check_dtype=False, check_names=False)
        else:
            assert g == pytest.approx(e)


def test_random_starts_at_once_like_streamz() -> None:
    from rivermark.dataframe import Random
    from rivermark.testing import wait_for

    sdf = Random(freq="1ms", interval="5ms")
    try:
        L = sdf.x.sum().stream.sink_to_list()
        wait_for(lambda: len(L) >= 2)
    finally:
        sdf.stop()
    assert list(sdf.columns) == ["x", "y", "z"]
    assert all(isinstance(v, float) for v in L)


def test_periodic_dataframe_dask_must_be_a_bool() -> None:
    import re

    from rivermark import ConfigurationError
    from rivermark.dataframe import PeriodicDataFrame

    with pytest.raises(
        ConfigurationError, match=re.escape("dask must be True or False, got 'yes'")
    ):
        PeriodicDataFrame(dask="yes")  # type: ignore[arg-type]


def _frames_10() -> pd.DataFrame:
    return pd.DataFrame(
        {"x": list(range(10)), "y": [1, 2] * 5}, index=[0, 1, 0, 1, 2, 2, 0, 1, 2, 0]
    )


def run_10(sdfmod: Any, build: Callable[[Any], Any]) -> list[Any]:
    df = _frames_10()
    sdf = sdfmod.DataFrame(example=df)
    L = build(sdf).stream.sink_to_list()
    for i in range(0, 10, 3):
        sdf.emit(df.iloc[i : i + 3])
    return L


def _windowed_groupby_mod(sdf: Any) -> Any:
    w = sdf.window(n=4)
    return w.groupby(w.x % 3).y.sum()


CASES_10: dict[str, Callable[[Any], Any]] = {
    "window_plus_scalar": lambda sdf: (sdf.window(n=4) + 10).x.sum(),
    "window_groupby_window_expr": _windowed_groupby_mod,
    "groupby_index": lambda sdf: sdf.groupby(sdf.index).x.sum(),
    "window_groupby_index_expr": lambda sdf: sdf.window(n=4).groupby(sdf.index % 2).y.count(),
    "scalar_xor_series": lambda sdf: 3 ^ sdf.y,
}


@pytest.mark.parametrize("case", sorted(CASES_10))
def test_window_arithmetic_and_index_groupby_match_streamz(case: str) -> None:
    expected = run_10(streamz.dataframe, CASES_10[case])
    got = run_10(rivermark.dataframe, CASES_10[case])
    assert len(got) == len(expected) == 4
    for g, e in zip(got, expected):
        if isinstance(e, pd.Series):
            pd.testing.assert_series_equal(g, e, check_dtype=False, check_names=False)
        else:
            assert g == e


# ---------------------------------------------------------------------- custom aggregations
def streamz_docs_mean(aggregation_base: type) -> Any:
    """The custom ``Mean`` of streamz's "DataFrames" documentation, on ``aggregation_base``."""

    class Mean(aggregation_base):  # type: ignore[misc, valid-type]
        def initial(self, new: Any) -> Any:
            return new.iloc[:0].sum(), new.iloc[:0].count()

        def on_new(self, state: Any, new: Any) -> Any:
            total, count = state
            total = total + new.sum()
            count = count + new.count()
            return (total, count), total / count

        def on_old(self, state: Any, old: Any) -> Any:
            total, count = state
            total = total - old.sum()
            count = count - old.count()
            return (total, count), total / count

    return Mean()


def test_docs_custom_aggregation_in_every_windowing_scheme() -> None:
    def snippet(sz: Any, sdfmod: Any) -> list[Any]:
        source = sz.Stream()
        sdf = sdfmod.DataFrame(source, example=timed_batches()[0].iloc[:0][["amount", "x"]])
        outs = [
            sdf.aggregate(streamz_docs_mean(sdfmod.Aggregation)),
            sdf.window(n=3).aggregate(streamz_docs_mean(sdfmod.Aggregation)),
            sdf.window(value="2h").aggregate(streamz_docs_mean(sdfmod.Aggregation)),
        ]
        Ls = [o.stream.sink_to_list() for o in outs]
        for df in timed_batches():
            source.emit(df[["amount", "x"]])
        return [[s.to_dict() for s in L] for L in Ls]

    expected = snippet(streamz, streamz.dataframe)
    got = snippet(rivermark, rivermark.dataframe)
    assert got == expected
    assert got[1][-1] == {"amount": 5.0, "x": 5.0}


def test_custom_aggregation_with_on_old_results() -> None:
    # on_old's result is what is emitted once data leaves the window
    def snippet(sdfmod: Any) -> tuple[list[Any], list[Any]]:
        df = pd.DataFrame({"x": [float(i) for i in range(10)], "y": [1.0, 2.0] * 5})

        class Custom(sdfmod.Aggregation):  # type: ignore[misc, name-defined]
            def initial(self, new: Any) -> int:
                return 0

            def on_new(self, state: int, new: Any) -> tuple[int, int]:
                return state + 1, state

            def on_old(self, state: int, new: Any) -> tuple[int, int]:
                return state - 100, state

        sdf = sdfmod.DataFrame(example=df)
        L = sdf.aggregate(Custom()).stream.sink_to_list()
        sdf2 = sdfmod.DataFrame(example=df)
        L2 = sdf2.window(n=5).aggregate(Custom()).stream.sink_to_list()
        for _ in range(3):
            sdf.emit(df)
            sdf2.emit(df)
        return L, L2

    assert (
        snippet(rivermark.dataframe) == snippet(streamz.dataframe) == ([0, 1, 2], [1, -198, -397])
    )


def test_custom_aggregation_state_is_checkpointed() -> None:
    source = rivermark.Stream()
    sdf = rivermark.dataframe.DataFrame(source, example=EXAMPLE[["amount", "x"]])
    out = sdf.window(n=2).aggregate(streamz_docs_mean(rivermark.dataframe.Aggregation))
    node = out.stream
    for df in batches()[:2]:
        source.emit(df[["amount", "x"]])
    state = node.get_state()

    source2 = rivermark.Stream()
    sdf2 = rivermark.dataframe.DataFrame(source2, example=EXAMPLE[["amount", "x"]])
    out2 = sdf2.window(n=2).aggregate(streamz_docs_mean(rivermark.dataframe.Aggregation))
    out2.stream.set_state(state)
    L = out.stream.sink_to_list()
    L2 = out2.stream.sink_to_list()
    last = batches()[2][["amount", "x"]]
    source.emit(last)
    source2.emit(last)
    assert L[0].to_dict() == L2[0].to_dict() == {"amount": 155.0, "x": 4.5}


# ---------------------------------------------------------------------- PeriodicDataFrame, Random
def test_docs_periodic_dataframe_with_keyword_only_datafn() -> None:
    import numpy as np

    from rivermark.testing import wait_for

    def snippet(sdfmod: Any) -> tuple[Any, ...]:
        calls: list[list[str]] = []

        def random_datapoint(**kwargs: Any) -> pd.DataFrame:
            calls.append(sorted(kwargs))
            return pd.DataFrame({"a": np.random.random(1)}, index=[pd.Timestamp.now()])

        df = sdfmod.PeriodicDataFrame(interval="20ms", datafn=random_datapoint, tag="t")
        L = df.stream.sink_to_list()
        try:
            wait_for(lambda: len(L) >= 2, timeout=10)
        finally:
            df.stop()
        return list(df.columns), len(L[0]), calls[-1]

    assert (
        snippet(rivermark.dataframe)
        == snippet(streamz.dataframe)
        == (["a"], 1, ["last", "now", "tag"])
    )


def test_periodic_dataframe_first_batch_after_one_interval() -> None:
    import time

    from rivermark.testing import wait_for

    seen: list[tuple[pd.Timestamp, pd.Timestamp]] = []

    def block(last: pd.Timestamp, now: pd.Timestamp) -> pd.DataFrame:
        seen.append((last, now))
        return pd.DataFrame({"v": [1]}, index=[now])

    started = time.monotonic()
    df = rivermark.dataframe.PeriodicDataFrame(block, interval="200ms")
    L = df.stream.sink_to_list()
    try:
        wait_for(lambda: len(L) >= 1, timeout=10)
    finally:
        df.stop()
    assert time.monotonic() - started >= 0.19
    last, now = seen[-1]
    assert now - last >= pd.Timedelta("190ms")


def test_random_columns_and_dtypes_match_streamz() -> None:
    def snippet(sdfmod: Any) -> tuple[Any, ...]:
        df = sdfmod.Random(freq="5ms", interval="50ms", start=False)
        return list(df.columns), [str(t) for t in df.dtypes]

    assert (
        snippet(rivermark.dataframe)
        == snippet(streamz.dataframe)
        == (
            ["x", "y", "z"],
            ["float64", "int64", "float64"],
        )
    )


# ---------------------------------------------------------------------- combining results
def test_combining_a_series_with_its_rolling_result() -> None:
    # the "plotting" documentation combines raw and smoothed columns of the same source
    def build(sdf: Any) -> Any:
        x = sdf.x
        return sdfmod_frame(sdf)(
            {"raw": x, "smooth": x.rolling(2, min_periods=2).mean(), "diff": x - x.cumsum()}
        )

    def sdfmod_frame(sdf: Any) -> Any:
        return type(sdf)

    got = run(rivermark, rivermark.dataframe, build)
    expected = run(streamz, streamz.dataframe, build)
    assert len(got) == len(expected) == 3
    for g, e in zip(got, expected):
        pd.testing.assert_frame_equal(g, e)
    assert list(got[-1].columns) == ["raw", "smooth", "diff"]


def test_volatility_example_with_window_results() -> None:
    def build(sdf: Any) -> Any:
        return sdf.x - sdf.window(n=2).x.mean()

    compare(build)


# ---------------------------------------------------------------------- smaller API points
def test_ewm_mean_emits_the_newest_row() -> None:
    def snippet(sdfmod: Any) -> list[Any]:
        sdf = sdfmod.DataFrame(example=pd.DataFrame(columns=["x", "y"]))
        L = sdf.ewm(1).mean().stream.sink_to_list()
        sdf.emit(pd.DataFrame({"x": [1.0], "y": [2.0]}))
        sdf.emit(pd.DataFrame({"x": [2.0], "y": [3.0]}))
        sdf.emit(pd.DataFrame({"x": [3.0], "y": [4.0]}))
        return L

    got, expected = snippet(rivermark.dataframe), snippet(streamz.dataframe)
    pd.testing.assert_frame_equal(
        pd.concat(got, ignore_index=True), pd.concat(expected, ignore_index=True)
    )
    want = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [2.0, 3.0, 4.0]}).ewm(1).mean()
    pd.testing.assert_frame_equal(pd.concat(got, ignore_index=True), want)


@pytest.mark.parametrize("arg", ["com", "halflife", "alpha", "span"])
def test_ewm_refuses_invalid_arguments(arg: str) -> None:
    for sdfmod in (streamz.dataframe, rivermark.dataframe):
        sdf = sdfmod.DataFrame(example=pd.DataFrame(columns=["x", "y"]))
        with pytest.raises(ValueError):
            sdf.ewm(**{arg: -1})


def test_dtypes_and_set_index_with_a_column_or_a_series() -> None:
    def snippet(sz: Any, sdfmod: Any) -> list[Any]:
        df = pd.DataFrame({"x": [1, 2, 3], "y": [4, 5, 6]})
        a = sz.Stream()
        sdf = sdfmod.DataFrame(example=df, stream=a)
        by_name = sdf.set_index("x").stream.sink_to_list()
        by_series = sdf.set_index(sdf.y + 1).stream.sink_to_list()
        a.emit(df)
        return [
            str(sdf.index.dtype),
            str(sdf.x.dtype),
            by_name[0].to_dict(),
            by_series[0].to_dict(),
        ]

    assert snippet(rivermark, rivermark.dataframe) == snippet(streamz, streamz.dataframe)


def test_emitting_a_wrong_batch_raises_streamz_exception_types() -> None:
    for sdfmod in (streamz.dataframe, rivermark.dataframe):
        sdf = sdfmod.DataFrame(example=pd.DataFrame({"x": [1], "y": [2]}))
        with pytest.raises(TypeError):
            sdf.emit(1)
        with pytest.raises(IndexError):
            sdf.emit(pd.DataFrame())
    with pytest.raises(rivermark.dataframe.SchemaError, match="differ from the example's"):
        rivermark.dataframe.DataFrame(example=pd.DataFrame({"x": [1]})).emit(pd.DataFrame())


def test_groupby_aggregations_accept_start_and_with_state() -> None:
    def snippet(sz: Any, sdfmod: Any) -> tuple[Any, ...]:
        source = sz.Stream()
        g = sdfmod.DataFrame(source, example=pd.DataFrame({"name": [], "amount": []})).groupby(
            ["name"]
        )
        sums = g.amount.sum(start=None).stream.sink_to_list()
        counts = g.amount.count(start=None).stream.sink_to_list()
        means = g.amount.mean(with_state=True, start=None).stream.sink_to_list()
        for df in batches():
            source.emit(df[["name", "amount"]].astype({"amount": float}))
        return (
            sums[-1].to_dict(),
            counts[-1].to_dict(),
            type(means[-1]).__name__,
            means[-1][1].to_dict(),
        )

    assert snippet(rivermark, rivermark.dataframe) == snippet(streamz, streamz.dataframe)


def test_groupby_start_in_streamz_form() -> None:
    # streamz's start= of a grouped sum or count: a result it emitted (per group, the value)
    def snippet(sz: Any, sdfmod: Any) -> tuple[Any, ...]:
        example = pd.DataFrame({"name": [], "amount": []})
        first = sz.Stream()
        g = sdfmod.DataFrame(first, example=example).groupby("name")
        sums = g.amount.sum(start=None).stream.sink_to_list()
        counts = g.amount.count(start=None).stream.sink_to_list()
        first.emit(pd.DataFrame({"name": ["Alice", "Tom"], "amount": [50, 100]}))
        second = sz.Stream()
        g2 = sdfmod.DataFrame(second, example=example).groupby("name")
        sums2 = g2.amount.sum(start=sums[-1]).stream.sink_to_list()
        counts2 = g2.amount.count(start=counts[-1]).stream.sink_to_list()
        second.emit(pd.DataFrame({"name": ["Alice", "Linda"], "amount": [5, 7]}))
        s, c = sums2[-1], counts2[-1]
        return s.to_dict(), str(s.dtype), c.to_dict(), str(c.dtype)

    assert snippet(rivermark, rivermark.dataframe) == snippet(streamz, streamz.dataframe)


def test_groupby_start_of_another_shape_is_refused() -> None:
    g = rivermark.dataframe.DataFrame(example=EXAMPLE).groupby("name")
    with pytest.raises(rivermark.errors.ConfigurationError, match="pass start=None"):
        g.amount.sum(start=pd.DataFrame({"amount": [1]}, index=["Alice"]))


def test_groupby_mean_resumes_from_its_emitted_state() -> None:
    source = rivermark.Stream()
    g = rivermark.dataframe.DataFrame(source, example=EXAMPLE).groupby("name")
    L = g.amount.mean(with_state=True).stream.sink_to_list()
    for df in batches()[:2]:
        source.emit(df)
    state, _ = L[-1]
    source2 = rivermark.Stream()
    g2 = rivermark.dataframe.DataFrame(source2, example=EXAMPLE).groupby("name")
    L2 = g2.amount.mean(start=state).stream.sink_to_list()
    source2.emit(batches()[2])
    assert L2[-1].to_dict() == {"Alice": 25.0, "Bob": 105.0, "Carol": 300.0}


def test_accumulate_partitions() -> None:
    def snippet(sz: Any, sdfmod: Any) -> list[Any]:
        def running_max(acc: Any, df: Any) -> Any:
            return max([acc, *df.amount.tolist()])

        source = sz.Stream()
        sdf = sdfmod.DataFrame(source, example=EXAMPLE)
        out = sdf.accumulate_partitions(running_max, start=0, stream_type="updating")
        L = out.stream.sink_to_list()
        for df in batches():
            source.emit(df)
        return [int(v) for v in L]

    assert snippet(rivermark, rivermark.dataframe) == snippet(streamz, streamz.dataframe)


def test_register_api_on_dataframes() -> None:
    def snippet(sz: Any, sdfmod: Any) -> list[Any]:
        @sdfmod.DataFrame.register_api(attribute_name="positive")
        def positive(self: Any) -> Any:
            return self[self.amount > 0]

        source = sz.Stream()
        L = sdfmod.DataFrame(source, example=EXAMPLE).positive().amount.sum().stream.sink_to_list()
        for df in batches():
            source.emit(df)
        return [int(v) for v in L]

    assert snippet(rivermark, rivermark.dataframe) == snippet(streamz, streamz.dataframe)


def test_frames_of_unrelated_sources_are_refused() -> None:
    # streamz zips the two streams and pairs whatever batches arrive;
    # rivermark's documented decision is to refuse (zip the streams yourself)
    a = streamz.dataframe.DataFrame(example=EXAMPLE)
    b = streamz.dataframe.DataFrame(example=EXAMPLE)
    L = (a.x + b.x).stream.sink_to_list()
    a.emit(batches()[0])
    b.emit(batches()[1])
    assert list(L[0]) == [4.0, 6.0]
    ra = rivermark.dataframe.DataFrame(example=EXAMPLE)
    rb = rivermark.dataframe.DataFrame(example=EXAMPLE)
    with pytest.raises(rivermark.ConfigurationError, match="different source streams"):
        ra.x + rb.x  # noqa: B018


def test_docs_plotting_example_on_random_data() -> None:
    from rivermark.dataframe import DataFrame, Random
    from rivermark.testing import wait_for

    source = Random(freq="5ms", interval="20ms")
    try:
        sdf = (source - 0.5).cumsum()
        p = DataFrame(
            {
                "raw": sdf.x,
                "smooth": sdf.x.rolling("100ms").mean(),
                "very-smooth": sdf.x.rolling("500ms").mean(),
            }
        )
        L = p.stream.sink_to_list()
        wait_for(lambda: len(L) >= 3, timeout=10)
    finally:
        source.stop()
    assert list(p.columns) == ["raw", "smooth", "very-smooth"]
    assert all(list(df.columns) == ["raw", "smooth", "very-smooth"] for df in L)
    assert all(len(df) > 0 for df in L[1:])


@pytest.mark.parametrize("op", ["sum", "count", "apply", "full", "var", "std"])
def test_ewm_operations_other_than_mean_raise_not_implemented(op: str) -> None:
    calls: dict[str, Callable[[Any], Any]] = {
        "sum": lambda e: e.sum(),
        "count": lambda e: e.count(),
        "apply": lambda e: e.apply(lambda x: x),
        "full": lambda e: e.full(),
        "var": lambda e: e.var(),
        "std": lambda e: e.std(),
    }
    for sdfmod in (streamz.dataframe, rivermark.dataframe):
        sdf = sdfmod.DataFrame(example=pd.DataFrame(columns=["x", "y"]))
        with pytest.raises(NotImplementedError):
            calls[op](sdf.ewm(1))
    with pytest.raises(
        rivermark.ConfigurationError, match=r"ewm\(\.\.\.\)\.var\(\) is not supported"
    ):
        rivermark.dataframe.DataFrame(example=pd.DataFrame(columns=["x"])).ewm(com=1).var()


@pytest.mark.parametrize(
    ("build", "first"),
    [
        (lambda sdf: sdf.amount.sum(start=10), 310),
        (lambda sdf: sdf.amount.count(start=3), 5),
        (lambda sdf: sdf.amount.mean(start=(10, 2)), 77.5),
    ],
)
def test_reductions_start_in_streamz_form(build: Callable[[Any], Any], first: float) -> None:
    # streamz's start= of a running reduction: the value (sum, count) or (sum, count) for mean
    got = compare(build)
    assert got[0] == pytest.approx(first)


def test_random_datapoint_as_streamz() -> None:
    from streamz.dataframe.core import random_datapoint as theirs

    from rivermark.dataframe.core import random_datapoint as ours

    now = pd.Timestamp("2024-01-01 12:00")
    got, expected = ours(now=now), theirs(now=now)
    assert list(got.columns) == list(expected.columns)
    assert list(got.index) == list(expected.index) == [now]
    assert 0 <= float(got.a.iloc[0]) < 1
