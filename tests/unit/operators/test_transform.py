"""Tests of the record-by-record operators (rivermark.operators.transform)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.operators.transform import Filter, Flatten, Pluck, Remove

from .conftest import StrictRef


def send(s: Stream, x: Any) -> tuple[StrictRef, Any]:
    """Emit ``x`` holding a reference as a source does; return the counter and the results."""
    ref = StrictRef()
    ref.retain()
    res = s.emit(x, metadata=[{"ref": ref}])
    ref.release()
    return ref, res


# ---------------------------------------------------------------------- filter / remove
def test_filter_with_args_and_kwargs() -> None:
    s = Stream()
    node = s.filter(lambda x, lo, hi=0: lo <= x < hi, 2, hi=5)
    assert isinstance(node, Filter)
    L = node.sink_to_list()
    for i in range(8):
        s.emit(i)
    assert L == [2, 3, 4]


def test_filter_none_means_truthiness() -> None:
    s = Stream()
    L = s.filter(None).sink_to_list()
    for v in [0, 1, None, [], [0], "", "x", False, True]:
        s.emit(v)
    assert L == [1, [0], "x", True]


def test_remove_is_negated_filter() -> None:
    s = Stream()
    node = s.remove(lambda x: x > 2)
    assert isinstance(node, Remove)
    L = node.sink_to_list()
    for i in range(5):
        s.emit(i)
    assert L == [0, 1, 2]


def test_filter_completion_of_dropped_and_passed_records() -> None:
    s = Stream()
    L = s.filter(lambda x: x > 0).sink_to_list()
    dropped, _ = send(s, 0)
    passed, _ = send(s, 1)
    assert dropped.fired == 1 and passed.fired == 1
    assert dropped.late == passed.late == 0
    assert L == [1]


@pytest.mark.parametrize("bad", [3, "x"])
def test_filter_and_remove_reject_non_callables(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"filter: predicate .*" + repr(bad)):
        Stream().filter(bad)
    with pytest.raises(ConfigurationError, match="remove: predicate"):
        Stream().remove(bad)
    with pytest.raises(ConfigurationError, match="remove"):
        Stream().remove(None)  # type: ignore[arg-type]


def boom(x: Any) -> bool:
    if x == 2:
        raise ValueError("bad two")
    return True


def test_filter_error_raise_names_node_and_function() -> None:
    s = Stream()
    s.filter(boom, name="f1").sink_to_list()
    with pytest.raises(
        ValueError, match=r"(?s)bad two.*Filter\('f1'\): user function '[^']*boom'"
    ) as ei:
        s.emit(2)
    assert ei.value.rivermark_context.record == 2


def test_filter_error_skip_and_callable() -> None:
    s = Stream()
    node = s.filter(boom, on_error="skip")
    L = node.sink_to_list()
    ref, _ = send(s, 2)
    s.emit(3)
    assert L == [3] and node.error_count == 1 and ref.fired == 1
    seen: list[Any] = []
    s2 = Stream()
    s2.remove(boom, on_error=lambda rec, exc: seen.append((rec, type(exc)))).sink_to_list()
    s2.emit(2)
    assert seen == [(2, ValueError)]


# ---------------------------------------------------------------------- pluck
def test_pluck_single_and_many() -> None:
    s = Stream()
    node = s.pluck(1)
    assert isinstance(node, Pluck)
    L1 = node.sink_to_list()
    L2 = s.pluck([0, 2]).sink_to_list()
    s.emit((1, 2, 3))
    s.emit([4, 5, 6])
    assert L1 == [2, 5]
    assert L2 == [(1, 3), (4, 6)]
    d = Stream()
    L3 = d.pluck("name").sink_to_list()
    d.emit({"name": "Alice"})
    assert L3 == ["Alice"]


def test_pluck_tuple_pick_is_a_single_key() -> None:
    s = Stream()
    L = s.pluck((0, 1)).sink_to_list()
    s.emit({(0, 1): "k"})
    assert L == ["k"]


def test_pluck_missing_key_follows_error_policy() -> None:
    s = Stream()
    s.pluck("a").sink_to_list()
    with pytest.raises(KeyError, match="Pluck: user function"):
        s.emit({"b": 1})
    s2 = Stream()
    node = s2.pluck("a", on_error="skip")
    L = node.sink_to_list()
    ref, _ = send(s2, {"b": 1})
    s2.emit({"a": 7})
    assert L == [7] and node.error_count == 1 and ref.fired == 1


# ---------------------------------------------------------------------- flatten / concat
def test_flatten_and_concat_alias() -> None:
    s = Stream()
    node = s.flatten()
    assert isinstance(node, Flatten)
    L = node.sink_to_list()
    L2 = s.concat().sink_to_list()
    s.emit([1, 2])
    s.emit(())
    s.emit(range(3, 5))
    s.emit((5,))
    assert L == [1, 2, 3, 4, 5]
    assert L2 == L


def test_flatten_not_iterable_is_a_user_error() -> None:
    s = Stream()
    node = s.flatten(on_error="skip")
    L = node.sink_to_list()
    ref, _ = send(s, 5)
    s.emit([1])
    assert L == [1] and node.error_count == 1 and ref.fired == 1
    s2 = Stream()
    s2.flatten().sink_to_list()
    with pytest.raises(TypeError, match="Flatten"):
        s2.emit(5)


def test_flatten_sync_completion_after_all_items() -> None:
    s = Stream()
    seen: list[tuple[Any, int]] = []
    refs: list[StrictRef] = []

    def check(x: Any) -> None:
        # during the emits the upstream record is not yet complete
        seen.append((x, refs[0].fired))

    s.flatten().sink(check)
    ref = StrictRef()
    refs.append(ref)
    ref.retain()
    s.emit([1, 2, 3], metadata=[{"ref": ref}])
    assert ref.fired == 0  # the source still holds it
    ref.release()
    assert ref.fired == 1 and ref.late == 0
    assert seen == [(1, 0), (2, 0), (3, 0)]


def test_flatten_empty_completes() -> None:
    s = Stream()
    L = s.flatten().sink_to_list()
    ref, _ = send(s, [])
    assert ref.fired == 1 and L == []


class Parker(Stream):
    """A downstream that holds every record until the test lets it go (returns awaitables)."""

    def __init__(self, upstream: Stream) -> None:
        self.futures: list[asyncio.Future[Any]] = []
        self.got: list[Any] = []
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream | None = None, metadata: Any = None) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.got.append(x)
        self.futures.append(fut)
        return [fut]


def test_flatten_returns_awaitables_of_all_items_and_completes_after_them() -> None:
    async def main() -> None:
        s = Stream()
        node = s.flatten()
        p = Parker(node)
        ref = StrictRef()
        ref.retain()
        results = node.update([1, 2, 3], s, [{"ref": ref}])
        ref.release()
        assert p.got == [1, 2, 3]
        assert results
        assert ref.fired == 0  # downstream still working on every item
        gathered = asyncio.gather(*results)
        p.futures[2].set_result(None)
        p.futures[1].set_result(None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert ref.fired == 0  # item 1 is still in progress
        assert not gathered.done()
        p.futures[0].set_result(None)
        await asyncio.wait_for(gathered, 5)
        assert ref.fired == 1 and ref.late == 0

    asyncio.run(main())


def test_flatten_without_metadata_returns_all_awaitables() -> None:
    async def main() -> None:
        s = Stream()
        node = s.flatten()
        p = Parker(node)
        results = node.update([1, 2], s, None)
        assert results is not None and len(results) == 2
        for f in p.futures:
            f.set_result(None)
        await asyncio.gather(*results)

    asyncio.run(main())


# ---------------------------------------------------------------------- fused and plain paths agree
def _raise_on_3(x: Any, *args: Any, **kwargs: Any) -> Any:
    if x == 3:
        raise ValueError("three")
    return x % 2


@pytest.mark.parametrize(
    "make",
    [
        lambda s: s.filter(_raise_on_3, on_error="skip"),
        lambda s: s.filter(_raise_on_3, 1, k=2, on_error="skip"),
        lambda s: s.remove(_raise_on_3, on_error="skip"),
        lambda s: s.filter(None),
        lambda s: s.map(lambda x: {"a": x} if x != 3 else {}).pluck("a", on_error="skip"),
        lambda s: s.map(lambda x: (x, -x)).pluck([1, 0]),
    ],
)
def test_fused_emit_matches_plain_update(make: Callable[[Stream], Stream]) -> None:
    data = [0, 1, 2, 3, 4, 5]
    s1 = Stream()
    n1 = make(s1)
    fused = n1.sink_to_list()
    for x in data:
        s1.emit(x)  # goes through the fused push functions
    s2 = Stream()
    n2 = make(s2)
    plain = n2.sink_to_list()
    first = s2.downstreams[0]
    for x in data:
        first.update(x, s2, None)  # the nodes' own update methods
    assert fused == plain
    assert n1.error_count == n2.error_count


def test_fused_filter_completion_and_raise() -> None:
    s = Stream()
    s.filter(_raise_on_3, name="odd").sink_to_list()
    r0, _ = send(s, 0)
    r1, _ = send(s, 1)
    assert r0.fired == r1.fired == 1
    with pytest.raises(ValueError, match=r"Filter\('odd'\).*_raise_on_3"):
        s.emit(3)
