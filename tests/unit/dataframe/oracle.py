"""pandas as the oracle of streaming DataFrames: random batches and what pandas says.

Every operation is a pair: how to build it on a streaming DataFrame, and
what pandas computes on the rows seen so far (or on the window's rows).  The
documented deviations of docs/operators.md are encoded here, so a change in
behaviour shows up as a mismatch:

- ``groupby`` groups categorical keys with ``observed=True`` (pandas 2.2's
  default is ``observed=False``);
- ``ewm(...).mean()`` emits one row per batch: pandas' value at the batch's
  newest row;
- a time window holds the rows within ``value`` of the newest index of the
  latest non-empty batch;
- a batch whose dtype cannot be converted exactly to the first batch's is
  refused (``SchemaError``) and changes nothing;
- ``value_counts`` ties are in order of first appearance (pandas 3); on
  pandas 2.2, whose order of ties is arbitrary, only the counts and their
  descending order are compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as tm
import pytest
from hypothesis import strategies as st

KEYS = ["p", "q", "r", "s"]
#: pandas 3 orders equal counts by first appearance; pandas 2.2's order is arbitrary
STABLE_VALUE_COUNTS = int(pd.__version__.split(".")[0]) >= 3
CATEGORIES = pd.CategoricalDtype(KEYS)
T0 = pd.Timestamp("2024-01-01")


@dataclass(frozen=True)
class Op:
    """An operation: ``build(sdf)`` streams it, ``expect(rows)`` is pandas' answer."""

    name: str
    build: Callable[[Any], Any]
    expect: Callable[[pd.DataFrame], Any]
    #: "updating": one result per batch, compared with ``expect(rows so far)``;
    #: "streaming": results follow the rows, compared once concatenated
    kind: str = "updating"
    #: rows for ``expect``: all so far, the last n, or within a time span
    window: int | str | None = None
    #: absolute tolerance per unit of the data's magnitude (beyond 1e-6)
    tol_scale: float = 0.0

    @property
    def uses_a(self) -> bool:
        """Whether the node receives column ``a`` (so it refuses a change of its dtype).

        A groupby (also ``groupby("k").x``) and ``size`` receive the whole frame.
        """
        return "[a,x]" in self.name or "groupby" in self.name or self.name == "size"


def _cols(df: pd.DataFrame) -> pd.DataFrame:
    return df[["a", "x"]]


def _gb(df: pd.DataFrame) -> Any:
    return df.groupby("k", observed=True)


REDUCTIONS = ["sum", "count", "mean", "var", "std", "min", "max"]
GROUPBY_HOWS = ["sum", "count", "mean", "var", "std", "min", "max", "size"]


def whole_ops() -> list[Op]:
    ops = []
    for how in REDUCTIONS:
        ops.append(
            Op(f"x.{how}", lambda s, h=how: getattr(s.x, h)(), lambda d, h=how: getattr(d.x, h)())
        )
        ops.append(
            Op(
                f"[a,x].{how}",
                lambda s, h=how: getattr(s[["a", "x"]], h)(),
                lambda d, h=how: getattr(_cols(d), h)(),
            )
        )
    ops.append(Op("size", lambda s: s.size, lambda d: d.size))
    ops.append(Op("k.value_counts", lambda s: s.k.value_counts(), lambda d: d.k.value_counts()))
    ops.append(Op("expanding.x.mean", lambda s: s.expanding().x.mean(), lambda d: d.x.mean()))
    return ops


def groupby_ops() -> list[Op]:
    ops = []
    for how in GROUPBY_HOWS:
        ops.append(
            Op(
                f"groupby.x.{how}",
                lambda s, h=how: getattr(s.groupby("k").x, h)(),
                lambda d, h=how: getattr(_gb(d).x, h)(),
            )
        )
    for how in ("sum", "mean", "min", "max", "var"):
        ops.append(
            Op(
                f"groupby.{how}",
                lambda s, h=how: getattr(s.groupby("k"), h)(),
                lambda d, h=how: getattr(_gb(d), h)(),
            )
        )
    return ops


