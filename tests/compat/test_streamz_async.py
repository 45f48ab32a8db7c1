"""streamz users' asynchronous code (sources, timers, ``await emit``) against rivermark.

streamz runs these on a Tornado IOLoop; the snippets below use asyncio (which
Tornado >= 6 runs on too), with only the import changed to rivermark.
"""

from __future__ import annotations

import asyncio
import queue
from typing import Any

from tornado.ioloop import IOLoop

from rivermark import Stream
from rivermark.testing import wait_for, wait_for_async


def inc(x: int) -> int:
    return x + 1


def test_docs_async_example_with_await_emit() -> None:
    # the streamz "Asynchronous Computation" example: Stream(asynchronous=True),
    # a rate limit, and ``await source.emit(x)`` inside ``async def``
    out: list[int] = []

    async def f() -> None:
        source = Stream(asynchronous=True)
        source.map(inc).rate_limit(0.001).sink(out.append)
        for x in range(5):
            await source.emit(x)

    asyncio.run(f())
    assert out == [1, 2, 3, 4, 5]


def test_docs_async_example_on_tornado_ioloop() -> None:
    out: list[int] = []

    async def f() -> None:
        source = Stream(asynchronous=True)
        source.map(inc).rate_limit(0.001).sink(out.append)
        for x in range(3):
            await source.emit(x)

    IOLoop().run_sync(f)
    assert out == [1, 2, 3]


def test_emit_asynchronous_true_waits_for_async_sink() -> None:
    done: list[int] = []

    async def slow_write(x: int) -> None:
        await asyncio.sleep(0.001)
        done.append(x)

    async def f() -> list[int]:
        source = Stream()
        source.map(inc).sink(slow_write)
        seen = []
        for x in range(3):
            await source.emit(x, asynchronous=True)
            seen.append(len(done))
        return seen

    assert asyncio.run(f()) == [1, 2, 3]


def test_sync_graph_emit_asynchronous_is_awaitable() -> None:
    async def f() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.map(inc).sink_to_list()
        await source.emit(1)
        await source.emit(2, asynchronous=True)
        return L

    assert asyncio.run(f()) == [2, 3]


def test_from_iterable_start() -> None:
    source = Stream.from_iterable([1, 2, 3])
    L = source.map(inc).sink_to_list()
    source.start()
    wait_for(lambda: len(L) == 3)
    assert L == [2, 3, 4]


def test_from_iterable_start_inside_running_loop() -> None:
    async def f() -> list[int]:
        source = Stream.from_iterable(range(4))
        L = source.accumulate(lambda a, b: a + b).sink_to_list()
        source.start()
        await wait_for_async(lambda: source.finished)
        return L

    assert asyncio.run(f()) == [0, 1, 3, 6]


def test_from_iterable_start_true_kwarg() -> None:
    source = Stream.from_iterable(["a", "b"], start=False)
    L = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert L == ["a", "b"]


def test_timed_window() -> None:
    async def f() -> list[Any]:
        source = Stream(asynchronous=True)
        L = source.timed_window(0.01).sink_to_list()
        for i in range(5):
            await source.emit(i)
        await wait_for_async(lambda: sum(len(w) for w in L) == 5)
        return L

    L = asyncio.run(f())
    assert [x for w in L for x in w] == [0, 1, 2, 3, 4]
    assert all(isinstance(w, (list, tuple)) for w in L)


def test_timed_window_unique() -> None:
    async def f() -> list[Any]:
        source = Stream(asynchronous=True)
        L = source.timed_window_unique(0.01).sink_to_list()
        for i in [1, 1, 2, 1]:
            await source.emit(i)
        await wait_for_async(lambda: len(L) > 0 and sum(len(w) for w in L) >= 2)
        return L

    L = asyncio.run(f())
    assert sorted(x for w in L for x in w) == [1, 2]


