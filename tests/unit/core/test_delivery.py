"""A synchronous emit waits for nodes that pass records on after their update returned."""

from __future__ import annotations

import asyncio
from typing import Any

from rivermark import Stream
from rivermark.core import runtime
from rivermark.core.refs import Metadata
from rivermark.execution import delivery, plan


class Later(Stream):
    """Passes each record on a few loop turns after ``update`` returned (as Dask's gather does)."""

    _is_async = True

    def __init__(self, upstream: Stream, turns: int = 5) -> None:
        self.turns = turns
        self.accepted = 0
        self.delivered = 0
        self._changed: asyncio.Event | None = None
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        self.accepted += 1
        asyncio.get_running_loop().create_task(self._pass_on(x))

    async def _pass_on(self, x: Any) -> None:
        for _ in range(self.turns):
            await asyncio.sleep(0)
        self._emit(x)
        self.delivered += 1
        if self._changed is not None:
            self._changed.set()

    def accepted_count(self) -> int:
        return self.accepted

    async def wait_delivered(self, count: int) -> None:
        while self.delivered < count:
            self._changed = asyncio.Event()
            await self._changed.wait()


def test_sync_emit_waits_for_a_deferred_node_below() -> None:
    source = Stream()
    later = Later(source.map(lambda x: x + 1), turns=20)
    out = later.sink_to_list()
    assert isinstance(later, delivery.DeferredDelivery)
    for i in range(5):
        source.emit(i)
        assert out == list(range(1, i + 2))  # passed on before emit returned
    assert plan.plan_of(source).deferred(source) == (later,)


def test_awaited_emit_on_the_loop_waits_too() -> None:
    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        out = Later(source, turns=20).sink_to_list()
        for i in range(3):
            await source.emit(i)
            assert out == list(range(i + 1))
        return out

    assert asyncio.run(main()) == [0, 1, 2]


def test_a_record_held_on_the_way_is_not_waited_for() -> None:
    # a buffer-like node between holds the record: the emit does not wait for it (as streamz)
    loop = runtime.background_loop()
    source = Stream(loop=loop)
    gate = asyncio.Event()
    held: list[Any] = []

    class Hold(Stream):
        _is_async = True

        def update(
            self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
        ) -> None:
            held.append(x)

            async def release() -> None:
                await gate.wait()
                self._emit(x)

            asyncio.get_running_loop().create_task(release())

    hold = Hold(source, loop=loop)
    later = Later(hold)
    out = later.sink_to_list()
    source.emit(1)
    assert held == [1] and out == [] and later.accepted == 0
    loop.call_soon_threadsafe(gate.set)
    runtime.run_sync(loop, later.wait_delivered(1), timeout=30)
    assert out == [1]


def test_graphs_without_deferred_nodes_find_none() -> None:
    sync = Stream()
    sync.map(str).sink_to_list()
    found = plan.plan_of(sync)
    assert found.loop_below(sync) is None and found.deferred(sync) == ()
    timed = Stream()
    timed.delay(0.001).sink_to_list()
    found = plan.plan_of(timed)
    assert found.loop_below(timed) is not None and found.deferred(timed) == ()
