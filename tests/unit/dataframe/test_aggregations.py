"""Running reductions, cumulative ops and groupby against pandas on the concatenated input."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pandas.testing as tm
import pytest

from rivermark.dataframe import Aggregate
from rivermark.dataframe.aggregations import GroupbyAggregation, Sum
from rivermark.errors import ConfigurationError

from .helpers import batches, prefixes, run, source_and_sdf

DATA = batches(15)
PREFIXES = prefixes(DATA)


def check(got: object, want: object) -> None:
    if isinstance(want, pd.DataFrame):
        tm.assert_frame_equal(got, want)  # type: ignore[arg-type]
    elif isinstance(want, pd.Series):
        tm.assert_series_equal(got, want)  # type: ignore[arg-type]
    else:
        assert got == pytest.approx(want)


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda sdf: sdf[["amount", "x"]].sum(), lambda df: df[["amount", "x"]].sum()),
        (lambda sdf: sdf.amount.sum(), lambda df: df.amount.sum()),
        (lambda sdf: sdf.count(), lambda df: df.count()),
        (lambda sdf: sdf.x.count(), lambda df: df.x.count()),
        (lambda sdf: sdf.size, lambda df: df.size),
        (lambda sdf: sdf.x.size, lambda df: df.x.size),
        (lambda sdf: sdf[["amount", "x"]].mean(), lambda df: df[["amount", "x"]].mean()),
        (lambda sdf: sdf.x.mean(), lambda df: df.x.mean()),
        (lambda sdf: sdf.x.var(), lambda df: df.x.var()),
        (lambda sdf: sdf.x.std(), lambda df: df.x.std()),
        (lambda sdf: sdf[["amount", "x"]].var(ddof=0), lambda df: df[["amount", "x"]].var(ddof=0)),
        (lambda sdf: sdf.amount.aggregate(Sum()), lambda df: df.amount.sum()),
    ],
)
def test_reductions_match_pandas_after_every_batch(build, expected) -> None:
    s, sdf = source_and_sdf()
    L = run(s, build(sdf), DATA)
    assert len(L) == len(DATA)
    for got, df in zip(L, PREFIXES):
        want = expected(df)
        if isinstance(want, pd.Series) and want.dtype.kind == "f":
            tm.assert_series_equal(got, want, rtol=1e-9)
        else:
            check(got, want)


def test_value_counts() -> None:
    s, sdf = source_and_sdf()
    L = run(s, sdf.name.value_counts(), DATA)
    for got, df in zip(L, PREFIXES):
        tm.assert_series_equal(got.sort_index(), df.name.value_counts().sort_index())


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummin", "cummax"])
def test_cumulative(op: str) -> None:
    s, sdf = source_and_sdf()
    col = sdf.x if op != "cumprod" else sdf.x / 10 + 1
    L = run(s, getattr(col, op)(), DATA)
    whole = pd.concat(DATA)
    base = whole.x if op != "cumprod" else whole.x / 10 + 1
    tm.assert_series_equal(pd.concat(L), getattr(base, op)())
    # a DataFrame works too
    s2, sdf2 = source_and_sdf()
    L2 = run(s2, getattr(sdf2[["amount", "x"]], op)(), DATA)
    tm.assert_frame_equal(pd.concat(L2), getattr(whole[["amount", "x"]], op)())


@pytest.mark.parametrize("how", ["sum", "count", "mean", "size", "var", "std"])
def test_groupby_series(how: str) -> None:
    s, sdf = source_and_sdf()
    L = run(s, getattr(sdf.groupby("name").amount, how)(), DATA)
    for got, df in zip(L, PREFIXES):
        want = getattr(df.groupby("name").amount, how)()
        tm.assert_series_equal(got, want, check_dtype=how not in ("var", "std"), rtol=1e-9)


@pytest.mark.parametrize("how", ["sum", "count", "mean", "size", "var"])
def test_groupby_dataframe(how: str) -> None:
    s, sdf = source_and_sdf()
    L = run(s, getattr(sdf[["name", "amount", "x"]].groupby("name"), how)(), DATA)
    for got, df in zip(L, PREFIXES):
        want = getattr(df.groupby("name"), how)()
        if isinstance(want, pd.DataFrame):
            tm.assert_frame_equal(got, want, check_dtype=how not in ("var",), rtol=1e-9)
        else:
            tm.assert_series_equal(got, want)


def test_groupby_keeps_int_dtype_when_new_keys_appear() -> None:
    s, sdf = source_and_sdf()
    L = run(s, sdf.groupby("name").amount.sum(), DATA)
    assert all(r.dtype == "int64" for r in L)


def test_groupby_errors() -> None:
    _, sdf = source_and_sdf()
    with pytest.raises(ConfigurationError, match=re.escape("groupby: 'nope' is not a column")):
        sdf.groupby("nope")
    _, other = source_and_sdf()
    with pytest.raises(ConfigurationError, match="different source streams"):
        sdf.groupby(other.name)
    with pytest.raises(ConfigurationError, match=re.escape("unknown aggregation 'median'")):
        GroupbyAggregation("median", by="name")


def test_user_error_policy_skip() -> None:
    s, sdf = source_and_sdf()
    node = Aggregate(sdf.stream, Sum(), on_error="skip")
    L = node.sink_to_list()
    s.emit(pd.Series([1, 2]))
    s.emit(object())  # len() fails inside the aggregation
    s.emit(pd.Series([3]))
    assert [int(v) for v in L] == [3, 6]
    assert node.error_count == 1


def test_nan_values_are_ignored_like_pandas() -> None:
    s, sdf = source_and_sdf()
    data = [b.assign(x=b.x.where(b.amount > 30, np.nan)) for b in DATA]
    L = run(s, sdf.x.mean(), data)
    assert L[-1] == pytest.approx(pd.concat(data).x.mean())


@pytest.mark.parametrize("how", ["sum", "mean", "count", "size"])
def test_groupby_by_streaming_series(how: str) -> None:
    s, sdf = source_and_sdf()
    L = run(s, getattr(sdf.groupby(sdf.amount % 3).x, how)(), DATA)
    for got, df in zip(L, PREFIXES):
        want = getattr(df.groupby(df.amount % 3).x, how)()
        tm.assert_series_equal(got, want, check_dtype=how != "mean", rtol=1e-9)
    s2, sdf2 = source_and_sdf()
    W = run(s2, sdf2.window(n=6).groupby(sdf2.name.map(str.upper)).amount.sum(), DATA)
    for got, df in zip(W, PREFIXES):
        tail = df.tail(6)
        tm.assert_series_equal(got, tail.groupby(tail.name.str.upper()).amount.sum())


@pytest.mark.parametrize(
    "keys",
    [
        [["b", "a", "c"], ["c", "b", "a"], ["a", "d", None], ["d", "c", "b"]],
        [[3, 1, 2], [2, 3, 1], [1, 4, 2], [4, 4, 3]],
    ],
    ids=["strings", "ints"],
)
def test_running_groupby_sum_with_the_same_keys_in_another_order_per_batch(
    keys: list[list[object]],
) -> None:
    """Keys met in a new order (and new keys) still give pandas' sorted groups and sums."""
    from rivermark import Stream
    from rivermark.dataframe import DataFrame

    frames = [
        pd.DataFrame({"name": ks, "amount": np.arange(len(ks), dtype="int64") + 10 * i})
        for i, ks in enumerate(keys)
    ]
    source = Stream()
    sdf = DataFrame(source, example=pd.DataFrame({"name": [], "amount": []}))
    out = sdf.groupby("name").amount.sum().stream.sink_to_list()
    for f in frames:
        source.emit(f)
    for i in range(len(frames)):
        seen = pd.concat([pd.DataFrame({"name": [], "amount": []}), *frames[: i + 1]])
        want = seen.groupby("name").amount.sum()
        tm.assert_series_equal(out[i], want)
        assert list(out[i].index) == sorted(out[i].index)
