"""Streamed results agree with pandas on the rows seen so far (or the window's rows).

A differential property test: random batches (empty ones, NaN, duplicate
index values, categorical or object keys, int32 batches in an int64 column)
go through every supported operation; each result is compared with pandas
(see ``oracle.py`` for the documented deviations it encodes).  The budgets
add up to 1,100 cases (``RIVERMARK_DIFFERENTIAL_SCALE`` scales them: the
pandas-2.2 leg of the test command runs a third).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivermark.testing import examples

from .oracle import Op, batch_lists, check, groupby_ops, running_ops, whole_ops, window_ops

#: the pandas-2.2 leg of the test command runs a share of the cases (the main run all)
SCALE = float(os.environ.get("RIVERMARK_DIFFERENTIAL_SCALE", "1"))


def budget(n: int) -> int:
    return max(10, int(examples(n) * SCALE))


SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

WHOLE = whole_ops()
GROUPBY = groupby_ops()
WINDOW_N = window_ops([1, 3, 7])
WINDOW_TIME = window_ops(["2s"])
RUNNING = running_ops(time=False)
RUNNING_TIME = [op for op in running_ops(time=True) if "'2s'" in op.name]


@settings(max_examples=budget(250), **SETTINGS)
@given(op=st.sampled_from(WHOLE), batches=batch_lists())
def test_reductions_agree_with_pandas(op: Op, batches: list) -> None:
    check(op, batches, time=False)


@settings(max_examples=budget(250), **SETTINGS)
@given(op=st.sampled_from(GROUPBY), batches=batch_lists())
def test_groupby_agrees_with_pandas(op: Op, batches: list) -> None:
    check(op, batches, time=False)


@settings(max_examples=budget(250), **SETTINGS)
@given(op=st.sampled_from(WINDOW_N), batches=batch_lists())
def test_count_windows_agree_with_pandas(op: Op, batches: list) -> None:
    check(op, batches, time=False)


@settings(max_examples=budget(150), **SETTINGS)
@given(op=st.sampled_from(WINDOW_TIME), batches=batch_lists(time=True))
def test_time_windows_agree_with_pandas(op: Op, batches: list) -> None:
    check(op, batches, time=True)


@settings(max_examples=budget(150), **SETTINGS)
@given(op=st.sampled_from(RUNNING), batches=batch_lists())
def test_cumulative_rolling_ewm_agree_with_pandas(op: Op, batches: list) -> None:
    check(op, batches, time=False)


@settings(max_examples=budget(50), **SETTINGS)
@given(op=st.sampled_from(RUNNING_TIME), batches=batch_lists(time=True))
def test_time_rolling_agrees_with_pandas(op: Op, batches: list) -> None:
    check(op, batches, time=True)


@pytest.mark.parametrize("ops", [WHOLE, GROUPBY, WINDOW_N, WINDOW_TIME, RUNNING])
def test_every_operation_is_drawn(ops: list[Op]) -> None:
    # the strategies sample from these lists: none may be empty or hold duplicates
    assert ops and len({op.name for op in ops}) == len(ops)