def window_ops(spans: list[Any]) -> list[Op]:
    ops = []
    for span in spans:
        label = f"window({span!r})"
        for how in REDUCTIONS:
            ops.append(
                Op(
                    f"{label}.x.{how}",
                    lambda s, h=how, w=span: getattr(s.window(w).x, h)(),
                    lambda d, h=how: getattr(d.x, h)(),
                    window=span,
                )
            )
        ops.append(
            Op(
                f"{label}.[a,x].var",
                lambda s, w=span: s.window(w)[["a", "x"]].var(),
                lambda d: _cols(d).var(),
                window=span,
            )
        )
        ops.append(
            Op(
                f"{label}.k.value_counts",
                lambda s, w=span: s.window(w).k.value_counts(),
                lambda d: d.k.value_counts(),
                window=span,
            )
        )
        for how in GROUPBY_HOWS:
            ops.append(
                Op(
                    f"{label}.groupby.x.{how}",
                    lambda s, h=how, w=span: getattr(s.window(w).groupby("k").x, h)(),
                    lambda d, h=how: getattr(_gb(d).x, h)(),
                    window=span,
                )
            )
        ops.append(
            Op(
                f"{label}.groupby.sum",
                lambda s, w=span: s.window(w).groupby("k").sum(),
                lambda d: _gb(d).sum(),
                window=span,
            )
        )
    return ops


def running_ops(time: bool) -> list[Op]:
    ops = []
    for how in ("cumsum", "cumprod", "cummin", "cummax"):
        ops.append(
            Op(
                f"x.{how}",
                lambda s, h=how: getattr(s.x, h)(),
                lambda d, h=how: getattr(d.x, h)(),
                kind="streaming",
            )
        )
    ops.append(
        Op(
            "[a,x].cumsum",
            lambda s: s[["a", "x"]].cumsum(),
            lambda d: _cols(d).cumsum(),
            kind="streaming",
        )
    )
    spans: list[Any] = [1, 3] + (["2s"] if time else [])
    for span in spans:
        for how in ("sum", "mean", "min", "max", "var", "count"):
            ops.append(
                Op(
                    f"rolling({span!r}).{how}",
                    lambda s, h=how, w=span: getattr(s.x.rolling(w), h)(),
                    lambda d, h=how, w=span: getattr(d.x.rolling(w), h)(),
                    kind="streaming",
                    # pandas' rolling sums are online: their rounding depends on the
                    # first row they see, and the stream restarts them at the kept tail
                    tol_scale={"var": 1e-13, "sum": 1e-14, "mean": 1e-14}.get(how, 0.0),
                )
            )
    ops.append(
        Op(
            "rolling(3, min_periods=1).mean",
            lambda s: s.x.rolling(3, min_periods=1).mean(),
            lambda d: d.x.rolling(3, min_periods=1).mean(),
            kind="streaming",
            tol_scale=1e-14,
        )
    )
    ops.append(
        Op(
            "ewm.mean",
            lambda s: s.x.ewm(alpha=0.3).mean(),
            lambda d: d.x.ewm(alpha=0.3).mean(),
            kind="ewm",
        )
    )
    return ops


# ---------------------------------------------------------------- data
FLOATS = st.one_of(
    st.floats(-1e3, 1e3, allow_nan=False).map(lambda v: round(v, 3)),
    st.sampled_from([0.0, 1.0, -2.5, 0.25]),
    st.just(math.nan),
)


@st.composite
def batch_lists(
    draw: Any, time: bool = False, categorical: bool | None = None
) -> list[pd.DataFrame]:
    """1-6 batches of 0-6 rows: NaN, duplicate index values, empty batches, int32 batches."""
    cat = draw(st.booleans()) if categorical is None else categorical
    any_rows = False
    # values near 1e9 with a small spread: where a sum of squares loses the variance
    offset = draw(st.sampled_from([0.0, 0.0, 1e9]))
    n_batches = draw(st.integers(1, 6))
    out = []
    clock = 0
    for _ in range(n_batches):
        k = draw(st.integers(0, 6))
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=k, max_size=k))
        a = draw(st.lists(st.integers(-(2**40), 2**40), min_size=k, max_size=k))
        x = draw(st.lists(FLOATS, min_size=k, max_size=k))
        if time:
            steps = draw(st.lists(st.integers(0, 1500), min_size=k, max_size=k))
            ms = list(np.cumsum(steps) + clock)
            clock = int(ms[-1]) if k else clock
            index: pd.Index = pd.DatetimeIndex([T0 + pd.Timedelta(milliseconds=int(m)) for m in ms])
        else:
            index = pd.Index(
                draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)), dtype="int64"
            )
        a_dtype = "int32" if draw(st.integers(0, 5)) == 0 else "int64"
        # a float batch in the int column (refused) once the column's dtype is fixed
        if any_rows and k and draw(st.integers(0, 7)) == 0:
            a_dtype = "float64"
        any_rows = any_rows or k > 0
        df = pd.DataFrame(
            {
                "k": pd.Series(keys, dtype=CATEGORIES if cat else object, index=index),
                "a": pd.Series(a, dtype="int64", index=index).astype(a_dtype) + 0.5
                if a_dtype == "float64"
                else pd.Series(a, dtype="int64", index=index).astype(a_dtype)
                if a_dtype == "int64" or all(abs(v) < 2**31 for v in a)
                else pd.Series(a, dtype="int64", index=index),
                "x": pd.Series(x, dtype="float64", index=index) + offset,
            }
        )
        out.append(df)
    return out