def test_delay_buffer_latest_keep_values() -> None:
    async def f() -> tuple[list[Any], list[Any], list[Any]]:
        source = Stream(asynchronous=True)
        d = source.delay(0.001).sink_to_list()
        b = source.buffer(2).sink_to_list()
        lat = source.latest().sink_to_list()
        for i in range(4):
            await source.emit(i)
        await wait_for_async(lambda: len(d) == 4 and len(b) == 4 and lat and lat[-1] == 3)
        return d, b, lat

    d, b, lat = asyncio.run(f())
    assert d == [0, 1, 2, 3]
    assert b == [0, 1, 2, 3]
    assert lat[-1] == 3 and lat == sorted(lat)


def test_map_async() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def f() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.map_async(double).sink_to_list()
        for i in range(4):
            await source.emit(i)
        await wait_for_async(lambda: len(L) == 4)
        return L

    assert asyncio.run(f()) == [0, 2, 4, 6]


def test_from_q_and_stop() -> None:
    q: queue.Queue[int] = queue.Queue()
    source = Stream.from_q(q)
    L = source.sink_to_list()
    source.start()
    for i in range(3):
        q.put(i)
    wait_for(lambda: len(L) == 3)
    source.stop()
    assert L == [0, 1, 2]


def test_from_periodic() -> None:
    counter = iter(range(100))
    source = Stream.from_periodic(lambda: next(counter), poll_interval=0.001)
    L = source.sink_to_list()
    source.start()
    wait_for(lambda: len(L) >= 3)
    source.stop()
    assert L[:3] == [0, 1, 2]


def test_from_textfile_and_filenames(tmp_path: Any) -> None:
    path = tmp_path / "data.txt"
    path.write_text("a\nb\n")
    source = Stream.from_textfile(str(path), poll_interval=0.001)
    L = source.sink_to_list()
    source.start()
    wait_for(lambda: len(L) == 2)
    source.stop()
    assert [line.rstrip("\n") for line in L] == ["a", "b"]

    names = Stream.filenames(str(tmp_path / "*.txt"), poll_interval=0.001)
    N = names.sink_to_list()
    names.start()
    wait_for(lambda: len(N) == 1)
    names.stop()
    assert N[0].endswith("data.txt")


def test_from_process_lines() -> None:
    import sys

    source = Stream.from_process([sys.executable, "-c", "print('x'); print('y')"])
    L = source.sink_to_list()
    source.start()
    wait_for(lambda: len(L) == 2)
    source.stop()
    assert L == [b"x\n", b"y\n"]


def test_source_started_by_downstream_start() -> None:
    source = Stream.from_iterable([1, 2])
    sink = source.map(inc)
    L = sink.sink_to_list()
    sink.start()  # streamz users often start through any downstream node
    wait_for(lambda: len(L) == 2)
    assert L == [2, 3]


def test_from_process_with_end_default_matches_streamz() -> None:
    import sys

    # streamz's from_process defaults to with_end=True: a last line without
    # a newline is emitted too
    source = Stream.from_process([sys.executable, "-c", "print('a'); print('b', end='')"])
    L = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert L == [b"a\n", b"b"]


def test_node_loop_is_asyncio() -> None:
    # streamz exposes a Tornado IOLoop as node.loop; rivermark an asyncio loop
    source = Stream.from_iterable([1])
    assert isinstance(source.loop, asyncio.AbstractEventLoop)
    assert not hasattr(source.loop, "add_callback")


def test_custom_source_subclass_with_await_emit() -> None:
    # the streamz way to write a source: subclass Source, implement
    # ``async def run`` and ``await self.emit(x, asynchronous=True)``
    from rivermark import Source

    @Stream.register_api(staticmethod)
    class from_countdown(Source):
        def __init__(self, n: int, **kwargs: Any) -> None:
            self.n = n
            super().__init__(**kwargs)

        async def run(self) -> None:
            for i in range(self.n, 0, -1):
                if self.stopped:
                    break
                await self.emit(i, asynchronous=True)

    source = Stream.from_countdown(3)
    L = source.map(inc).sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert L == [4, 3, 2]


