"""Periodic DataFrames and the documented way of storing their history."""

from __future__ import annotations

import re

import pandas as pd
import pandas.testing as tm
import pytest

from rivermark.dataframe import DataFrame, PeriodicDataFrame, Random
from rivermark.dataframe.periodic import random_datablock
from rivermark.errors import ConfigurationError
from rivermark.testing import wait_for


def counter_block():
    count = iter(range(10**6))

    def block(last: pd.Timestamp, now: pd.Timestamp) -> pd.DataFrame:
        i = next(count)
        return pd.DataFrame({"i": [2 * i, 2 * i + 1]}, index=pd.DatetimeIndex([now, now]))

    return block


def test_from_periodic_and_history_of_last_n_rows() -> None:
    sdf = DataFrame.from_periodic(datafn=counter_block(), interval="2ms")
    assert isinstance(sdf, PeriodicDataFrame)
    raw = sdf.stream.sink_to_list()
    history = sdf.window(n=5).full().stream.sink_to_list()
    sdf.start()
    try:
        wait_for(lambda: len(history) >= 6)
    finally:
        sdf.stop()
    k = len(history)
    everything = pd.concat(raw[:k])
    tm.assert_frame_equal(history[k - 1], everything.tail(5))
    assert all(len(h) <= 5 for h in history)


def test_history_of_last_t_of_time() -> None:
    sdf = DataFrame.from_periodic(datafn=counter_block(), interval="2ms")
    raw = sdf.stream.sink_to_list()
    history = sdf.window(value="30ms").full().stream.sink_to_list()
    sdf.start()
    try:
        wait_for(lambda: len(history) >= 4)
    finally:
        sdf.stop()
    k = len(history)
    everything = pd.concat(raw[:k])
    newest = everything.index.max()
    tm.assert_frame_equal(
        history[k - 1], everything[everything.index > newest - pd.Timedelta("30ms")]
    )


def test_random_dataframe() -> None:
    sdf = DataFrame.random(freq="1ms", interval="5ms")
    assert isinstance(sdf, Random)
    assert list(sdf.columns) == ["x", "y", "z"]
    L = sdf.x.sum().stream.sink_to_list()
    sdf.start()
    try:
        wait_for(lambda: len(L) >= 2)
    finally:
        sdf.stop()
    assert isinstance(L[-1], float)


def test_random_datablock_spans_the_interval() -> None:
    df = random_datablock(
        pd.Timestamp("2024-01-01"), pd.Timestamp("2024-01-01 00:00:00.5"), "100ms"
    )
    assert len(df) == 5
    assert df.index[0] == pd.Timestamp("2024-01-01 00:00:00.1")
    # streamz's columns: x uniform, y an integer (Poisson), z normal
    assert df.x.between(0, 1).all() and (df.y >= 0).all()
    assert [str(t) for t in df.dtypes] == ["float64", "int64", "float64"]


def test_bad_interval() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("got 'often'")):
        PeriodicDataFrame(counter_block(), interval="often")
    # one interval parser for every timed node: the same words as delay() or Job(every=)
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            "PeriodicDataFrame: interval must be a positive number of seconds or a duration "
            "string, got '0ms'; pass e.g. interval=0.5 or interval='500ms'"
        ),
    ):
        PeriodicDataFrame(counter_block(), interval="0ms")


def test_interval_as_a_timedelta_or_seconds() -> None:
    for interval in (pd.Timedelta("2ms"), 0.002, "2ms"):
        sdf = PeriodicDataFrame(counter_block(), interval=interval, start=False)
        assert sdf.source.poll_interval == pytest.approx(0.002)


def test_an_unreferenced_periodic_dataframe_is_collected_and_its_stream_goes_on() -> None:
    # as streamz, the timer does not keep the DataFrame object alive; unlike
    # streamz, the source it started goes on until stopped (nothing stops silently)
    import gc
    import weakref

    sdf = Random(freq="1ms", interval="5ms")
    ref = weakref.ref(sdf)
    stream = sdf.x.stream
    out = stream.sink_to_list()
    del sdf
    gc.collect()
    assert ref() is None
    n = len(out)
    try:
        wait_for(lambda: len(out) > n + 2, timeout=30)
    finally:
        stream.stop()  # stops the periodic source upstream
    assert all(isinstance(v, pd.Series) and v.name == "x" for v in out)
