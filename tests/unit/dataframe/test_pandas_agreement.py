"""Each class of disagreement with pandas found by differential testing, as a named case.

Numbered: (1) cumulative ops through NaN, (2) stable
variance, (3) windows without subtraction drift, (4) columns matched by name,
(5) dtype changes converted exactly or refused, (6) empty and all-NaN input,
(7) value_counts order, ewm and NaN, error names, time windows checked at
graph build time.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as tm
import pytest

from rivermark import Stream
from rivermark.checkpoint.protocol.job import Job
from rivermark.dataframe import ColumnsError, DataFrame, SchemaError, Series
from rivermark.errors import ConfigurationError, RivermarkError

from .test_state import restore, snapshot


def frame(**cols: Any) -> pd.DataFrame:
    return pd.DataFrame(cols)


def series_stream(dtype: str = "float64") -> tuple[Stream, Series]:
    s = Stream()
    return s, Series(s, example=pd.Series([], dtype=dtype, name="x"))


def emit_all(s: Stream, out: Any, batches: list[Any]) -> list[Any]:
    L = out.stream.sink_to_list()
    for b in batches:
        s.emit(b)
    return L


# ---------------------------------------------------------------- 1. cumulative ops through NaN
@pytest.mark.parametrize(
    ("op", "batches", "last"),
    [
        ("cumsum", [[1.0, math.nan], [2.0]], 3.0),
        ("cummin", [[1.0, math.nan], [2.0]], 1.0),
        ("cummax", [[5.0, math.nan], [2.0]], 5.0),
        ("cumprod", [[4.5], [math.nan], [3.5]], 15.75),
    ],
)
def test_1_cumulative_keeps_the_running_value_after_nan(
    op: str, batches: list[list[float]], last: float
) -> None:
    s, sx = series_stream()
    L = emit_all(s, getattr(sx, op)(), [pd.Series(b, name="x") for b in batches])
    got = pd.concat(L, ignore_index=True)
    want = getattr(pd.Series(sum(batches, []), name="x"), op)()
    tm.assert_series_equal(got, want)
    assert got.iloc[-1] == last


def test_1_cumulative_state_is_the_running_value_per_column() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(a=pd.Series([], dtype=float), b=pd.Series([], dtype=float)))
    out = sdf.cumsum()
    L = out.stream.sink_to_list()
    s.emit(frame(a=[1.0, 2.0], b=[math.nan, math.nan]))
    s.emit(frame(a=[math.nan], b=[5.0]))
    blob = snapshot(s)
    s2 = Stream()
    sdf2 = DataFrame(s2, example=sdf.example)
    L2 = sdf2.cumsum().stream.sink_to_list()
    restore(s2, blob)
    s2.emit(frame(a=[1.0], b=[1.0]))
    assert L2[-1].iloc[0].tolist() == [4.0, 6.0]
    assert len(L) == 2


# ---------------------------------------------------------------- 2. stable variance
CLOSE = [1e9 + 0.1, 1e9 + 0.2, 1e9 + 0.3]


@pytest.mark.parametrize("split", [[3], [1, 2], [1, 1, 1]])
def test_2_var_and_std_of_large_values_with_a_small_spread(split: list[int]) -> None:
    parts, i = [], 0
    for k in split:
        parts.append(pd.Series(CLOSE[i : i + k], name="x"))
        i += k
    s, sx = series_stream()
    var = emit_all(s, sx.var(), parts)
    s, sx = series_stream()
    std = emit_all(s, sx.std(), parts)
    # the inputs are rounded to ulp(1e9) ~ 1.2e-7, so the spread of 0.1 is known to
    # about 1e-6 relative: the merged moments agree with pandas to that
    assert var[-1] == pytest.approx(pd.Series(CLOSE).var(), rel=1e-5)  # 0.01
    assert std[-1] == pytest.approx(0.1, rel=1e-5)
    s, sx = series_stream()
    win = emit_all(s, sx.window(n=3).var(), parts)
    assert win[-1] == pytest.approx(0.01, rel=1e-5)


def test_2_groupby_std_of_equal_large_values_is_zero() -> None:
    s = Stream()
    ex = frame(k=pd.Series([], dtype=object), x=pd.Series([], dtype=float))
    sdf = DataFrame(s, example=ex)
    L = emit_all(s, sdf.groupby("k").x.std(), [frame(k=["a"], x=[1e9 + 0.3])] * 3)
    assert L[-1].to_dict() == {"a": 0.0}
    s = Stream()
    sdf = DataFrame(s, example=ex)
    W = emit_all(s, sdf.window(n=3).groupby("k").x.var(), [frame(k=["a"], x=[1e9 + 0.3])] * 4)
    assert W[-1].to_dict() == {"a": 0.0}


def test_2_int64_variance_does_not_overflow() -> None:
    values = [4_000_000_000, 4_000_000_001, 4_000_000_002]
    s, sx = series_stream("int64")
    L = emit_all(s, sx.var(), [pd.Series([v], name="x") for v in values])
    assert L[-1] == 1.0
    s = Stream()
    sdf = DataFrame(s, example=frame(k=pd.Series([], dtype=object), x=pd.Series([], dtype="int64")))
    G = emit_all(s, sdf.groupby("k").x.var(), [frame(k=["a"] * 3, x=values)])
    assert G[-1].to_dict() == {"a": 1.0}


# ---------------------------------------------------------------- 3. windows recomputed, no drift
def test_3_count_window_sum_and_var_do_not_drift() -> None:
    s, sx = series_stream()
    L = emit_all(s, sx.window(n=2).sum(), [pd.Series([v], name="x") for v in (1e20, 1.0, 2.0)])
    assert L[-1] == 3.0
    s, sx = series_stream()
    V = emit_all(s, sx.window(n=2).var(), [pd.Series([v], name="x") for v in (1e10, 1.0, 2.0)])
    assert V[-1] == 0.5


def test_3_time_window_sum_and_var_do_not_drift() -> None:
    t = pd.Timestamp("2024-01-01")

    def at(sec: int, v: float) -> pd.Series:
        return pd.Series([v], index=pd.DatetimeIndex([t + pd.Timedelta(seconds=sec)]), name="x")

    data = [at(0, 1e20), at(5, 1.0), at(6, 2.0)]
    s, sx = series_stream()
    assert emit_all(s, sx.window("3s").sum(), data)[-1] == 3.0
    data = [at(0, 1e10), at(5, 1.0), at(6, 2.0)]
    s, sx = series_stream()
    assert emit_all(s, sx.window("3s").var(), data)[-1] == 0.5


def test_3_window_groupby_min_max_follow_the_window() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(k=pd.Series([], dtype=object), x=pd.Series([], dtype=float)))
    data = [frame(k=["a", "b"], x=[1.0, 9.0]), frame(k=["a"], x=[5.0]), frame(k=["a"], x=[3.0])]
    lo = emit_all(s, sdf.window(n=2).groupby("k").x.min(), data)
    assert [r.to_dict() for r in lo] == [{"a": 1.0, "b": 9.0}, {"a": 5.0, "b": 9.0}, {"a": 3.0}]


# ---------------------------------------------------------------- 4. columns matched by name
def test_4_columns_in_another_order_are_matched_by_name() -> None:
    s = Stream()
    ex = frame(
        k=pd.Series([], dtype=object), a=pd.Series([], dtype="int64"), x=pd.Series([], dtype=float)
    )
    sdf = DataFrame(s, example=ex)
    b1 = frame(k=["u"], a=[10], x=[1.0])
    b2 = frame(x=[2.0], a=[20], k=["u"])
    L = emit_all(s, sdf.groupby("k").sum(), [b1, b2])
    want = pd.concat([b1, b2[["k", "a", "x"]]]).groupby("k").sum()
    tm.assert_frame_equal(L[-1], want)
    assert L[-1].loc["u"].to_dict() == {"a": 30, "x": 3.0}


def test_4_an_extra_column_arriving_through_the_stream_is_refused() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(x=pd.Series([], dtype=float)))
    L = sdf.sum().stream.sink_to_list()
    s.emit(frame(x=[1.0]))
    with pytest.raises(ColumnsError, match=re.escape("sum(): batch columns ['x', 'y']")):
        s.emit(frame(x=[1.0], y=[2.0]))  # not through sdf.emit: the node checks it
    assert L[-1].to_dict() == {"x": 1.0}


def test_4_under_a_job_batches_are_matched_by_name(tmp_path: Any) -> None:
    b1 = frame(k=["u"], a=[10], x=[1.0])
    b2 = frame(x=[2.0], a=[20], k=["u"])
    source = Stream.from_iterable([b1, b2])  # type: ignore[attr-defined]
    sdf = DataFrame(source, example=b1.iloc[:0])
    L = sdf.groupby("k").sum().stream.sink_to_list()
    Job(source, checkpoint=str(tmp_path / "ck"), every=None).run()
    assert L[-1].loc["u"].to_dict() == {"a": 30, "x": 3.0}


# ---------------------------------------------------------------- 5. dtype changes
def test_5_a_float_batch_into_an_int_column_is_refused_naming_both_dtypes() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(k=pd.Series([], dtype=object), a=pd.Series([], dtype="int64")))
    L = sdf.groupby("k").sum().stream.sink_to_list()
    s.emit(frame(k=["u"], a=[1]))
    with pytest.raises(
        SchemaError,
        match=re.escape("column 'a' changed dtype from 'int64' (earlier batches) to 'float64'"),
    ):
        s.emit(frame(k=["u"], a=[0.5]))
    s.emit(frame(k=["u"], a=[2]))
    assert L[-1].to_dict() == {"a": {"u": 3}}


def test_5_exact_conversions_are_applied() -> None:
    s = Stream()
    ex = frame(
        k=pd.Series([], dtype=object), a=pd.Series([], dtype="int64"), x=pd.Series([], dtype=float)
    )
    sdf = DataFrame(s, example=ex)
    L = sdf.groupby("k").sum().stream.sink_to_list()
    s.emit(frame(k=["u"], a=[2**60], x=[0.5]))
    s.emit(frame(k=["u"], a=pd.Series([3], dtype="int32"), x=pd.Series([1], dtype="int64")))
    assert L[-1].at["u", "a"] == 2**60 + 3  # not through float64
    assert L[-1]["a"].dtype == np.dtype("int64")
    assert L[-1].at["u", "x"] == 1.5


@pytest.mark.parametrize(
    ("values", "have", "want", "ok"),
    [
        ([2**53, -(2**53)], "int64", "float64", True),
        ([2**53 + 1], "int64", "float64", False),
        ([-(2**53) - 1], "int64", "float64", False),
        ([2**53 + 1], "uint64", "float64", False),
        ([3, -4], "int32", "int64", True),
        ([0.5], "float32", "float64", True),
        ([], "int64", "float64", True),
    ],
)
def test_5_numeric_widening_keeps_every_value_or_refuses(
    values: list[Any], have: str, want: str, ok: bool
) -> None:
    from rivermark.dataframe.schema import convert_column

    col = pd.Series(values, dtype=have)
    out = convert_column(col, np.dtype(want))
    if not ok:
        assert out is None
        return
    assert out is not None and out.dtype == want
    assert [int(v) if have != "float32" else v for v in out] == values


def test_5_the_schema_survives_a_restored_job(tmp_path: Any) -> None:
    good = [frame(k=["u"], a=[1]), frame(k=["u"], a=[2])]
    bad = frame(k=["u"], a=[0.5])

    def build(data: list[pd.DataFrame]) -> tuple[Stream, list[Any]]:
        source = Stream.from_iterable(data)  # type: ignore[attr-defined]
        sdf = DataFrame(
            source, example=frame(k=pd.Series([], dtype=object), a=pd.Series([], dtype="int64"))
        )
        return source, sdf.groupby("k").a.sum().stream.sink_to_list()

    source, _ = build(good)
    Job(source, checkpoint=str(tmp_path / "ck"), every_batches=1).run()
    source, L = build([*good, bad])  # resumes after ``good``
    with pytest.raises((SchemaError, RivermarkError)) as info:
        Job(source, checkpoint=str(tmp_path / "ck"), every_batches=1).run()
    text = "".join(str(e) for e in _chain(info.value))
    assert "changed dtype from 'int64' (earlier batches) to 'float64'" in text


@pytest.mark.parametrize("example_dtype", ["float64", "int64"])
def test_5_the_example_takes_part_in_the_dtype_as_an_empty_leading_batch(
    example_dtype: str,
) -> None:
    # an untyped (float64) example makes int data float64, as
    # pd.concat([example, *batches]) does
    ex = frame(k=pd.Series([], dtype=object), a=pd.Series([], dtype=example_dtype))
    batches = [frame(k=["u", "v"], a=[1, 2]), frame(k=["u"], a=[3])]
    whole = pd.concat([ex, *batches])
    s = Stream()
    sdf = DataFrame(s, example=ex)
    grouped = sdf.groupby("k").a.sum().stream.sink_to_list()
    total = sdf.a.sum().stream.sink_to_list()
    cum = sdf.a.cumsum().stream.sink_to_list()
    window = sdf.window(2).a.sum().stream.sink_to_list()
    rolling = sdf.rolling(2, with_state=True).a.sum().stream.sink_to_list()
    for b in batches:
        s.emit(b)
    tm.assert_series_equal(grouped[-1], whole.groupby("k").a.sum())
    assert np.asarray(total[-1]).dtype == whole.a.sum().dtype
    assert pd.concat(cum).tolist() == whole.a.cumsum().tolist()
    assert pd.concat(cum).dtype == whole.a.cumsum().dtype
    assert np.asarray(window[-1]).dtype == whole.a.iloc[-2:].sum().dtype
    assert grouped[-1].dtype == example_dtype and np.asarray(total[-1]).dtype == example_dtype
    # rolling's results are float64 whatever the rows; the rows it holds keep their dtype
    tail, result = rolling[-1]
    assert tail.dtype == "int64" and result.tolist() == [5.0]


def _chain(e: BaseException | None) -> list[BaseException]:
    out = []
    while e is not None:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


# ---------------------------------------------------------------- 6. empty and all-NaN input
def test_6_empty_object_frame_then_mean() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(a=pd.Series([], dtype=float), x=pd.Series([], dtype=float)))
    L = emit_all(
        s,
        sdf[["a", "x"]].mean(),
        [pd.DataFrame({"a": [], "x": []}, dtype=object), frame(a=[1.0, 3.0], x=[2.0, 2.0])],
    )
    assert L[0].isna().all()
    assert L[-1].to_dict() == {"a": 2.0, "x": 2.0}


def test_6_groupby_mean_of_an_all_nan_group_is_nan() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(k=pd.Series([], dtype=object), x=pd.Series([], dtype=float)))
    b = frame(k=["a", "b"], x=[math.nan, 1.0])
    L = emit_all(s, sdf.groupby("k").x.mean(), [b])
    tm.assert_series_equal(L[-1], b.groupby("k").x.mean())


def test_6_sum_with_a_string_column_and_an_empty_batch() -> None:
    s = Stream()
    ex = frame(name=pd.Series([], dtype=object), v=pd.Series([], dtype="int64"))
    sdf = DataFrame(s, example=ex)
    b = frame(name=pd.Series(["ab", "cd"], dtype=object), v=[1, 2])
    L = emit_all(s, sdf.sum(), [b, ex, b])
    tm.assert_series_equal(L[-1], pd.concat([b, b]).sum())


# ---------------------------------------------------------------- 7. smaller ones
def test_7_value_counts_in_pandas_order() -> None:
    s = Stream()
    sx = Series(s, example=pd.Series([], dtype=object, name="x"))
    data = [pd.Series(["c", "a"], name="x"), pd.Series(["b", "b", "a"], name="x")]
    L = emit_all(s, sx.value_counts(), data)
    tm.assert_series_equal(L[-1], pd.concat(data).value_counts())
    assert list(L[-1].index) == ["a", "b", "c"]


def test_7_ewm_mean_skips_nan_as_pandas_does() -> None:
    s, sx = series_stream()
    data = [pd.Series([1.0, math.nan], name="x"), pd.Series([3.0, 4.0], index=[2, 3], name="x")]
    L = emit_all(s, sx.ewm(alpha=0.4).mean(), data)
    want = pd.concat(data).ewm(alpha=0.4).mean()
    assert L[0].iloc[0] == pytest.approx(want.iloc[1])
    assert L[1].iloc[0] == pytest.approx(want.iloc[3])


def test_7_errors_name_the_user_facing_operation() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(x=pd.Series([], dtype=object)))
    sdf.x.window(n=3).var()
    with pytest.raises(TypeError) as info:  # pandas' own exception, with rivermark's context
        s.emit(frame(x=pd.Series([object()], dtype=object)))
    assert info.value.rivermark_context.function == "window(n=3).var(ddof=1)"


def test_7_time_windows_need_a_datetime_index_at_build_time() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(x=[1.0, 2.0]))  # a RangeIndex with rows: not datetime
    with pytest.raises(
        ConfigurationError, match=re.escape("window('2s'): a time window needs a DatetimeIndex")
    ):
        sdf.window("2s")
    with pytest.raises(ConfigurationError, match=re.escape("rolling('2s'): a time window")):
        sdf.x.rolling("2s")


def test_7_an_unknown_rolling_window_is_refused_at_build_time() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(x=pd.Series([], dtype=float)))
    with pytest.raises(
        ConfigurationError, match=re.escape("rolling('abc'): window 'abc' is neither")
    ):
        sdf.x.rolling("abc")


def test_7_a_time_window_refuses_a_batch_without_datetime_index() -> None:
    s = Stream()
    sdf = DataFrame(s, example=frame(x=pd.Series([], dtype=float)))  # empty: says nothing
    sdf.window("2s").x.sum()
    with pytest.raises(SchemaError, match=re.escape("window('2s').sum(): a time window needs")):
        s.emit(frame(x=[1.0]))


def test_min_max_of_strings_agree_with_pandas() -> None:
    s = Stream()
    ex = frame(k=pd.Series([], dtype=object), v=pd.Series([], dtype=object))
    sdf = DataFrame(s, example=ex)
    data = [
        frame(k=["a", "b"], v=pd.Series(["z", "y"], dtype=object)),
        frame(k=["a", "c"], v=pd.Series(["c", "x"], dtype=object)),
    ]
    g = emit_all(s, sdf.groupby("k").v.min(), data)
    s2 = Stream()
    sdf2 = DataFrame(s2, example=ex)
    whole = emit_all(s2, sdf2.max(), data)
    s3 = Stream()
    sdf3 = DataFrame(s3, example=ex)
    col = emit_all(s3, sdf3.v.min(), data)
    both = pd.concat(data)
    tm.assert_series_equal(g[-1], both.groupby("k").v.min())
    tm.assert_series_equal(whole[-1], both.max())
    assert col[-1] == both.v.min() == "c"


@pytest.mark.parametrize(
    "build",
    [
        lambda sdf, **kw: sdf.window(n=4, **kw).x.var(),
        lambda sdf, **kw: sdf.window(n=4, **kw).groupby("k").x.std(),
        lambda sdf, **kw: sdf.window(n=3, **kw).x.min(),
        lambda sdf, **kw: sdf.window(n=5, **kw).k.value_counts(),
    ],
)
def test_start_state_resumes_window_aggregations_exactly(build: Any) -> None:
    ex = frame(k=pd.Series([], dtype=object), x=pd.Series([], dtype=float))
    data = [
        frame(k=["a", "b"], x=[1e9 + 0.1, 2.0]),
        frame(k=["a"], x=[math.nan]),
        frame(k=["b", "a", "a"], x=[1e9 + 0.3, 4.0, 1e9]),
        frame(k=["b"], x=[5.0]),
        frame(k=["a", "b"], x=[6.0, 7.0]),
    ]
    s = Stream()
    full = emit_all(s, build(DataFrame(s, example=ex), with_state=True), data)
    state = full[2][0]
    s2 = Stream()
    resumed = emit_all(s2, build(DataFrame(s2, example=ex), start=state), data[3:])
    for (_, want), got in zip(full[3:], resumed):
        if isinstance(want, pd.Series):
            tm.assert_series_equal(got, want)
        else:
            assert got == want or (math.isnan(got) and math.isnan(want))
