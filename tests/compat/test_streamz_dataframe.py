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


def test_rolling_applies_documented_min_periods_default() -> None:
    # streamz's rolling() documents min_periods=1 but its known aggregations
    # never pass it to pandas (so a first partial window is NaN there);
    # rivermark applies min_periods, defaulting to 1 as documented.
    got = run(rivermark, rivermark.dataframe, lambda sdf: sdf.x.rolling(2).sum())
    assert list(pd.concat(got)) == [1.0, 3.0, 5.0, 7.0, 9.0]


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


def test_periodic_dataframe_dask_true_is_refused() -> None:
    import re

    from rivermark import ConfigurationError
    from rivermark.dataframe import PeriodicDataFrame

    with pytest.raises(ConfigurationError, match=re.escape("dask=True is not supported")):
        PeriodicDataFrame(dask=True)


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
