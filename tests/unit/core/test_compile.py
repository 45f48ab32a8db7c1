"""The generated ``emit`` of synchronous graphs behaves exactly like the node-by-node path."""

from __future__ import annotations

import asyncio
import gc
import inspect
import re
import traceback
import weakref
from typing import Any

import pytest

from rivermark import RefCounter, Stream
from rivermark.operators.transform import Map

from ..helpers import node_by_node


def generated(fn: Any) -> bool:
    return hasattr(fn, "rivermark_source")


def test_emit_taken_after_building_is_the_generated_function():
    s = Stream()
    out = s.map(lambda x: x + 1).filter(lambda x: x % 2 == 0).sink_to_list()
    emit = s.emit
    assert generated(emit)
    for x in range(5):
        emit(x)
    assert out == [2, 4]
    assert s.emit is emit  # installed on the instance: found without compiling again


def test_asynchronous_graph_keeps_the_general_emit():
    async def slow(x):
        return None

    s = Stream()
    s.map(str).sink(slow)
    assert not generated(s.emit)
    assert s.emit.__func__ is Stream.emit


def test_node_created_asynchronous_keeps_the_general_emit():
    s = Stream(asynchronous=True)
    out = s.map(str).sink_to_list()
    assert not generated(s.emit)

    async def main() -> None:
        await s.emit(1)

    asyncio.run(main())
    assert out == ["1"]


def test_asynchronous_call_of_generated_emit_returns_an_awaitable():
    s = Stream()
    out = s.map(str).sink_to_list()
    emit = s.emit
    assert generated(emit)

    async def main() -> None:
        await emit(1, asynchronous=True)

    asyncio.run(main())
    assert out == ["1"]


def test_captured_emit_follows_graph_changes():
    s = Stream()
    a = s.map(lambda x: x + 1)
    first = a.sink_to_list()
    emit = s.emit
    emit(1)
    second = a.map(lambda x: x * 10).sink_to_list()  # fan-out added after compiling
    assert generated(s.emit) and s.emit is not emit  # taken back and compiled again
    emit(2)  # the old function hands the call to the new one
    assert first == [2, 3] and second == [30]
    a.disconnect(a.downstreams[0])
    emit(3)
    assert first == [2, 3] and second == [30, 40]
    assert generated(s.emit) and s.emit is not emit  # compiled again for the new shape
    s.emit(4)
    assert second == [30, 40, 50]


def test_subclass_overriding_update_goes_through_its_update():
    class Loud(Map):
        def update(self, x, who=None, metadata=None):
            return self._emit(("loud", self.func(x)), metadata)

    s = Stream()
    out = Loud(s, str).map(lambda t: t[1] + "!").sink_to_list()
    s.emit(1)
    assert out == ["1!"]
    assert "Loud" not in s.emit.rivermark_source  # called through its fused push


def test_update_set_on_an_instance_is_honoured():
    s = Stream()
    m = s.map(lambda x: x + 1)
    out = m.sink_to_list()
    m.update = lambda x, who=None, metadata=None: m._emit(-x, metadata)
    s.emit(5)
    assert out == [-5]


def test_class_with_its_own_emit_is_not_shadowed():
    seen = []

    class Counting(Stream):
        def emit(self, x, asynchronous=False, metadata=None):
            seen.append(x)
            return super().emit(x, asynchronous=asynchronous, metadata=metadata)

    s = Counting()
    out = s.map(lambda x: x * 2).sink_to_list()
    for x in (1, 2, 3):
        s.emit(x)
    assert seen == [1, 2, 3] and out == [2, 4, 6]
    assert "emit" not in vars(s)


