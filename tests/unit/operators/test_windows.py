"""Tests of partition, partition_unique and sliding_window."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.errors import NodeFailedError
from rivermark.operators.windows import Partition, PartitionUnique, SlidingWindow
from rivermark.testing import wait_for_async

from .conftest import StrictRef, roundtrip


def send(node: Stream, x: Any, who: Stream | None = None) -> tuple[StrictRef, Any]:
    """Call ``node.update`` as its upstream would, with a reference held like a source."""
    ref = StrictRef()
    ref.retain()
    res = node.update(x, who, [{"ref": ref}])
    ref.release()
    return ref, res


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


# ---------------------------------------------------------------------- partition
def test_partition_basic() -> None:
    s = Stream()
    node = s.partition(3)
    assert isinstance(node, Partition) and not node._is_async
    L = node.sink_to_list()
    for i in range(8):
        s.emit(i)
    assert L == [(0, 1, 2), (3, 4, 5)]
    one = Stream()
    L1 = one.partition(1).sink_to_list()
    one.emit("a")
    assert L1 == [("a",)]


def test_partition_by_key_callable_and_index() -> None:
    s = Stream()
    L = s.partition(2, key=lambda x: x % 2).sink_to_list()
    L2 = s.map(lambda i: {"k": i % 3, "v": i}).partition(2, key="k").sink_to_list()
    for i in range(6):
        s.emit(i)
    assert L == [(0, 2), (1, 3)]
    assert [tuple(d["v"] for d in t) for t in L2] == [(0, 3), (1, 4), (2, 5)]


def test_partition_bad_args() -> None:
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ConfigurationError, match=f"partition: n .*{bad!r}"):
            Stream().partition(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="partition: timeout .*-1"):
        Stream().partition(2, timeout=-1)


def test_partition_key_error_policy() -> None:
    s = Stream()
    s.partition(2, key="k", name="p").sink_to_list()
    with pytest.raises(KeyError, match=r"Partition\('p'\)"):
        s.emit({"x": 1})
    s2 = Stream()
    node = s2.partition(2, key=lambda x: 1 // x, on_error="skip")
    L = node.sink_to_list()
    ref, _ = send(node, 0, s2)
    s2.emit(1)
    s2.emit(1)
    assert L == [(1, 1)] and node.error_count == 1 and ref.fired == 1


def test_partition_holds_refs_until_emitted() -> None:
    s = Stream()
    node = s.partition(2)
    node.sink_to_list()
    r1, _ = send(node, 1, s)
    assert r1.fired == 0
    r2, _ = send(node, 2, s)
    assert r1.fired == r2.fired == 1
    assert r1.late == r2.late == 0


def test_partition_releases_after_downstream_work() -> None:
    async def main() -> None:
        s = Stream()
        node = s.partition(2)
        fut = asyncio.get_running_loop().create_future()
        node.sink(lambda x: fut)
        r1, _ = send(node, 1, s)
        r2, res = send(node, 2, s)
        assert res and r1.fired == r2.fired == 0
        fut.set_result(None)
        await asyncio.gather(*res)
        assert r1.fired == r2.fired == 1 and r1.late == r2.late == 0

    run(main())


def test_partition_timeout_emits_partial() -> None:
    async def main() -> None:
        s = Stream()
        node = s.partition(3, timeout=0.01)
        assert node._is_async
        L = node.sink_to_list()
        r1, _ = send(node, 1, s)
        r2, _ = send(node, 2, s)
        await wait_for_async(lambda: L == [(1, 2)])
        await wait_for_async(lambda: r2.fired == 1)
        assert r1.fired == 1 and r1.late == r2.late == 0
        assert node.in_flight == 0
        for i in range(3):  # a full partition cancels its timer
            s.emit(i)
        assert L == [(1, 2), (0, 1, 2)]
        assert not node._timers

    run(main())


def test_partition_timeout_per_key() -> None:
    async def main() -> None:
        s = Stream()
        L = s.partition(2, timeout=0.01, key=lambda x: x[0]).sink_to_list()
        s.emit(("a", 1))
        s.emit(("b", 1))
        s.emit(("a", 2))
        assert L == [(("a", 1), ("a", 2))]
        await wait_for_async(lambda: len(L) == 2)
        assert L[1] == (("b", 1),)

    run(main())


@pytest.mark.parametrize("key", [None, "mod"])
def test_partition_state_round_trip(key: Any) -> None:
    kf = (lambda x: x % 3) if key else None

    def build() -> tuple[Stream, Partition, list[Any]]:
        s = Stream()
        node = s.partition(3, key=kf)
        return s, node, node.sink_to_list()

    s, _, full = build()
    for i in range(14):
        s.emit(i)
    s1, n1, L1 = build()
    for i in range(7):
        s1.emit(i)
    s2, n2, L2 = build()
    n2.set_state(roundtrip(n1.get_state()))
    for i in range(7, 14):
        s2.emit(i)
    assert full == L1 + L2
    assert n1.state_signature().startswith("Partition(n=3, timeout=None")


def test_partition_timeout_restored_buffer_gets_timer() -> None:
    async def main() -> None:
        s = Stream()
        node = s.partition(5, timeout=0.01)
        L = node.sink_to_list()
        node.set_state({"buffers": [(None, [1, 2])]})
        await wait_for_async(lambda: L == [(1, 2)])

    run(main())


# ---------------------------------------------------------------------- partition_unique
def test_partition_unique_semantics() -> None:
    data = [1, 2, 1, 3, 1, 3, 3, 2]
    s = Stream()
    node = s.partition_unique(3)
    assert isinstance(node, PartitionUnique)
    L = node.sink_to_list()
    L2 = s.partition_unique(3, keep="last").sink_to_list()
    for v in data:
        s.emit(v)
    assert L == [(1, 2, 3), (1, 3, 2)]
    assert L2 == [(2, 1, 3), (1, 3, 2)]


def test_partition_unique_key_index_and_callable() -> None:
    s = Stream()
    L = s.partition_unique(2, key=0).sink_to_list()
    L2 = s.partition_unique(2, key=len, keep="last").sink_to_list()
    for v in ["ab", "ac", "b", "bcd"]:
        s.emit(v)
    assert L == [("ab", "b")]
    assert L2 == [("ac", "b")]


def test_partition_unique_bad_args() -> None:
    with pytest.raises(ConfigurationError, match="partition_unique: keep .*'middle'"):
        Stream().partition_unique(2, keep="middle")
    with pytest.raises(ConfigurationError, match="partition_unique: n .*0"):
        Stream().partition_unique(0)


def test_partition_unique_releases_dropped_and_replaced() -> None:
    s = Stream()
    node = s.partition_unique(2, keep="first")
    node.sink_to_list()
    a, _ = send(node, 1, s)
    dup, _ = send(node, 1, s)
    assert a.fired == 0 and dup.fired == 1  # the dropped duplicate is complete
    b, _ = send(node, 2, s)
    assert a.fired == b.fired == 1

    s2 = Stream()
    node2 = s2.partition_unique(2, keep="last")
    L = node2.sink_to_list()
    old, _ = send(node2, 1, s2)
    new, _ = send(node2, 1, s2)
    assert old.fired == 1 and new.fired == 0  # the replaced record is complete
    c, _ = send(node2, 2, s2)
    assert new.fired == c.fired == 1
    assert L == [(1, 2)]
    assert all(r.late == 0 for r in (a, dup, b, old, new, c))


def test_partition_unique_error_and_state() -> None:
    s = Stream()
    node = s.partition_unique(2, key="k", on_error="skip")
    node.sink_to_list()
    ref, _ = send(node, {"x": 1}, s)
    assert node.error_count == 1 and ref.fired == 1
    node.update({"k": 1, "v": "a"}, s)
    n2 = Stream().partition_unique(2, key="k")
    n2.set_state(roundtrip(node.get_state()))
    L = n2.sink_to_list()
    n2.update({"k": 1, "v": "b"}, None)
    n2.update({"k": 2, "v": "c"}, None)
    assert L == [({"k": 1, "v": "a"}, {"k": 2, "v": "c"})]
    assert n2.state_signature() == "PartitionUnique(n=2, key='k', keep='first')"


# ---------------------------------------------------------------------- sliding_window
def test_sliding_window_semantics() -> None:
    s = Stream()
    node = s.sliding_window(3)
    assert isinstance(node, SlidingWindow)
    L = node.sink_to_list()
    L2 = s.sliding_window(3, return_partial=False).sink_to_list()
    L1 = s.sliding_window(1).sink_to_list()
    for i in range(5):
        s.emit(i)
    assert L == [(0,), (0, 1), (0, 1, 2), (1, 2, 3), (2, 3, 4)]
    assert L2 == [(0, 1, 2), (1, 2, 3), (2, 3, 4)]
    assert [(i,) for i in range(5)] == L1
    with pytest.raises(ConfigurationError, match="sliding_window: n .*0"):
        Stream().sliding_window(0)


@pytest.mark.parametrize("partial", [True, False])
def test_sliding_window_holds_each_ref_while_in_window(partial: bool) -> None:
    s = Stream()
    node = s.sliding_window(3, return_partial=partial)
    node.sink_to_list()
    refs = []
    for i in range(6):
        r, _ = send(node, i, s)
        refs.append(r)
        # record j is released after the last window containing it (j + 2) was emitted
        assert [x.fired for x in refs] == [1 if j <= i - 2 else 0 for j in range(i + 1)]
    assert all(r.late == 0 for r in refs)


def test_sliding_window_emits_merged_metadata() -> None:
    s = Stream()
    node = s.sliding_window(2)
    got: list[Any] = []

    class Probe(Stream):
        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            got.append(len(metadata or []))
            return None

    Probe(node)
    send(node, 1, s)
    node.update(2, s, None)
    send(node, 3, s)
    assert got == [1, 1, 1]


def test_sliding_window_releases_after_downstream_work() -> None:
    async def main() -> None:
        s = Stream()
        node = s.sliding_window(1)
        fut = asyncio.get_running_loop().create_future()
        node.sink(lambda x: fut)
        r, res = send(node, 1, s)
        assert res and r.fired == 0
        fut.set_result(None)
        await asyncio.gather(*res)
        assert r.fired == 1

    run(main())


@pytest.mark.parametrize("partial", [True, False])
@pytest.mark.parametrize("cut", [0, 1, 2, 3, 5])
def test_sliding_window_state_round_trip(partial: bool, cut: int) -> None:
    def build() -> tuple[Stream, SlidingWindow, list[Any]]:
        s = Stream()
        node = s.sliding_window(3, return_partial=partial)
        return s, node, node.sink_to_list()

    s, _, full = build()
    for i in range(8):
        s.emit(i)
    s1, n1, L1 = build()
    for i in range(cut):
        send(n1, i, s1)
    s2, n2, L2 = build()
    n2.set_state(roundtrip(n1.get_state()))
    refs = []
    for i in range(cut, 8):
        r, _ = send(n2, i, s2)
        refs.append(r)
    assert full == L1 + L2
    assert all(r.late == 0 for r in refs)
    assert n2.state_signature() == f"SlidingWindow(n=3, return_partial={partial})"


def test_partition_timeout_waits_for_downstream_and_counts_inflight() -> None:
    async def main() -> None:
        s = Stream()
        node = s.partition(3, timeout=0.01)
        fut = asyncio.get_running_loop().create_future()
        got: list[Any] = []

        def slow(x: Any) -> Any:
            got.append(x)
            return fut

        node.sink(slow)
        r, _ = send(node, 1, s)
        await wait_for_async(lambda: got == [(1,)])
        assert node.in_flight == 1 and r.fired == 0
        fut.set_result(None)
        await wait_for_async(lambda: r.fired == 1)
        assert node.in_flight == 0 and r.late == 0

    run(main())


def test_partition_timeout_downstream_error_fails_the_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        s = Stream()
        node = s.partition(3, timeout=0.01)

        def bad(x: Any) -> None:
            raise RuntimeError("sink broke")

        node.sink(bad)
        r, _ = send(node, 1, s)
        await wait_for_async(lambda: node.failure is not None)
        # the timed-out partition is not completed and stays in flight
        assert r.fired == 0 and node.in_flight == 1
        with pytest.raises(NodeFailedError, match="sink broke"):
            node.update(2, s)

    run(main())
    assert "Partition failed: RuntimeError: sink broke" in caplog.text


def test_partition_says_so_when_the_input_ends_with_a_partial_group(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rivermark.checkpoint import Job

    source = Stream.from_iterable(range(7), name="numbers")
    out = source.partition(3, name="triples").sink_to_list()
    with caplog.at_level(logging.WARNING, logger="rivermark.operators.windows"):
        Job(source, checkpoint=tmp_path, every=None).run()
    assert out == [(0, 1, 2), (3, 4, 5)]
    assert (
        caplog.text.count(
            "Partition('triples'): the input ended with 1 record(s) in partial group(s) of fewer than 3; "
            "they are not emitted"
        )
        == 1
    ), caplog.text


def test_partition_without_key_holds_its_buffer_and_counts_nothing_per_record():
    # the records held are the open group's length: the generated loop of a source
    # adds no count per record, and the figure stays right through emits and a restore
    s = Stream()
    p = s.partition(3)
    out = p.sink_to_list()
    run = s.record_loop()
    assert "_held" not in run.rivermark_source
    run(iter(range(7)))
    assert out == [(0, 1, 2), (3, 4, 5)]
    assert p.records_held() == 1
    assert not p.emits_later()
    state = p.get_state()
    s2 = Stream()
    p2 = s2.partition(3)
    out2 = p2.sink_to_list()
    p2.set_state(state)
    assert p2.records_held() == 1
    s2.record_loop()(iter([7, 8]))
    assert out2 == [(6, 7, 8)]
    assert p2.records_held() == 0


def test_keyed_partition_still_counts_the_records_held():
    s = Stream()
    p = s.partition(2, key=lambda x: x % 2)
    out = p.sink_to_list()
    s.record_loop()(iter(range(5)))
    assert out == [(0, 2), (1, 3)]
    assert p.records_held() == 1
