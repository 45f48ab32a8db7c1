"""The Stream node: graph shape, emit paths, errors, identity."""

from __future__ import annotations

import asyncio
import gc
import re
import weakref

import pytest

from rivermark import ConfigurationError, RefCounter, Stream
from rivermark.core import runtime
from rivermark.core.graph import fingerprint, node_ids, topological
from rivermark.errors import GraphError
from rivermark.execution.plan import plan_of


def test_sync_graph_runs_in_caller_thread_without_loop():
    s = Stream()
    out = s.map(lambda x: x * 2).sink_to_list()
    assert plan_of(s).loop_below(s) is None
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
    # the user's own exception, with the node, function and record attached
    with pytest.raises(
        KeyError,
        match=re.escape(
            "Map('parse'): user function 'test_user_function_error_names_node_and_function_and_chains.<locals>.explode' raised on record {'a': 1}"
        ),
    ) as info:
        s.emit({"a": 1})
    assert info.value.args == ("missing",)
    ctx = info.value.rivermark_context
    assert (ctx.node, ctx.record) == ("Map('parse')", {"a": 1})
    assert "on_error='skip'" in info.value.__notes__[0]
    assert len(info.value.__notes__) == 1


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
    with pytest.raises(
        ConfigurationError, match=re.escape("on_error must be 'raise', 'skip' or a callable")
    ):
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

    # streamz's format: the API name, then the function
    assert repr(Stream().map(inc)) == "<map: inc>"


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


# ---------------------------------------------------------------------- streamz-written nodes
def test_register_api_names_the_method_and_the_class() -> None:
    @Stream.register_api(attribute_name="halve")
    class Halve(Stream):
        def update(self, x, who=None, metadata=None):
            return self._emit(x / 2, metadata)

    assert Stream.halve.__name__ == "halve"
    assert Stream.halve.__qualname__ == "Stream.halve"
    assert Halve._api_name == "halve"
    s = Stream(stream_name="in")
    assert str(s.halve()) == "<halve>"
    assert str(s.halve(stream_name="h")) == "<h; halve>"
    assert str(s.map_async(_double, parallelism=2)) == "<map_async: func=_double, parallelism=2>"
    # a subclass of a registered class is shown by its own name
    assert str(type("Quarter", (Halve,), {})(s)) == "<Quarter>"


async def _double(x):
    return 2 * x


def test_user_update_returning_a_coroutine_outside_any_loop_runs_to_the_end() -> None:
    class slow_copy(Stream):
        def update(self, x, who=None, metadata=None):
            async def later():
                await asyncio.sleep(0.001)
                self._emit(x, metadata)

            return later()

    s = Stream()
    L = slow_copy(s).sink_to_list()
    assert slow_copy._is_async is False  # a plain def: only its results are wrapped
    s.emit(1)
    s.emit(2)
    assert L == [1, 2]


def test_user_update_returning_a_future_inside_a_loop_gives_backpressure() -> None:
    seen: list[int] = []

    class waits(Stream):
        def update(self, x, who=None, metadata=None):
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.01, fut.set_result, None)
            fut.add_done_callback(lambda _: seen.append(x))
            return fut

    async def main() -> list[int]:
        s = Stream(asynchronous=True)
        node = waits(s)
        assert node._is_async is False  # nothing tells yet that it needs the loop
        await s.emit(0)  # returns a future: the node is asynchronous from now on
        assert node._is_async is True
        await asyncio.sleep(0.02)
        order = []
        for i in range(1, 4):
            await s.emit(i)
            order.append(len(seen))
        return order

    assert asyncio.run(main()) == [2, 3, 4]


def test_coroutine_update_marks_the_class_asynchronous() -> None:
    class acopy(Stream):
        async def update(self, x, who=None, metadata=None):
            await asyncio.gather(*self._emit(x, metadata))

    assert acopy._is_async is True
    s = Stream()
    L = acopy(s).sink_to_list()
    s.emit(1)  # runs on the loop; the synchronous caller waits for it
    assert L == [1]


def test_ensure_io_loop_on_a_user_node_runs_it_on_the_loop() -> None:
    threads: list[str] = []

    class where(Stream):
        def __init__(self, upstream, **kwargs):
            super().__init__(upstream, ensure_io_loop=True, **kwargs)

        def update(self, x, who=None, metadata=None):
            import threading

            threads.append(threading.current_thread().name)
            return self._emit(x, metadata)

    s = Stream()
    node = where(s)
    L = node.sink_to_list()
    assert node._is_async is True and where._is_async is False
    s.emit(1)
    assert L == [1] and threads == ["rivermark-loop"]
    assert Stream(ensure_io_loop=True)._is_async is False  # rivermark's own nodes unchanged


def test_user_node_emit_returns_a_list() -> None:
    class passthrough(Stream):
        def update(self, x, who=None, metadata=None):
            self.last = self._emit(x, metadata)
            return self.last

    s = Stream()
    node = passthrough(s)
    s.emit(1)
    assert node.last == []
    assert Stream()._emit(1) is None  # rivermark's own nodes keep None (no allocation)


def test_upstream_hooks_are_called_on_connect_disconnect_destroy() -> None:
    calls: list[tuple[str, str]] = []

    class tracked(Stream):
        def _add_upstream(self, upstream):
            calls.append(("add", upstream.stream_name))
            super()._add_upstream(upstream)

        def _remove_upstream(self, upstream):
            calls.append(("remove", upstream.stream_name))
            super()._remove_upstream(upstream)

    a, b = Stream(stream_name="a"), Stream(stream_name="b")
    node = tracked(a)
    b.connect(node)
    b.disconnect(node)
    node.destroy()
    assert calls == [("add", "b"), ("remove", "b"), ("remove", "a")]
    assert node.upstreams == [] and a.downstreams == [] and b.downstreams == []


def test_refcounter_accepts_streamz_cb_and_loop() -> None:
    fired: list[int] = []
    ref = RefCounter(cb=lambda: fired.append(1))
    assert ref.cb is ref.callback
    ref.retain()
    ref.release()
    assert fired == [1]

    class FakeIOLoop:
        def __init__(self) -> None:
            self.callbacks: list[object] = []

        def add_callback(self, cb: object) -> None:
            self.callbacks.append(cb)

    loop = FakeIOLoop()
    ref2 = RefCounter(1, lambda: fired.append(2), loop)
    ref2.release()
    assert fired == [1] and len(loop.callbacks) == 1  # scheduled, as streamz does


def test_asynchronous_node_after_a_synchronous_one_is_refused():
    # as streamz: a graph is either asynchronous or not
    sync = Stream(asynchronous=False)
    with pytest.raises(
        ConfigurationError, match=re.escape("asynchronous=True on a node whose upstream")
    ):
        Stream(asynchronous=True, upstream=sync)
    assert Stream(asynchronous=False, upstream=sync).asynchronous is False
    assert Stream(upstream=Stream(asynchronous=True)).asynchronous is None
