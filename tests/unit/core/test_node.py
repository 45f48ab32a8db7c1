"""The Stream node: graph shape, emit paths, errors, identity."""

from __future__ import annotations

import asyncio
import gc
import re
import weakref

import pytest

from rivermark import ConfigurationError, RefCounter, Stream, UserFunctionError
from rivermark.core import runtime
from rivermark.core.graph import fingerprint, node_ids, topological
from rivermark.errors import GraphError


def test_sync_graph_runs_in_caller_thread_without_loop():
    s = Stream()
    out = s.map(lambda x: x * 2).sink_to_list()
    assert s._downstream_loop() is None
    assert s.emit(3) is None
    assert out == [6]


def test_emit_asynchronous_returns_awaitable_for_sync_graph():
    s = Stream()
    out = s.map(str).sink_to_list()

    async def main():
        await s.emit(1, asynchronous=True)

    asyncio.run(main())
    assert out == ["1"]


def test_connect_and_disconnect():
    a, b = Stream(), Stream()
    out = b.sink_to_list()
    a.connect(b)
    a.emit(1)
    a.disconnect(b)
    a.emit(2)
    assert out == [1]
    assert b.upstreams == []


def test_fan_out_preserves_connection_order():
    s = Stream()
    seen = []
    s.sink(lambda x: seen.append(("first", x)))
    s.sink(lambda x: seen.append(("second", x)))
    s.emit(1)
    assert seen == [("first", 1), ("second", 1)]


def test_unreferenced_sink_keeps_receiving():
    s = Stream()
    seen = []
    s.map(lambda x: x + 1).sink(seen.append)  # no reference kept to either node
    gc.collect()
    s.emit(1)
    assert seen == [2]


def test_destroyed_node_is_freed():
    s = Stream()
    node = s.map(lambda x: x)
    ref = weakref.ref(node)
    node.destroy()
    del node
    gc.collect()
    assert ref() is None
    assert s.downstreams == []


def test_user_function_error_names_node_and_function_and_chains():
    def explode(x):
        raise KeyError("missing")

    s = Stream()
    s.map(explode, stream_name="parse").sink_to_list()
    with pytest.raises(UserFunctionError, match=re.escape("Map('parse'): user function 'test_user_function_error_names_node_and_function_and_chains.<locals>.explode' raised KeyError")) as info:
        s.emit({"a": 1})
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.record == {"a": 1}
    assert "on_error='skip'" in str(info.value)


def test_on_error_skip_counts_and_drops():
    s = Stream()
    m = s.map(lambda x: 1 / x, on_error="skip")
    out = m.sink_to_list()
    for x in [1, 0, 2]:
        s.emit(x)
    assert out == [1.0, 0.5]
    assert m.error_count == 1


def test_on_error_callable_receives_record_and_exception():
    dead = []
    s = Stream()
    out = s.map(int, on_error=lambda rec, exc: dead.append((rec, type(exc)))).sink_to_list()
    for x in ["1", "x", "3"]:
        s.emit(x)
    assert out == [1, 3]
    assert dead == [("x", ValueError)]


def test_on_error_inherited_from_upstream():
    s = Stream(on_error="skip")
    m = s.map(int)
    out = m.sink_to_list()
    s.emit("bad")
    s.emit("2")
    assert out == [2] and m.error_count == 1


def test_skipped_record_counts_as_completed():
    done = []
    ref = RefCounter(callback=lambda: done.append(1))
    s = Stream()
    s.map(int, on_error="skip").sink_to_list()
    ref.retain()
    s.emit("bad", metadata=[{"ref": ref}])
    ref.release()
    assert done == [1]


def test_bad_on_error_is_refused():
    with pytest.raises(ConfigurationError, match=re.escape("on_error must be 'raise', 'skip' or a callable")):
        Stream(on_error="ignore")


def test_non_callable_func_is_refused_at_construction():
    with pytest.raises(ConfigurationError, match=re.escape("map: func must be callable, got 3")):
        Stream().map(3)


def test_register_api_with_modifier_and_attribute_name():
    @Stream.register_api(staticmethod, attribute_name="_test_const_source")
    def make(value):
        s = Stream()
        s.value = value
        return s

    assert Stream._test_const_source(5).value == 5


def test_repr_names_function():
    def inc(x):
        return x + 1

    assert repr(Stream().map(inc)) == "<Map: func=inc>"


def test_async_sink_in_background_loop_gives_backpressure():
    s = Stream()
    seen = []

    async def slow(x):
        await asyncio.sleep(0.01)
        seen.append(x)

    s.sink(slow)
    # Only the sink is async; emit from this thread blocks until it finished.
    s.emit(1)
    assert seen == [1]


def test_async_sink_completion_only_after_awaitable():
    s = Stream()
    done = []
    gate = asyncio.Event()

    async def wait(x):
        await gate.wait()

    async def main():
        s.sink(wait)
        ref = RefCounter(callback=lambda: done.append(1))
        ref.retain()
        results = s.emit(1, metadata=[{"ref": ref}])
        ref.release()
        await asyncio.sleep(0.01)
        assert done == []
        gate.set()
        await runtime.gather_results(results)
        assert done == [1]

    asyncio.run(main())


def test_graph_ids_are_stable_and_shape_derived():
    def build():
        s = Stream()
        a = s.map(str).accumulate(lambda acc, x: acc + x, start="")
        s.map(int).sink_to_list()
        return s, a

    s1, a1 = build()
    s2, a2 = build()
    assert node_ids(s1)[id(a1)] == node_ids(s2)[id(a2)]
    assert fingerprint(s1) == fingerprint(s2)


def test_explicit_names_are_ids_and_duplicates_refused():
    s = Stream(name="src")
    s.map(str, name="x")
    s.map(int, name="x")
    with pytest.raises(GraphError, match="give each node a unique name="):
        node_ids(s)


def test_topological_order_upstreams_first():
    a, b = Stream(), Stream()
    z = a.map(str).union(b)
    order = topological(z)
    assert order.index(a) < order.index(z) and order.index(b) < order.index(z)
