"""The open-window store that record and DataFrame windows share, and the fixed windows' rule."""

from __future__ import annotations

import math
import random
import re
from fractions import Fraction

import pandas as pd
import pytest

from rivermark import ConfigurationError, Stream
from rivermark.dataframe import DataFrame
from rivermark.operators.eventtime import WindowResult
from rivermark.operators.windowstore import BulkWindows, OpenWindows, SlotSpans, slot


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
    # the frames' store is the record windows' one (fixed windows: a bucket of keys per
    # window span), opening and closing a batch's in bulk
    assert type(a) is BulkWindows and type(b) is BulkWindows and isinstance(b, OpenWindows)
    assert len(a) > 3
    # the same windows with the same ends and counts (a count, a tuple of one per column);
    # a batch opens its windows in the order of (key, window), records as they come
    assert {w: (v[0], (v[2],)) for w, v in a.open.items()} == {
        w: (v[0], v[2]) for w, v in b.open.items()
    }
    # every open window is in its span's bucket, in the order the windows opened
    by_span: dict[tuple[float, float], list[tuple[int, object]]] = {}
    for (k, start), v in a.open.items():
        by_span.setdefault((v[0], start), []).append((v[1], k))
    assert a.buckets == {span: [k for _, k in sorted(ks)] for span, ks in by_span.items()}
    assert sorted(a.spans) == sorted(by_span)


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


def _exact_slot(t: float, width: float, offset: float, shift: float = 0.0) -> int:
    return math.floor((Fraction(t) - Fraction(offset) - Fraction(shift)) / Fraction(width))


@pytest.mark.parametrize(
    ("width", "offset", "shift"),
    [(10.0, 0.0, 0.0), (0.1, 0.0, 0.0), (0.3, 0.05, 0.0), (5.0, 0.0, 10.0), (1e-7, 3.3, 0.0),
     (7.5, -2.25, 0.1), (0.1, 0.0, 0.3)],
)  # fmt: skip
def test_a_slot_span_holds_exactly_the_times_of_its_two_slots(
    width: float, offset: float, shift: float
) -> None:
    rnd = random.Random(5)
    spans = SlotSpans(width, offset, shift)
    for _ in range(2000):
        base = rnd.choice(
            [rnd.uniform(-1e3, 1e3), rnd.uniform(1.6e9, 1.8e9), float(rnd.randint(0, 999))]
        )
        edge = offset + shift + rnd.randint(-1000, 1000) * width  # on (or next to) an edge
        for ts in (base, edge, math.nextafter(edge, -math.inf), math.nextafter(edge, math.inf)):
            lo, mid, hi, j = spans.span(ts)
            assert lo <= ts < hi
            for t in (ts, lo, mid, hi, *(math.nextafter(b, -math.inf) for b in (lo, mid, hi))):
                exact = _exact_slot(t, width, offset, shift)
                assert slot(t, width, offset, shift) == exact
                if lo <= t < mid:
                    assert exact == j
                elif mid <= t < hi:
                    assert exact == j + 1
                else:
                    assert exact not in (j, j + 1)


def _exact_windows(times: list[float], size: float, step: float) -> dict[float, int]:
    """The count of each window, by exact arithmetic (every window that holds each time)."""
    counts: dict[float, int] = {}
    for t in times:
        last = _exact_slot(t, step, 0.0)
        first = _exact_slot(t, step, 0.0, size) + 1
        for j in range(first, last + 1):
            counts[j * step] = counts.get(j * step, 0) + 1
    return counts


@pytest.mark.parametrize(("size", "step"), [(0.1, 0.1), (0.3, 0.1), (10.0, 5.0), (0.7, 0.7)])
def test_records_on_and_next_to_window_edges_fall_in_their_exact_windows(
    size: float, step: float
) -> None:
    # times on the edges (as floats compute them) and their neighbours, in disorder,
    # with records far behind the latest windows and jumps ahead of them
    rnd = random.Random(11)
    times = []
    for j in range(300):
        edge = j * step
        times += [edge, math.nextafter(edge, -math.inf), math.nextafter(edge, math.inf)]
        times.append(rnd.uniform(0, 300 * step))
    rnd.shuffle(times)
    s = Stream()
    timed = s.timestamps(lambda t: t, max_delay=1e6)
    window = (
        timed.tumbling_window(size, agg="count")
        if size == step
        else timed.hopping_window(size, step, agg="count")
    )
    out = window.sink_to_list()
    for t in times:
        s.emit(t)
    timed.end_of_input()
    assert window.late_count == 0
    assert {w.start: w.value for w in out} == _exact_windows(times, size, step)
    assert len(out) == len({w.start for w in out})


def test_the_configuration_that_places_windows_is_fixed_when_the_node_is_created() -> None:
    s = Stream()
    w = s.timestamps(lambda t: t).hopping_window(10, 5, agg="count", grace=1)
    for name, value in [("size", 20.0), ("step", 2.0), ("offset", 1.0), ("grace", 0.0),
                        ("emit_mode", "updates")]:  # fmt: skip
        with pytest.raises(ConfigurationError, match=re.escape(f"HoppingWindow.{name} is fixed")):
            setattr(w, name, value)
    assert (w.size, w.step, w.offset, w.grace, w.emit_mode) == (10.0, 5.0, 0.0, 1.0, "final")


class _Clock:
    due = math.inf


def test_spans_closing_together_come_out_by_end_start_key_or_all_in_opening_order() -> None:
    # two spans of a hopping window close at one watermark: by (end, start, key)
    w = BulkWindows(_Clock(), grace=0.0)
    w.open_fixed(
        [("b", 5.0), ("a", 5.0), ("c", 0.0), ("a", 0.0)], [15.0, 15.0, 10.0, 10.0], [1, 2, 3, 4]
    )
    w.open_fixed([("0", 0.0), ("z", 10.0)], [10.0, 20.0], [5, 6])
    closed = w.pop_due(15.0)
    assert [(c[1], c[3], c[4]) for c in closed] == [
        (0.0, "0", 5),
        (0.0, "a", 4),
        (0.0, "c", 3),
        (5.0, "a", 2),
        (5.0, "b", 1),
    ]
    assert [c[2] for c in closed] == [4, 3, 2, 1, 0]  # each window's opening number
    assert list(w.open) == [("z", 10.0)] and w.next_due() == 20.0
    # keys that do not compare in one span: every span's windows in the order they opened
    w = BulkWindows(_Clock(), grace=0.0)
    w.open_fixed(
        [("b", 5.0), ("a", 5.0), ("c", 0.0), (1, 0.0)], [15.0, 15.0, 10.0, 10.0], [1, 2, 3, 4]
    )
    closed = w.pop_due(15.0)
    assert [(c[0], c[1], c[2], c[3]) for c in closed] == [
        (10.0, 0.0, 2, "c"),
        (10.0, 0.0, 3, 1),
        (15.0, 5.0, 0, "b"),
        (15.0, 5.0, 1, "a"),
    ]
    assert not w.open and w.next_due() == math.inf