# ---------------------------------------------------------------------- run with both libraries
def both(snippet: Any) -> Any:
    """Run ``snippet(module)`` with streamz and with rivermark; assert equal output."""
    import streamz

    import rivermark

    expected = snippet(streamz)
    got = snippet(rivermark)
    assert got == expected
    return got


def test_docs_async_example_with_tornado_coroutine_sink() -> None:
    # streamz's "Asynchronous Computation" page: a @gen.coroutine write function
    from tornado import gen

    def snippet(sz: Any) -> list[int]:
        out: list[int] = []

        @gen.coroutine
        def write(x: int) -> Any:
            yield gen.sleep(0.001)
            out.append(x)

        @gen.coroutine
        def f() -> Any:
            source = sz.Stream(asynchronous=True)
            source.map(inc).rate_limit(0.001).sink(write)
            for x in range(4):
                yield source.emit(x)

        IOLoop().run_sync(f)
        return out

    assert both(snippet) == [1, 2, 3, 4]


def test_docs_event_loop_on_a_separate_thread_with_tornado_coroutine() -> None:
    # ``Stream(asynchronous=False)``: emit blocks until the coroutine sink finished
    from tornado import gen

    def snippet(sz: Any) -> list[Any]:
        out: list[int] = []

        @gen.coroutine
        def slow_write(x: int) -> Any:
            yield gen.sleep(0.01)
            out.append(x)

        source = sz.Stream(asynchronous=False)
        source.map(inc).sink(slow_write)
        seen = []
        for x in range(3):
            source.emit(x)
            seen.append(list(out))
        return seen

    assert both(snippet) == [[1], [1, 2], [1, 2, 3]]


def test_plugin_docs_node_with_gen_coroutine_update() -> None:
    # the reference implementation on streamz's "Plugins" page
    from tornado import gen

    def snippet(sz: Any) -> list[int]:
        class RepeatNode(sz.Stream):
            def __init__(self, upstream: Any, n: int, **kwargs: Any) -> None:
                super().__init__(upstream, ensure_io_loop=True, **kwargs)
                self._n = n

            @gen.coroutine
            def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
                for _ in range(self._n):
                    yield self._emit(x, metadata=metadata)

        source = sz.Stream()
        L = RepeatNode(source, 3).sink_to_list()
        source.emit(1)
        source.emit(2)
        wait_for(lambda: len(L) == 6)
        return L

    assert both(snippet) == [1, 1, 1, 2, 2, 2]


def test_node_with_async_def_update() -> None:
    def snippet(sz: Any) -> list[int]:
        class twice(sz.Stream):
            async def update(self, x: Any, who: Any = None, metadata: Any = None) -> None:
                await asyncio.sleep(0.001)
                await asyncio.gather(*self._emit(x, metadata=metadata))
                await asyncio.gather(*self._emit(10 * x, metadata=metadata))

        async def main() -> list[int]:
            source = sz.Stream(asynchronous=True)
            L = twice(source).sink_to_list()
            await source.emit(1)
            await source.emit(2)
            return L

        return asyncio.run(main())

    assert both(snippet) == [1, 10, 2, 20]


def test_source_subclass_with_streamz_run_step() -> None:
    # streamz sources implement ``async def _run`` (one step) and set ``stopped``
    def snippet(sz: Any) -> list[int]:
        class countdown(sz.Source):
            def __init__(self, n: int, **kwargs: Any) -> None:
                self.n = n
                super().__init__(**kwargs)

            async def _run(self) -> None:
                if self.n == 0:
                    self.stopped = True
                    return
                await asyncio.gather(*self._emit(self.n))
                self.n -= 1

        source = countdown(3)
        L = source.map(inc).sink_to_list()
        source.start()
        wait_for(lambda: len(L) == 3 and source.stopped)
        return L

    assert both(snippet) == [4, 3, 2]