def example_for(batches: list[pd.DataFrame], time: bool) -> pd.DataFrame:
    ex = batches[0].iloc[:0].astype({"a": "int64"})
    if time:
        ex.index = pd.DatetimeIndex([])
    return ex


# ---------------------------------------------------------------- comparison
def assert_same(got: Any, want: Any, what: str, atol: float = 1e-6) -> None:
    """Equal up to float tolerance (relative 1e-6, absolute ``atol``)."""
    if isinstance(want, pd.DataFrame):
        tm.assert_frame_equal(
            got, want, check_dtype=False, check_index_type=False, check_column_type=False,
            check_categorical=False, rtol=1e-6, atol=atol, obj=what,
        )  # fmt: skip
    elif isinstance(want, pd.Series):
        tm.assert_series_equal(
            got, want, check_dtype=False, check_index_type=False, check_categorical=False,
            rtol=1e-6, atol=atol, obj=what,
        )  # fmt: skip
    else:
        if want is None or (isinstance(want, float) and math.isnan(want)):
            assert got is None or (isinstance(got, (float, np.floating)) and math.isnan(got)), (
                what,
                got,
                want,
            )
        else:
            assert got == want or math.isclose(
                float(got), float(want), rel_tol=1e-6, abs_tol=1e-6
            ), (
                what,
                got,
                want,
            )


def window_rows(seen: pd.DataFrame, span: Any, newest: Any) -> pd.DataFrame:
    if span is None:
        return seen
    if isinstance(span, int):
        return seen.iloc[len(seen) - span :] if len(seen) > span else seen
    if newest is None:
        return seen.iloc[:0]
    return seen[seen.index > newest - pd.Timedelta(span)]


def check(op: Op, batches: list[pd.DataFrame], time: bool) -> None:
    """Stream ``batches`` through ``op`` and compare every result with pandas."""
    from rivermark import Stream
    from rivermark.dataframe import DataFrame, SchemaError

    source = Stream()
    sdf = DataFrame(source, example=example_for(batches, time))
    results = op.build(sdf).stream.sink_to_list()
    seen = batches[0].iloc[:0].astype({"a": "int64"})
    newest = None
    emitted = 0
    for b in batches:
        refused = b.a.dtype.kind == "f"
        if refused and op.uses_a:
            with pytest.raises(SchemaError, match="column 'a' changed dtype from 'int64'"):
                source.emit(b)
            assert len(results) == emitted, (op.name, "a refused batch emitted a result")
            continue
        source.emit(b)
        i = emitted
        emitted += 1
        if len(b):
            seen = pd.concat([seen, b if refused else b.astype({"a": "int64"})])
            if time:
                newest = b.index.max()
        if op.kind == "updating":
            rows = window_rows(seen, op.window, newest)
            want = op.expect(rows)
            got = results[i]
            if op.name.endswith("value_counts") and not STABLE_VALUE_COUNTS:
                # pandas < 3 orders equal counts arbitrarily: compare the counts, and
                # that they are most frequent first
                assert got.is_monotonic_decreasing, (op.name, got)
                got, want = got.sort_index(), want.sort_index()
            assert_same(got, want, f"{op.name} after batch {i}")
        elif op.kind == "ewm":
            got = results[i]
            if not len(b):
                assert len(got) == 0, (op.name, got)
                continue
            want_all = op.expect(seen)
            assert_same(float(got.iloc[0]), float(want_all.iloc[-1]), f"{op.name} after batch {i}")
    if op.kind == "streaming":
        got = pd.concat(results) if results else None
        want = op.expect(seen)
        assert got is not None
        scale = float(seen.x.abs().max()) if seen.x.notna().any() else 0.0
        assert_same(got, want, op.name, atol=1e-6 + op.tol_scale * scale)
