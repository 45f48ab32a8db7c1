"""The open-window store that record and DataFrame windows share, and the fixed windows' rule."""

from __future__ import annotations

import random

import pandas as pd

from rivermark import Stream
from rivermark.dataframe import DataFrame
from rivermark.operators.eventtime import WindowResult
from rivermark.operators.windowstore import OpenWindows


def test_record_and_frame_windows_keep_the_same_open_windows_in_one_store() -> None:
    rnd = random.Random(3)
    rows = [(i * 0.5 + rnd.uniform(0, 3), rnd.choice("abc")) for i in range(200)]
    s = Stream()
    records = s.timestamps(lambda r: r[0], max_delay=3).hopping_window(
        10, 4, key=lambda r: r[1], agg="count"
    )
    src = Stream()
    example = pd.DataFrame({"ts": pd.Series([], dtype=float), "k": pd.Series([], dtype=object)})
    timed = DataFrame(src, example=example).timestamps("ts", max_delay=3)
    frames = timed.hopping_window(10, 4).groupby("k").ts.count()
    for r in rows:
        s.emit(r)
    src.emit(pd.DataFrame({"ts": [r[0] for r in rows], "k": [r[1] for r in rows]}))
    a, b = records.store, frames.window_node.store
    assert type(a) is OpenWindows and type(b) is OpenWindows
    assert len(a) > 3
    # the same windows with the same ends and counts (a count, a tuple of one per column);
    # a batch opens its windows in the order of (key, window), records as they come
    assert {w: (v[0], (v[2],)) for w, v in a.open.items()} == {
        w: (v[0], v[2]) for w, v in b.open.items()
    }
    assert sorted(a.heap) == sorted((v[0], s, v[1], k) for (k, s), v in a.open.items())


def test_a_hopping_record_in_one_window_counts_in_that_one() -> None:
    # size 10 every 7: [0, 10), [7, 17), [14, 24): 5 is in one window, 8 in two, 15 in two
    s = Stream()
    w = s.timestamps(lambda r: r, max_delay=100).hopping_window(10, 7, agg="collect")
    out = w.sink_to_list()
    for t in (5, 8, 15):
        s.emit(t)
    w.upstream.end_of_input()
    assert out == [
        WindowResult(0.0, 10.0, None, (5, 8)),
        WindowResult(7.0, 17.0, None, (8, 15)),
        WindowResult(14.0, 24.0, None, (15,)),
    ]


def test_a_record_whose_aggregation_raises_changes_none_of_its_windows() -> None:
    s = Stream()
    w = s.timestamps(lambda r: r[0], max_delay=100).hopping_window(
        10, 5, reduce=lambda a, x: a + x, value=lambda r: r[1], on_error="skip"
    )
    out = w.sink_to_list()
    s.emit((11, 1))  # windows [5, 15) and [10, 20)
    # windows [0, 10) (new: its first value) and [5, 15) (1 + "x" raises)
    s.emit((6, "x"))
    assert sorted(w.store.open) == [(None, 5.0), (None, 10.0)]
    assert w.error_count == 1
    w.upstream.end_of_input()
    assert out == [WindowResult(5.0, 15.0, None, 1), WindowResult(10.0, 20.0, None, 1)]
