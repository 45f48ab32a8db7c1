"""Tests of map_async (rivermark.operators.asyncops)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from rivermark import ConfigurationError, RefCounter, Stream
from rivermark.errors import NodeFailedError
from rivermark.operators.asyncops import MapAsync
from rivermark.testing import wait_for_async


def send(s: Stream, x: Any) -> tuple[list[int], Any]:
    fired: list[int] = []
    ref = RefCounter(initial=1, callback=lambda: fired.append(1))
    results = s.emit(x, metadata=[{"ref": ref}])
    ref.release()
    return fired, results


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


class Controlled:
    """A coroutine function whose calls finish when the test releases them."""

    def __init__(self) -> None:
        self.events: dict[Any, asyncio.Event] = {}
        self.started: list[Any] = []
        self.running = 0
        self.max_running = 0

    async def __call__(self, x: Any, k: int = 1) -> Any:
        self.started.append(x)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        ev = self.events.setdefault(x, asyncio.Event())
        try:
            await ev.wait()
        finally:
            self.running -= 1
        return x * k

    def finish(self, x: Any) -> None:
        self.events.setdefault(x, asyncio.Event()).set()


def test_results_in_input_order_with_parallelism() -> None:
    async def main() -> None:
        f = Controlled()
        s = Stream()
        node = s.map_async(f, k=10, parallelism=3)
        assert isinstance(node, MapAsync)
        out = node.sink_to_list()
        sent = [send(s, i) for i in range(3)]
        assert all(res is None for _, res in sent)
        await wait_for_async(lambda: len(f.started) == 3)
        f.finish(2)
        f.finish(1)
        await asyncio.sleep(0.01)
        assert out == []  # 0 is not done yet; later results wait for it
        assert all(fired == [] for fired, _ in sent)
        f.finish(0)
        await wait_for_async(lambda: len(out) == 3)
        assert out == [0, 10, 20]
        assert all(fired == [1] for fired, _ in sent)
        assert node.in_flight == 0

    run(main())


def test_backpressure_when_parallelism_calls_wait_behind_the_head() -> None:
    # as streamz: ``parallelism`` calls run behind the one whose result leaves next
    async def main() -> None:
        f = Controlled()
        s = Stream()
        node = s.map_async(f, parallelism=2)
        out = node.sink_to_list()
        r = [send(s, i) for i in range(5)]
        assert r[0][1] is None and r[1][1] is None and r[2][1] is None
        assert r[3][1] and r[4][1]
        await wait_for_async(lambda: len(f.started) == 3)
        assert node.in_flight == 5
        assert not r[3][1][0].done()
        f.finish(1)  # not the head: nothing leaves, no slot frees
        await asyncio.sleep(0.01)
        assert out == [] and not r[3][1][0].done() and f.started == [0, 1, 2]
        f.finish(0)  # 0 and the finished 1 leave: two slots free
        await asyncio.gather(*r[3][1], *r[4][1])
        assert f.started == [0, 1, 2, 3, 4] and out == [0, 1]
        for i in (2, 3, 4):
            f.finish(i)
        await wait_for_async(lambda: len(out) == 5)
        assert out == [0, 1, 2, 3, 4] and f.max_running == 3 and node.in_flight == 0

    run(main())


def test_calls_overlap_and_results_keep_input_order() -> None:
    # streamz's test: three calls with parallelism=2 run at the same time
    async def main() -> None:
        f = Controlled()
        s = Stream(asynchronous=True)
        node = s.map_async(f, parallelism=2)
        out = node.sink_to_list()
        for i in range(3):
            await s.emit(i)
        await wait_for_async(lambda: f.running == 3)
        for i in (2, 1, 0):
            f.finish(i)
        await wait_for_async(lambda: len(out) == 3)
        assert out == [0, 1, 2] and node.in_flight == 0

    run(main())


def test_record_completes_only_after_downstream_finished() -> None:
    async def main() -> None:
        s = Stream()
        release = asyncio.Event()
        done: list[Any] = []

        async def double(x: Any) -> Any:
            return 2 * x

        async def slow_sink(x: Any) -> None:
            await release.wait()
            done.append(x)

        s.map_async(double).sink(slow_sink)
        fired, _ = send(s, 4)
        await asyncio.sleep(0.01)
        assert fired == [] and done == []
        release.set()
        await wait_for_async(lambda: fired == [1])
        assert done == [8]

    run(main())


def test_error_policy_skip_completes_record_and_goes_on() -> None:
    async def main() -> None:
        s = Stream()

        async def f(x: Any) -> Any:
            if x == 1:
                raise ValueError("no ones")
            return x

        node = s.map_async(f, on_error="skip")
        out = node.sink_to_list()
        fired = [send(s, i)[0] for i in range(3)]
        await wait_for_async(lambda: len(out) == 2)
        assert out == [0, 2] and node.error_count == 1
        assert fired == [[1], [1], [1]]

    run(main())


def test_error_policy_callable_receives_record() -> None:
    async def main() -> None:
        bad: list[Any] = []

        async def f(x: Any) -> Any:
            raise KeyError(x)

        s = Stream()
        out = s.map_async(f, on_error=lambda rec, exc: bad.append((rec, type(exc)))).sink_to_list()
        send(s, "r")
        await wait_for_async(lambda: bad)
        assert bad == [("r", KeyError)] and out == []

    run(main())


def test_raise_policy_fails_the_node_and_keeps_the_record(caplog: Any) -> None:
    """A raising call under the default policy is never a silent drop (see docs/operators.md)."""

    async def main() -> None:
        async def f(x: Any) -> Any:
            if x == 0:
                raise ValueError("zero")
            return x

        s = Stream()
        node = s.map_async(f, parallelism=2)
        out = node.sink_to_list()
        fired0, _ = send(s, 0)
        fired5, _ = send(s, 5)
        await wait_for_async(lambda: node.failure is not None)
        await asyncio.sleep(0.01)
        # neither the failed record nor the one behind it completes or leaves
        assert out == [] and fired0 == [] and fired5 == []
        assert node.in_flight == 2  # a checkpoint barrier cannot pass them
        with pytest.raises(NodeFailedError, match=re.escape("failed earlier (ValueError")):
            s.emit(6)

    run(main())
    assert "zero" in caplog.text


def test_runs_on_background_loop_from_sync_code() -> None:
    async def inc(x: Any) -> Any:
        return x + 1

    s = Stream()
    out = s.map_async(inc, parallelism=2).sink_to_list()
    for i in range(5):
        s.emit(i)
    from rivermark.testing import wait_for

    wait_for(lambda: len(out) == 5)
    assert out == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("args", "kwargs", "text"),
    [
        ((42,), {}, "map_async: func must be callable, got 42"),
        ((len,), {}, "map_async: func must be a coroutine function (async def), got <built-in"),
        (
            (Controlled(),),
            {"parallelism": 0},
            "map_async: parallelism must be an integer >= 1, got 0",
        ),
    ],
)
def test_bad_arguments(args: Any, kwargs: Any, text: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(text)):
        Stream().map_async(*args, **kwargs)


def test_func_returning_a_coroutine_is_accepted() -> None:
    async def triple(x: int) -> int:
        return 3 * x

    async def main() -> None:
        s = Stream()
        out = s.map_async(lambda x: triple(x)).sink_to_list()
        fired, _ = send(s, 2)
        await wait_for_async(lambda: out == [6] and fired == [1])

    run(main())


def test_func_returning_no_awaitable_is_a_record_error() -> None:
    async def main() -> None:
        s = Stream()
        bad: list[Any] = []
        node = s.map_async(lambda x: x + 1, on_error=lambda rec, exc: bad.append((rec, exc)))
        out = node.sink_to_list()
        fired, _ = send(s, 1)
        await wait_for_async(lambda: bool(bad) and fired == [1])
        rec, exc = bad[0]
        assert rec == 1 and out == []
        assert isinstance(exc, TypeError) and "returned 2, not an awaitable" in str(exc)
        assert node.in_flight == 0

    run(main())


def test_stop_on_exception_stops_the_sources_and_completes_the_record() -> None:
    async def boom(x: int) -> int:
        if x == 1:
            raise ValueError("one")
        return x

    async def main() -> None:
        source = Stream.from_iterable([0, 1, 2, 3])
        node = source.map_async(boom, stop_on_exception=True, on_error="skip")
        out = node.sink_to_list()
        assert node.stop_on_exception is True
        source.start()
        await wait_for_async(lambda: source.finished)
        assert 1 not in out and out[:1] == [0] and node.error_count == 1
        assert source.position() < 4  # stopped before the end
        await wait_for_async(lambda: node.in_flight == 0)

    run(main())