def test_source_subclass_without_run_says_what_to_implement() -> None:
    from rivermark import Source

    class nothing(Source):
        pass

    async def main() -> None:
        s = nothing()
        s.start()
        await s.wait_finished()

    try:
        asyncio.run(main())
    except NotImplementedError as e:
        assert "implements 'async def run(self)'" in str(e)
        assert "'async def _run(self)'" in str(e)
    else:  # pragma: no cover - the run above must fail
        raise AssertionError("a Source without run() started without error")


def test_map_async_with_tornado_coroutine_and_keyword_arguments() -> None:
    from tornado import gen

    def snippet(sz: Any) -> list[int]:
        @gen.coroutine
        def add_tor(x: int = 0, y: int = 0) -> Any:
            return x + y

        async def main() -> list[int]:
            source = sz.Stream(asynchronous=True)
            L = source.map_async(add_tor, y=1).sink_to_list()
            for i in range(3):
                await source.emit(i)
            await wait_for_async(lambda: len(L) == 3)
            return L

        return asyncio.run(main())

    assert both(snippet) == [1, 2, 3]


def test_map_async_with_a_function_returning_a_coroutine() -> None:
    async def fetch(x: int, factor: int) -> int:
        await asyncio.sleep(0)
        return factor * x

    async def main() -> tuple[list[int], int]:
        source = Stream(asynchronous=True)
        node = source.map_async(lambda x: fetch(x, 3))
        L = node.sink_to_list()
        plain = source.map_async(lambda x: x + 1, on_error="skip")
        for i in range(3):
            await source.emit(i)
        await wait_for_async(lambda: len(L) == 3 and plain.error_count == 3)
        return L, plain.error_count

    # a call that returns no awaitable is an error of the record (here skipped)
    assert asyncio.run(main()) == ([0, 3, 6], 3)


def test_map_async_stop_on_exception_stops_the_source() -> None:
    import itertools

    async def flake_out(x: int) -> int:
        if x == 2:
            raise RuntimeError("I fail on 2.")
        return x

    async def main() -> tuple[list[int], list[int]]:
        source = Stream.from_iterable(itertools.count())
        results = source.map_async(flake_out, stop_on_exception=True).sink_to_list()
        source.start()
        await wait_for_async(lambda: source.finished)  # stopped by the failure
        first = list(results)
        source.start()  # as in streamz, starting again goes on after the failure
        await wait_for_async(lambda: len(results) >= len(first) + 3)
        source.stop()
        return first, list(results)

    first, later = asyncio.run(main())
    assert first[:2] == [0, 1] and 2 not in later
    assert later[: len(first)] == first and later == sorted(later)


def test_delay_holds_each_record_for_the_interval() -> None:
    # rivermark's documented decision: every record leaves ``interval`` after
    # it arrived; streamz spaces its emissions ``interval`` apart instead
    import time

    async def main() -> tuple[list[int], float]:
        source = Stream(asynchronous=True)
        L = source.delay(0.2).sink_to_list()
        start = time.monotonic()
        for i in range(4):
            await source.emit(i)
        await wait_for_async(lambda: len(L) == 4)
        return L, time.monotonic() - start

    L, took = asyncio.run(main())
    assert L == [0, 1, 2, 3]
    assert 0.19 <= took < 0.55  # streamz would need about 0.6 s


def test_backpressure_from_a_sink_returning_tornado_futures() -> None:
    # streamz's own backpressure idiom: sink(queue.put) with a bounded Tornado queue
    import operator
    import time

    from tornado import gen
    from tornado.queues import Queue

    def snippet(sz: Any) -> bool:
        took: list[float] = []

        async def f() -> None:
            q: Queue[int] = Queue(maxsize=2)
            source = sz.Stream(asynchronous=True)
            source.map(inc).scan(operator.add, start=0).sink(q.put)

            async def read_from_q() -> None:
                while True:
                    await q.get()
                    await gen.sleep(0.05)

            IOLoop.current().add_callback(read_from_q)
            start = time.monotonic()
            for i in range(5):
                await source.emit(i)
            took.append(time.monotonic() - start)

        IOLoop().run_sync(f)
        return took[0] >= 0.09  # the emits waited for the reader

    assert both(snippet) is True
