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
        assert fired == [] and written == [] and node._inflight == 1
        release.set()
        await asyncio.gather(*results)
        assert fired == [1] and written == ["x"] and node._inflight == 0
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