def test_error_policies_per_node_in_generated_code():
    dead = []
    s = Stream()
    a = s.map(lambda x: 10 // x, on_error="skip")
    b = s.map(lambda x: 10 // (x - 1), on_error=lambda rec, exc: dead.append(rec))
    left, right = a.sink_to_list(), b.sink_to_list()
    emit = s.emit
    assert generated(emit)
    for x in (0, 1, 2):
        emit(x)
    # a record dropped in the first branch still reaches the second
    assert left == [10, 5] and right == [-10, 10]
    assert a.error_count == 1 and b.error_count == 1 and dead == [1]


def test_user_function_error_names_node_and_function():
    def explode(x):
        raise KeyError(x)

    s = Stream()
    s.map(str).map(explode, stream_name="parse").sink_to_list()
    emit = s.emit
    assert generated(emit)
    msg = "Map('parse'): user function 'test_user_function_error_names_node_and_function.<locals>.explode' raised on record '1'"
    with pytest.raises(KeyError, match=re.escape(msg)) as info:
        emit(1)
    assert info.value.args == ("1",) and info.value.rivermark_context.record == "1"


def test_tracked_records_take_the_full_path():
    s = Stream()
    out = s.map(lambda x: x + 1).partition(2).sink_to_list()
    emit = s.emit
    assert generated(emit)
    refs = []
    for x in range(3):
        ref = RefCounter(callback=lambda: None)
        ref.retain()
        emit(x, metadata=[{"ref": ref}])
        ref.release()
        refs.append(ref)
    emit(10)  # untracked, completes the partition that holds the third record
    emit(11)
    assert out == [(1, 2), (3, 11)]
    assert all(r.done for r in refs)


def test_partition_emits_merged_metadata_when_completed_by_an_untracked_record():
    seen = []

    class Peek(Stream):
        def update(self, x, who=None, metadata=None):
            seen.append((x, metadata))

    s = Stream()
    Peek(s.partition(2))
    ref = RefCounter()
    ref.retain()
    md = [{"ref": ref}]
    s.emit(1, metadata=md)
    s.emit(2)
    assert seen == [((1, 2), md)]
    ref.release()
    assert ref.done


def test_zip_merges_metadata_of_a_tracked_head():
    seen = []

    class Peek(Stream):
        def update(self, x, who=None, metadata=None):
            seen.append((x, metadata))

    a, b = Stream(), Stream()
    Peek(a.zip(b))
    md = [{"ref": RefCounter()}]
    a.emit(1, metadata=md)
    b.emit("x")
    assert seen == [((1, "x"), md)]


def test_state_replaced_by_set_state_is_used_by_the_generated_code():
    s = Stream()
    acc = s.accumulate(lambda a, x: a + x, start=0)
    part = s.partition(3)
    win = s.sliding_window(2, return_partial=False)
    z = s.map(str).zip(s.map(lambda x: -x))
    outs = [acc.sink_to_list(), part.sink_to_list(), win.sink_to_list(), z.sink_to_list()]
    emit = s.emit
    assert generated(emit)
    emit(1)
    states = [n.get_state() for n in (acc, part, win, z)]
    assert states == [
        {"state": 1},
        {"buffers": [(None, [1])]},
        {"buffer": [1]},
        {"buffers": [[], []]},
    ]
    acc.set_state({"state": 100})
    part.set_state({"buffers": [(None, [7, 8])]})
    win.set_state({"buffer": [9]})
    z.set_state({"buffers": [["a"], []]})
    emit(2)
    assert outs == [[1, 102], [(7, 8, 2)], [(9, 2)], [("1", -1), ("a", -2)]]
    assert [n.get_state() for n in (acc, part, win, z)] == [
        {"state": 102},
        {"buffers": []},
        {"buffer": [9, 2]},
        {"buffers": [["2"], []]},
    ]


def test_zip_with_a_full_buffer_takes_the_node_path():
    a, b = Stream(), Stream()
    z = a.zip(b, maxsize=2)
    out = z.sink_to_list()
    for x in range(4):  # a synchronous caller is never blocked; the buffer grows
        a.emit(x)
    b.emit("x")
    assert out == [(0, "x")]
    assert z.get_state() == {"buffers": [[1, 2, 3], []]}


def test_zip_wakes_waiting_callers_when_a_tuple_is_emitted():
    a, b = Stream(), Stream()
    z = a.zip(b, maxsize=1)
    out = z.sink_to_list()
    emit_a, emit_b = a.emit, b.emit
    assert generated(emit_a) and generated(emit_b)

    async def main() -> list[Any]:
        emit_a(1)
        emit_a(2)  # over maxsize while a loop runs: the node registers a waiter
        waiters = list(z._waiters)
        emit_b("x")  # completes a tuple: the node's own path wakes the waiters
        return waiters

    waiters = asyncio.run(main())
    assert len(waiters) == 1 and all(w.done() for w in waiters) and not z._waiters
    assert out == [(1, "x")]


def test_long_chain_and_many_paths_compile():
    s = Stream()
    node = s
    for _ in range(300):
        node = node.map(lambda x: x + 1)
    out = node.sink_to_list()
    s.emit(0)
    assert out == [300]
    # twelve diamonds: 4096 paths, more than are written out
    t = Stream()
    node = t
    for _ in range(12):
        node = node.map(lambda x: x).union(node.map(lambda x: x))
    out2 = node.sink_to_list()
    emit = t.emit
    assert generated(emit)
    emit(1)
    assert out2 == [1] * 4096


def test_cycle_in_the_graph_compiles():
    def run() -> list[int]:
        s = Stream()
        m = s.map(lambda x: x - 1)
        m.filter(lambda x: x > 0).connect(s)  # feedback: counts down to zero
        out = m.sink_to_list()
        s.emit(3)
        return out

    with node_by_node():
        expected = run()
    assert run() == expected == [0, 1, 2]  # depth first: the feedback runs before the sink


def test_dropped_graph_is_freed():
    s = Stream()
    s.map(lambda x: x).sink_to_list()
    s.emit(1)
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None


def test_same_results_as_node_by_node_path() -> None:
    def run() -> tuple[list[Any], list[Any], list[Any]]:
        s = Stream(on_error="skip")
        a = s.map(lambda x: 12 // (x % 4)).accumulate(lambda acc, x: acc + x)
        b = s.filter(lambda x: x % 3).sliding_window(2)
        outs = [a.sink_to_list(), b.zip(a).sink_to_list(), s.partition(3).sink_to_list()]
        emit = s.emit
        states = []
        for x in range(20):
            emit(x)
            states.append([n.get_state() for n in (a, b, b.downstreams[0])])
        return outs, states, [n.error_count for n in s.walk()]

    with node_by_node():
        expected = run()
    assert run() == expected


def test_reentrant_emit_matches_node_by_node() -> None:
    # a sink feeding records back into the source while a zip waits for its other side
    def run() -> tuple[list[Any], list[Any]]:
        s = Stream()
        seen: list[Any] = []

        def feed_back(pair: Any) -> None:
            seen.append(pair)
            if pair[0] % 3 == 0 and pair[0] < 30:
                s.emit(pair[0] + 10)

        left = s.map(lambda x: x + 1)
        right = s.filter(lambda x: x % 2).map(lambda x: -x)
        z = left.zip(right, maxsize=50)
        z.sink(feed_back)
        w = s.sliding_window(3).map(sum)
        w.sink(lambda v: s.emit(v) if v == 12 else None)
        out = w.sink_to_list()
        emit = s.emit
        states = []
        for x in range(12):
            emit(x)
            states.append((z.get_state(), w.upstreams[0].get_state()))
        return [seen, out], states

    with node_by_node():
        expected = run()
    assert run() == expected


def _explode(x: Any) -> Any:
    raise ValueError(f"bad record {x!r}")


def test_a_traceback_through_generated_code_shows_its_lines():
    s = Stream()
    s.map(_explode).sink_to_list()
    loop_source = Stream.from_iterable([1])
    loop_source.map(_explode).sink_to_list()
    for fn, call in [(s.emit, lambda f: f(7)), (loop_source.record_loop(), lambda f: f(iter([7])))]:
        assert generated(fn)
        with pytest.raises(ValueError, match=re.escape("bad record 7")) as info:
            call(fn)
        frames = [
            f
            for f in traceback.extract_tb(info.value.__traceback__)
            if f.filename.startswith("<rivermark graph")
        ]
        lines = fn.rivermark_source.splitlines()
        # the frame that called the user function, with the generated line's text
        assert [f.line for f in frames if f.name == fn.__name__][-1] == "y_1 = func_1(x)"
        assert all(f.line == lines[f.lineno - 1].strip() for f in frames)
        assert "y_1 = func_1(x)" in "".join(traceback.format_exception(info.value))
        assert inspect.getsource(fn) == fn.rivermark_source  # what a debugger lists


@pytest.mark.parametrize("shape", ["chain", "partition"])
def test_source_loop_checks_for_awaitables_only_after_a_node_may_have_handed_some(shape):
    # every record starts with nothing collected, so the loop checks what it
    # collected only after a call that may have handed back awaitables
    s = Stream()
    if shape == "chain":
        out = s.map(lambda x: x + 1).filter(lambda x: x % 2 == 0).sink_to_list()
    else:
        out = s.partition(2).sink_to_list()
    run = s.record_loop()
    lines = [line.strip() for line in run.rivermark_source.splitlines()]
    checks = [i for i, line in enumerate(lines) if line == "if _out:"]
    assert checks
    for i in checks:
        assert lines[i - 1].startswith("_out = "), run.rivermark_source
    assert run(iter(range(6))) is None
    assert out == ([2, 4, 6] if shape == "chain" else [(0, 1), (2, 3), (4, 5)])
