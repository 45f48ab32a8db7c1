"""Tests of accumulate/scan, frequencies, slice, unique and collect."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.operators.stateful import Accumulate, Collect, Pairwise, Slice, Unique, no_default

from .conftest import emit_tracked as send
from .conftest import roundtrip


# ---------------------------------------------------------------------- accumulate
def test_accumulate_running_total_first_record_is_start() -> None:
    s = Stream()
    node = s.accumulate(lambda a, x: a + x)
    assert isinstance(node, Accumulate)
    L = node.sink_to_list()
    for i in range(5):
        s.emit(i)
    assert L == [0, 1, 3, 6, 10]


def test_accumulate_start_kwargs_returns_state_with_state() -> None:
    s = Stream()
    L1 = s.accumulate(lambda a, x, k: a + k * x, start=100, k=2).sink_to_list()
    L2 = s.scan(lambda n, x: (n + 1, (n, x)), start=0, returns_state=True).sink_to_list()
    L3 = s.accumulate(lambda a, x: a + x, with_state=True).sink_to_list()
    for v in [1, 2, 3]:
        s.emit(v)
    assert L1 == [102, 106, 112]
    assert L2 == [(0, 1), (1, 2), (2, 3)]
    assert L3 == [(1, 1), (3, 3), (6, 6)]


def test_accumulate_rejects_non_callable() -> None:
    with pytest.raises(ConfigurationError, match=r"accumulate: func .*'nope'"):
        Stream().accumulate("nope")


def test_accumulate_error_policies_keep_state() -> None:
    def add(a: int, x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return a + x

    s = Stream()
    s.accumulate(add, start=0, name="acc").sink_to_list()
    with pytest.raises(
        ValueError, match=r"(?s)negative.*Accumulate\('acc'\): user function '[^']*add'"
    ):
        s.emit(-1)

    s2 = Stream()
    node = s2.accumulate(add, start=0, on_error="skip")
    L = node.sink_to_list()
    s2.emit(1)
    ref = send(s2, -5)
    s2.emit(2)
    assert L == [1, 3] and node.error_count == 1 and ref.fired == 1

    got: list[Any] = []
    s3 = Stream()
    s3.accumulate(add, start=0, on_error=lambda r, e: got.append((r, str(e)))).sink_to_list()
    s3.emit(-2)
    assert got == [(-2, "negative")]


def test_accumulate_state_round_trip() -> None:
    def build() -> tuple[Stream, Accumulate, list[Any]]:
        s = Stream()
        node = s.accumulate(lambda a, x: a + [x], start=[])
        return s, node, node.sink_to_list()

    s, node, full = build()
    for i in range(6):
        s.emit(i)
    s1, n1, L1 = build()
    for i in range(3):
        s1.emit(i)
    state = roundtrip(n1.get_state())
    s2, n2, L2 = build()
    n2.set_state(state)
    for i in range(3, 6):
        s2.emit(i)
    assert full == L1 + L2


def test_accumulate_no_default_survives_pickle() -> None:
    s = Stream()
    node = s.accumulate(lambda a, x: a + x)
    state = roundtrip(node.get_state())
    assert state["state"] is no_default
    node2 = Stream().accumulate(lambda a, x: a + x)
    node2.set_state(state)
    L = node2.sink_to_list()
    node2.update(5, None)
    assert L == [5]
    assert "returns_state=False" in node.state_signature()


def test_accumulate_completion_is_synchronous() -> None:
    s = Stream()
    s.accumulate(lambda a, x: a + x).sink_to_list()
    refs = [send(s, i) for i in range(3)]
    assert [r.fired for r in refs] == [1, 1, 1]
    assert all(r.late == 0 for r in refs)


# ---------------------------------------------------------------------- frequencies
def test_frequencies_emits_fresh_dicts() -> None:
    s = Stream()
    L = s.frequencies().sink_to_list()
    for v in "aba":
        s.emit(v)
    assert L == [{"a": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 1}]
    L[0]["a"] = 99  # downstream mutation does not touch the node's counts
    s.emit("a")
    assert L[-1] == {"a": 3, "b": 1}


def test_frequencies_state_and_unhashable() -> None:
    s = Stream()
    node = s.frequencies(on_error="skip")
    s.emit("x")
    s.emit(["unhashable"])
    assert node.error_count == 1
    state = roundtrip(node.get_state())
    n2 = Stream().frequencies()
    n2.set_state(state)
    L = n2.sink_to_list()
    n2.update("x", None)
    assert L == [{"x": 2}]


# ---------------------------------------------------------------------- slice
@pytest.mark.parametrize(
    ("start", "end", "step"),
    [(None, None, None), (2, 6, 2), (1, 7, 2), (3, None, None), (None, 4, None), (0, 10, 3)],
)
def test_slice_like_list_slicing(start: Any, end: Any, step: Any) -> None:
    s = Stream()
    node = s.slice(start, end, step)
    assert isinstance(node, Slice)
    L = node.sink_to_list()
    for i in range(12):
        s.emit(i)
    assert list(range(12))[start:end:step] == L


def test_slice_bad_arguments() -> None:
    with pytest.raises(ConfigurationError, match="slice: start .*-1"):
        Stream().slice(-1)
    with pytest.raises(ConfigurationError, match="slice: step .*0"):
        Stream().slice(0, 5, 0)
    with pytest.raises(ConfigurationError, match="slice: end"):
        Stream().slice(0, "5")  # type: ignore[arg-type]


def test_slice_does_not_shadow_stream_start() -> None:
    s = Stream()
    node = s.slice(1, 3)
    node.start()  # the Stream method, not an int
    assert node.begin == 1


def test_slice_state_and_completion() -> None:
    s = Stream()
    node = s.slice(1, 5, 2)
    L = node.sink_to_list()
    refs = [send(s, i) for i in range(3)]
    assert [r.fired for r in refs] == [1, 1, 1]
    n2 = Stream().slice(1, 5, 2)
    n2.set_state(roundtrip(node.get_state()))
    L2 = n2.sink_to_list()
    for i in range(3, 8):
        n2.update(i, None)
    assert L + L2 == [1, 3]
    assert node.state_signature() == "Slice(start=1, end=5, step=2)"


# ---------------------------------------------------------------------- unique
def test_unique_default_and_key() -> None:
    s = Stream()
    node = s.unique()
    assert isinstance(node, Unique)
    L = node.sink_to_list()
    L2 = s.unique(key=lambda d: d % 3).sink_to_list()
    for v in [1, 2, 1, 3, 4, 2]:
        s.emit(v)
    assert L == [1, 2, 3, 4]
    assert L2 == [1, 2, 3]


def test_unique_maxsize_is_lru() -> None:
    s = Stream()
    L = s.unique(maxsize=2).sink_to_list()
    for v in [1, 2, 1, 3, 2, 1, 1]:
        s.emit(v)
    # 1,2 pass; 1 repeat refreshes it; 3 evicts 2; 2 passes (evicts 1); 1 passes
    assert L == [1, 2, 3, 2, 1]


def test_unique_unhashable() -> None:
    s = Stream()
    L = s.unique(hashable=False).sink_to_list()
    L1 = s.unique(maxsize=1, hashable=False).sink_to_list()
    for v in [[1], [2], [1], [1], [3]]:
        s.emit(v)
    assert L == [[1], [2], [3]]
    assert L1 == [[1], [2], [1], [3]]


def test_unique_bad_args_and_errors() -> None:
    with pytest.raises(ConfigurationError, match="unique: maxsize .*0"):
        Stream().unique(maxsize=0)
    with pytest.raises(ConfigurationError, match="unique: key"):
        Stream().unique(key=5)  # type: ignore[arg-type]
    s = Stream()
    node = s.unique(on_error="skip")
    L = node.sink_to_list()
    ref = send(s, [1])  # unhashable with hashable=True
    s.emit(1)
    assert L == [1] and node.error_count == 1 and ref.fired == 1
    s2 = Stream()
    s2.unique().sink_to_list()
    with pytest.raises(TypeError, match="Unique"):
        s2.emit({})


@pytest.mark.parametrize("kwargs", [{}, {"maxsize": 2}, {"hashable": False, "maxsize": 3}])
def test_unique_state_round_trip(kwargs: dict[str, Any]) -> None:
    data = [1, 2, 1, 3, 4, 1, 2, 5, 3, 3, 1]
    s = Stream()
    full = s.unique(**kwargs).sink_to_list()
    for v in data:
        s.emit(v)
    a = Stream()
    na = a.unique(**kwargs)
    La = na.sink_to_list()
    for v in data[:5]:
        a.emit(v)
    b = Stream()
    nb = b.unique(**kwargs)
    nb.set_state(roundtrip(na.get_state()))
    Lb = nb.sink_to_list()
    for v in data[5:]:
        b.emit(v)
    assert La + Lb == full


def test_unique_duplicate_completes_at_once() -> None:
    s = Stream()
    s.unique().sink_to_list()
    r1 = send(s, 1)
    r2 = send(s, 1)
    assert r1.fired == r2.fired == 1 and r1.late == r2.late == 0


# ---------------------------------------------------------------------- collect
def test_collect_flush() -> None:
    s = Stream()
    c = s.collect()
    assert isinstance(c, Collect)
    L = c.sink_to_list()
    s.emit(1)
    s.emit(2)
    assert L == []
    c.flush()
    assert L == [(1, 2)]
    s.emit(3)
    c.flush()
    c.flush()
    assert L == [(1, 2), (3,), ()]


def test_collect_flush_from_another_stream() -> None:
    s, trigger = Stream(), Stream()
    c = s.collect()
    trigger.sink(c.flush)
    L = c.sink_to_list()
    s.emit("a")
    trigger.emit(None)
    assert L == [("a",)]


def test_collect_holds_refs_until_flushed() -> None:
    s = Stream()
    c = s.collect()
    c.sink_to_list()
    r1, r2 = send(s, 1), send(s, 2)
    assert r1.fired == r2.fired == 0
    c.flush()
    assert r1.fired == r2.fired == 1
    c.flush()
    assert r1.late == r2.late == 0


def test_collect_bounded_cache_releases_pushed_out_records() -> None:
    s = Stream()
    c = s.collect(cache=deque(maxlen=2))
    L = c.sink_to_list()
    refs = [send(s, i) for i in range(3)]
    assert [r.fired for r in refs] == [1, 0, 0]
    c.flush()
    assert L == [(1, 2)]
    assert [r.fired for r in refs] == [1, 1, 1]
    assert all(r.late == 0 for r in refs)
    with pytest.raises(ConfigurationError, match="collect: cache must be"):
        Stream().collect(cache=[])  # type: ignore[arg-type]


def test_collect_releases_after_downstream_awaitables() -> None:
    async def main() -> None:
        s = Stream()
        c = s.collect()
        fut = asyncio.get_running_loop().create_future()
        c.sink(lambda x: fut)
        ref = send(s, 1)
        c.flush()
        assert ref.fired == 0
        fut.set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)
        assert ref.fired == 1 and ref.late == 0

    asyncio.run(asyncio.wait_for(main(), 5))


def test_collect_state_round_trip() -> None:
    s = Stream()
    c = s.collect()
    s.emit(1)
    send(s, 2)
    state = roundtrip(c.get_state())
    assert state == {"cache": [1, 2]}
    c2 = Stream().collect()
    c2.set_state(state)
    L = c2.sink_to_list()
    c2.update(3, None)
    c2.flush()
    assert L == [(1, 2, 3)]


def test_accumulate_fused_and_plain_paths_agree_and_see_set_state() -> None:
    def add(a: int, x: int) -> int:
        if x == 3:
            raise ValueError("three")
        return a + x

    s1 = Stream()
    n1 = s1.accumulate(add, on_error="skip")
    fused = n1.sink_to_list()
    s2 = Stream()
    n2 = s2.accumulate(add, on_error="skip")
    plain = n2.sink_to_list()
    for x in range(6):
        s1.emit(x)
        n2.update(x, s2, None)
    assert fused == plain == [0, 1, 3, 7, 12]
    n1.set_state({"state": 100})  # the fused path reads the restored state
    s1.emit(1)
    assert fused[-1] == 101


# ---------------------------------------------------------------- pairwise
def test_pairwise_passes_each_record_with_the_one_before() -> None:
    s = Stream()
    L = s.pairwise().sink_to_list()
    for x in range(4):
        s.emit(x)
    assert L == [(0, 1), (1, 2), (2, 3)]


def test_pairwise_holds_the_previous_record_until_its_pair_is_passed_on() -> None:
    s = Stream()
    node = s.pairwise()
    L = node.sink_to_list()
    first = send(s, "a")
    assert not first.fired and L == []  # held: the next record completes it
    second = send(s, "b")
    assert first.fired and not second.fired and L == [("a", "b")]
    third = send(s, "c")
    assert second.fired and not third.fired and L == [("a", "b"), ("b", "c")]


def test_pairwise_state_round_trip() -> None:
    s1 = Stream()
    n1 = s1.pairwise()
    out1 = n1.sink_to_list()
    s1.emit(1)
    s1.emit(2)
    s2 = Stream()
    n2 = s2.pairwise()
    out2 = n2.sink_to_list()
    n2.set_state(roundtrip(n1.get_state()))
    s2.emit(3)
    assert out1 + out2 == [(1, 2), (2, 3)]
    fresh = Pairwise(Stream())
    assert fresh.get_state() == {"previous": no_default}
