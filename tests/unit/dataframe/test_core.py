from __future__ import annotations

import operator
import re

import pandas as pd
import pandas.testing as tm
import pytest

from rivermark import Stream
from rivermark.dataframe import (
    DataFrame,
    DataFrames,
    Index,
    SchemaError,
    Series,
    Seriess,
    Streaming,
)
from rivermark.errors import ConfigurationError

from .helpers import batches, example, run, source_and_sdf

DATA = batches()


def each(s: Stream, out: object, data: list[pd.DataFrame] = DATA) -> list[object]:
    return run(s, out, data)


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda sdf: sdf.x, lambda df: df.x),
        (lambda sdf: sdf["amount"], lambda df: df["amount"]),
        (lambda sdf: sdf[["x", "amount"]], lambda df: df[["x", "amount"]]),
        (lambda sdf: sdf[sdf.x > 0], lambda df: df[df.x > 0]),
        (lambda sdf: sdf.x + sdf.amount, lambda df: df.x + df.amount),
        (lambda sdf: 2 * sdf.amount - 1, lambda df: 2 * df.amount - 1),
        (lambda sdf: sdf.amount / 3, lambda df: df.amount / 3),
        (lambda sdf: sdf.amount // 3 + sdf.amount % 3, lambda df: df.amount // 3 + df.amount % 3),
        (lambda sdf: sdf.x**2, lambda df: df.x**2),
        (lambda sdf: -sdf.x, lambda df: -df.x),
        (lambda sdf: abs(sdf.x), lambda df: abs(df.x)),
        (lambda sdf: (sdf.x > 0) & (sdf.amount < 50), lambda df: (df.x > 0) & (df.amount < 50)),
        (lambda sdf: (sdf.x <= 0) | (sdf.amount >= 50), lambda df: (df.x <= 0) | (df.amount >= 50)),
        (lambda sdf: sdf.name == "bob", lambda df: df.name == "bob"),
        (lambda sdf: sdf.name != "bob", lambda df: df.name != "bob"),
        (lambda sdf: sdf.assign(y=sdf.x * 2, c=1), lambda df: df.assign(y=df.x * 2, c=1)),
        (lambda sdf: sdf.query("amount > 50"), lambda df: df.query("amount > 50")),
        (lambda sdf: sdf.amount.astype(float), lambda df: df.amount.astype(float)),
        (lambda sdf: sdf.amount.map(lambda v: v + 1), lambda df: df.amount.map(lambda v: v + 1)),
        (lambda sdf: sdf.x.round(2), lambda df: df.x.round(2)),
        (lambda sdf: sdf.reset_index(), lambda df: df.reset_index()),
        (lambda sdf: sdf.set_index("name"), lambda df: df.set_index("name")),
        (lambda sdf: sdf.x.to_frame(), lambda df: df.x.to_frame()),
        (lambda sdf: sdf.to_frame(), lambda df: df),
        (
            lambda sdf: DataFrame({"a": sdf.x, "b": sdf.amount}),
            lambda df: pd.DataFrame({"a": df.x, "b": df.amount}),
        ),
    ],
)
def test_elementwise_matches_pandas_per_batch(build, expected) -> None:
    s, sdf = source_and_sdf()
    out = build(sdf)
    L = each(s, out)
    assert len(L) == len(DATA)
    for got, batch in zip(L, DATA):
        want = expected(batch)
        if isinstance(want, pd.DataFrame):
            tm.assert_frame_equal(got, want)
        else:
            tm.assert_series_equal(got, want)
    # concatenated output equals pandas over the concatenated input
    whole = pd.concat(DATA)
    if isinstance(expected(whole), pd.DataFrame) and "reset_index" not in repr(
        build.__code__.co_names
    ):
        assert len(pd.concat(L)) == len(expected(whole))


def test_tail_and_index() -> None:
    s2, sdf2 = source_and_sdf()
    tails = run(s2, sdf2.tail(2), DATA)
    s3, sdf3 = source_and_sdf()
    idx = run(s3, sdf3.index, DATA)
    for t, i, b in zip(tails, idx, DATA):
        tm.assert_frame_equal(t, b.tail(2))
        tm.assert_index_equal(i, b.index)
    assert isinstance(sdf3.index, Index)


def test_setitem_replaces_stream() -> None:
    s, sdf = source_and_sdf()
    sdf["y"] = sdf.x + 1
    sdf["z"] = 7
    assert list(sdf.columns) == ["name", "amount", "x", "y", "z"]
    L = each(s, sdf)
    for got, b in zip(L, DATA):
        want = b.copy()
        want["y"] = b.x + 1
        want["z"] = 7
        tm.assert_frame_equal(got, want)


def test_types_and_example() -> None:
    s, sdf = source_and_sdf()
    assert isinstance(sdf.x, Series)
    assert isinstance(sdf.sum(), Seriess)
    assert isinstance(sdf.groupby("name").sum(), DataFrames)
    assert isinstance(sdf.x.sum(), Streaming)
    assert list(sdf.dtypes.index) == ["name", "amount", "x"]
    assert sdf.x.dtype == "float64"
    assert "x" in dir(sdf)
    assert "elements like" in repr(sdf)
    with pytest.raises(AttributeError, match="no attribute or column 'nope'"):
        sdf.nope  # noqa: B018


def test_to_dataframe_registered_on_stream() -> None:
    s = Stream()
    sdf = s.to_dataframe(example())
    assert isinstance(sdf, DataFrame)
    L = run(s, sdf.amount.sum(), DATA)
    assert L[-1] == pd.concat(DATA).amount.sum()


def test_emit_verifies_schema() -> None:
    s, sdf = source_and_sdf()
    L = sdf.stream.sink_to_list()
    sdf.emit(DATA[0])
    assert len(L) == 1
    with pytest.raises(SchemaError, match=re.escape("batch columns ['a'] differ")):
        sdf.emit(pd.DataFrame({"a": [1]}))
    with pytest.raises(SchemaError, match="expected a pandas.DataFrame"):
        sdf.emit([1, 2])


def test_bad_example_and_different_roots() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("DataFrame: example must be a pandas.DataFrame")
    ):
        DataFrame(Stream(), example=[1, 2])
    _, a = source_and_sdf()
    _, b = source_and_sdf()
    with pytest.raises(ConfigurationError, match="different source streams"):
        a.x + b.x  # noqa: B018


def test_frames_methods_on_updating_results() -> None:
    s, sdf = source_and_sdf()
    totals = sdf.groupby("name").amount.sum()
    L = each(s, totals.sum())
    whole = pd.concat(DATA)
    assert L[-1] == whole.amount.sum()
    s2, sdf2 = source_and_sdf()
    big = run(s2, sdf2.groupby("name").amount.sum().nlargest(2), DATA)
    tm.assert_series_equal(big[-1], whole.groupby("name").amount.sum().nlargest(2))


def test_scalar_streaming_arithmetic() -> None:
    s, sdf = source_and_sdf()
    L = each(s, sdf.amount.sum() * 2 + 1)
    assert L[-1] == 2 * pd.concat(DATA).amount.sum() + 1
    assert operator.eq(len(L), len(DATA))
