"""Tests of sink(func) with a coroutine function: completion waits for the awaitable."""

from __future__ import annotations

import asyncio
from typing import Any

from rivermark import RefCounter, Stream
from rivermark.testing import wait_for_async


def test_async_sink_ref_completes_only_when_awaitable_finishes() -> None:
    async def main() -> None:
        release = asyncio.Event()
        written: list[Any] = []

        async def write(x: Any) -> None:
            await release.wait()
            written.append(x)

        s = Stream()
        node = s.sink(write)
        fired: list[int] = []
        ref = RefCounter(initial=1, callback=lambda: fired.append(1))
        results = s.emit("x", metadata=[{"ref": ref}])
        ref.release()  # the source lets go after the synchronous call
        assert results  # the upstream can wait for the write (backpressure)
        await asyncio.sleep(0.01)
        assert fired == [] and written == [] and node.in_flight == 1
        release.set()
        await asyncio.gather(*results)
        assert fired == [1] and written == ["x"] and node.in_flight == 0
        ref.release()  # a stray extra release never fires the callback twice
        assert fired == [1]

    asyncio.run(asyncio.wait_for(main(), 10))


def test_async_sink_from_sync_code_waits_for_completion() -> None:
    written: list[Any] = []

    async def write(x: Any) -> None:
        await asyncio.sleep(0.001)
        written.append(x)

    s = Stream()
    s.sink(write)
    s.emit(1)  # runs on the background loop and waits for the write
    assert written == [1]


def test_async_sink_error_policy_skip_completes_record() -> None:
    async def main() -> None:
        async def fail(x: Any) -> None:
            raise OSError("disk full")

        s = Stream(on_error="skip")
        node = s.sink(fail)
        fired: list[int] = []
        ref = RefCounter(initial=1, callback=lambda: fired.append(1))
        results = s.emit("x", metadata=[{"ref": ref}])
        ref.release()
        await asyncio.gather(*results)
        await wait_for_async(lambda: fired == [1])
        assert node.error_count == 1

    asyncio.run(asyncio.wait_for(main(), 10))


def test_sink_subclass_without_func_tracks_like_a_sync_node() -> None:
    from rivermark import Sink

    seen: list[Any] = []

    class Remember(Sink):
        def update(self, x: Any, who: Any = None, metadata: Any = None) -> None:
            seen.append((x, bool(metadata)))

    s = Stream()
    node = Remember(s, stream_name="mem")
    fired: list[int] = []
    ref = RefCounter(initial=1, callback=lambda: fired.append(1))
    s.emit(1, metadata=[{"ref": ref}])
    ref.release()
    assert seen == [(1, True)] and fired == [1]  # complete when update returned
    assert node.stream_name == "mem" and node.get_state() is None


def test_sink_keyword_arguments_of_the_node_are_not_passed_to_func() -> None:
    got: list[Any] = []
    s = Stream()
    node = s.sink(lambda x, **kw: got.append((x, kw)), stream_name="out", tag="t")
    s.emit(1)
    assert got == [(1, {"tag": "t"})] and node.stream_name == "out"


def test_sink_of_a_plain_function_returning_awaitables_becomes_asynchronous() -> None:
    async def main() -> list[int]:
        done: list[int] = []

        def write(x: int) -> Any:
            async def later() -> None:
                await asyncio.sleep(0.005)
                done.append(x)

            return asyncio.ensure_future(later())

        s = Stream(asynchronous=True)
        node = s.sink(write)
        assert node._is_async is False
        await s.emit(0)
        assert node._is_async is True
        order = []
        for i in range(1, 3):
            await s.emit(i)
            order.append(len(done))
        return order

    assert asyncio.run(main()) == [2, 3]
