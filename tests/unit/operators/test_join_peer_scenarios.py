"""Scenarios of other stream processors' join tests, with their expected output.

Each scenario gives the input of a peer's test (records, their event times,
the join's settings) and the output that peer's test expects, written for
rivermark's operators: Quix Streams' ``join_asof`` and ``join_interval``
and Bytewax's ``join_window``.  Where rivermark decides differently the
scenario says so and asserts rivermark's answer; docs/joins.md ("Compared
with other stream processors") gives the reasons.

Peers merge the two records into one dict; rivermark emits the pair, and the
scenarios merge it with ``{**left, **right}`` to compare.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from rivermark import Stream

#: the peer's default grace of a week: nothing in these scenarios is late
WEEK = 7 * 86400


def _merge(pair: tuple[Any, Any]) -> Any:
    """An interval join's pair of ``(time, dict)`` records, merged (right None: unmatched)."""
    left, right = pair
    return {**left[1], **(right[1] if right is not None else {})}


def _merge_version(pair: tuple[Any, Any]) -> Any:
    """An as-of join's ``((time, dict), version)``, merged (version None: none)."""
    left, version = pair
    return {**left[1], **(version or {})}


# ---------------------------------------------------------------- as-of join


def _asof(how: str, max_delay: float = 0) -> tuple[Stream, Stream, Any, Any, Any]:
    """Changes and left records of one key ``(time, value)``; the table's clock, table, join."""
    changes, lefts = Stream(), Stream()
    table_clock = changes.timestamps(lambda r: r[0], max_delay=max_delay)
    table = table_clock.to_table(key=lambda r: "key", value=lambda r: r[1])
    joined = lefts.timestamps(lambda r: r[0], max_delay=max_delay).join_asof(
        table, key=lambda r: "key", how=how
    )
    return changes, lefts, table_clock, table, joined


@pytest.mark.parametrize(
    ("how", "right", "expected"),
    [
        # a matching version: joined, inner or left
        ("inner", {"right": 2}, [{"left": 1, "right": 2}]),
        ("left", {"right": 2}, [{"left": 1, "right": 2}]),
        # a tombstone: no version; inner drops the record, left keeps it alone
        ("inner", None, []),
        ("left", None, [{"left": 1}]),
        # an empty record: the peer treats it as no version; rivermark as a version
        # (only None deletes), so the inner join keeps the record
        ("inner", {}, [{"left": 1}]),
        ("left", {}, [{"left": 1}]),
    ],
)
def test_asof_how_with_a_version_a_tombstone_and_an_empty_record(
    how: str, right: Any, expected: list[Any]
) -> None:
    # the right side's record at 1, then the left one at 2 (Quix Streams' test_how)
    changes, lefts, table_clock, _, joined = _asof(how)
    out = joined.sink_to_list()
    changes.emit((1, right))
    lefts.emit((2, {"left": 1}))
    assert out == []  # rivermark waits: a change at 2 could still come
    table_clock.end_of_input()
    assert [_merge_version(p) for p in out] == expected


def test_asof_grace_drops_the_change_older_than_the_grace() -> None:
    # grace 10: after the change at 15, the one at 4 is too old and the one at 5 is
    # kept; a left record at 4 finds nothing, one at 5 the change at 5 (test_grace_ms)
    changes, lefts, table_clock, table, joined = _asof("inner", max_delay=10)
    out, late = joined.sink_to_list(), table.late.sink_to_list()
    for t, v in [(15, {"right": 1}), (4, {"right": 3}), (5, {"right": 2})]:
        changes.emit((t, v))
    assert late == [(4, {"right": 3})]
    lefts.emit((4, {"left": 4}))
    assert out == []  # joined at once (the table's watermark 5 is past 4): no version
    lefts.emit((5, {"left": 4}))
    table_clock.end_of_input()
    assert [_merge_version(p) for p in out] == [{"left": 4, "right": 2}]


def test_asof_a_user_function_builds_the_result() -> None:
    # on_merge=lambda left, right: {"left": left, "right": right} (test_on_merge_callback)
    changes, lefts, table_clock, _, joined = _asof("inner")
    changes.emit((1, 1))
    out = joined.map(lambda p: {"left": p[0][1], "right": p[1]}).sink_to_list()
    lefts.emit((2, 2))
    table_clock.end_of_input()
    assert out == [{"left": 2, "right": 1}]


# ------------------------------------------------------------- interval join

#: (side, time, value, what the peer emits when this record arrives)
Msg = tuple[str, int, Any, list[Any]]


def _interval(
    messages: list[Msg], backward: int, forward: int, how: str = "inner"
) -> tuple[list[list[Any]], list[Any]]:
    """Feed the messages; return what came out after each, and after the end of input."""
    lefts, rights = Stream(), Stream()
    lc = lefts.timestamps(lambda r: r[0], max_delay=WEEK)
    rc = rights.timestamps(lambda r: r[0], max_delay=WEEK)
    out = lc.join_interval(rc, key=lambda r: "key", lower=-backward, upper=forward, how=how)
    got = out.sink_to_list()
    after = []
    for side, t, value, _ in messages:
        n = len(got)
        (lefts if side == "left" else rights).emit((t, value))
        after.append(list(got[n:]))
    n = len(got)
    lc.end_of_input()
    rc.end_of_input()
    return after, list(got[n:])


def _values(pairs: list[Any], merge: Any = None) -> list[Any]:
    return [(merge or _merge)(p) for p in pairs]


INTERVAL_CASES: list[tuple[str, int, int, list[Msg]]] = [
    # the right record at 7 is within 3 before the left one at 10
    (
        "backward in",
        3,
        0,
        [("right", 7, {"right": 1}, []), ("left", 10, {"left": 2}, [{"left": 2, "right": 1}])],
    ),
    # the right record at 6 is not
    ("backward out", 3, 0, [("right", 6, {}, []), ("left", 10, {}, [])]),
    # the right record at 10 is within 3 after the left one at 7
    (
        "forward in",
        0,
        3,
        [("left", 7, {"left": 1}, []), ("right", 10, {"right": 2}, [{"left": 1, "right": 2}])],
    ),
    ("forward out", 0, 3, [("left", 6, {}, []), ("right", 10, {}, [])]),
    # both ways, several right records at one time, then more after the left one
    (
        "both ways, ties",
        3,
        3,
        [
            ("right", 6, {"right": 6}, []),
            ("right", 7, {"right": 7}, []),
            ("right", 8, {"right": 81}, []),
            ("right", 8, {"right": 82}, []),
            ("right", 10, {"right": 10}, []),
            (
                "left",
                10,
                {"left": 10},
                [
                    {"left": 10, "right": 7},
                    {"left": 10, "right": 81},
                    {"left": 10, "right": 82},
                    {"left": 10, "right": 10},
                ],
            ),
            ("right", 11, {"right": 111}, [{"left": 10, "right": 111}]),
            ("right", 11, {"right": 112}, [{"left": 10, "right": 112}]),
        ],
    ),
    # an interval of zero: equal times only
    (
        "exact time",
        0,
        0,
        [
            ("right", 7, {"right": 1}, []),
            ("left", 6, {"left": 2}, []),
            ("left", 8, {"left": 3}, []),
            ("left", 7, {"left": 4}, [{"left": 4, "right": 1}]),
            ("right", 7, {"right": 5}, [{"left": 4, "right": 5}]),
            ("left", 7, {"left": 6}, [{"left": 6, "right": 1}, {"left": 6, "right": 5}]),
        ],
    ),
]


@pytest.mark.parametrize(
    ("backward", "forward", "messages"),
    [c[1:] for c in INTERVAL_CASES],
    ids=[c[0] for c in INTERVAL_CASES],
)
def test_interval_join_pairs_as_the_peer_does(
    backward: int, forward: int, messages: list[Msg]
) -> None:
    after, at_end = _interval(messages, backward, forward)
    assert [_values(a) for a in after] == [m[3] for m in messages]
    assert at_end == []


def test_interval_left_join_emits_an_unmatched_record_once_its_interval_closed() -> None:
    # the peer emits the left record alone at once, then the pair when the right one
    # comes; rivermark emits the pair only: a left record is emitted alone only if no
    # partner can come any more (its interval closed), so each left record once
    messages: list[Msg] = [
        ("left", 7, {"left": 1}, [{"left": 1}]),
        ("right", 10, {"right": 2}, [{"left": 1, "right": 2}]),
        ("left", 20, {"left": 3}, []),
    ]
    after, at_end = _interval(messages, 0, 3, how="left")
    assert [_values(a) for a in after] == [[], [{"left": 1, "right": 2}], []]
    assert _values(at_end) == [{"left": 3}]  # its interval closed at the end of input


def test_interval_join_with_a_user_function() -> None:
    # on_merge=lambda left, right: left + right: 2 + 1
    messages: list[Msg] = [("right", 7, 1, []), ("left", 7, 2, [3])]
    after, _ = _interval(messages, 0, 0)
    assert [_values(a, lambda p: p[0][1] + p[1][1]) for a in after] == [[], [3]]


# --------------------------------------------------------------- window join


def _sessions(lefts: list[tuple[int, int]], rights: list[tuple[int, int]], func: Any) -> list[Any]:
    """Bytewax's test flow: one key, sessions of 10 s, both inputs read to their end."""
    a, b = Stream(), Stream()
    lc = a.timestamps(lambda e: e[0], max_delay=10)
    rc = b.timestamps(lambda e: e[0], max_delay=10)
    out = lc.join_window(rc, key=lambda e: "ALL", gap=10, func=func).sink_to_list()
    for e in lefts:
        a.emit(e)
    for e in rights:
        b.emit(e)
    lc.end_of_input()
    rc.end_of_input()
    return [w.value for w in out]


def _last_of_each(ls: list[Any], rs: list[Any]) -> tuple[Any, Any]:
    return (ls[-1][1], rs[-1][1])


def test_window_join_complete() -> None:
    assert _sessions([(0, 1)], [(1, 2)], _last_of_each) == [(1, 2)]


def test_window_join_final_keeps_the_last_of_each_side() -> None:
    assert _sessions([(0, 1)], [(1, 2), (2, 3)], _last_of_each) == [(1, 3)]


def test_window_join_product() -> None:
    def product(ls: list[Any], rs: list[Any]) -> list[tuple[int, int]]:
        return [(x[1], y[1]) for x, y in itertools.product(ls, rs)]

    out = _sessions([(0, 1), (1, 2)], [(1, 3), (2, 4)], product)
    assert out == [[(1, 3), (1, 4), (2, 3), (2, 4)]]


def test_window_join_running_is_one_result_when_the_window_closes() -> None:
    # the peer's "running" mode emits after every record, (1, None), (1, 2), (1, 3);
    # rivermark emits a window once, when it closed: the lists as they are then
    out = _sessions(
        [(0, 1)], [(1, 2), (2, 3)], lambda ls, rs: ([x[1] for x in ls], [y[1] for y in rs])
    )
    assert out == [([1], [2, 3])]
