"""``Stream.from_periodic``: emit what a callback returns, on a timer."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream, check_callable
from rivermark.core.timeutil import parse_interval
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["FromPeriodic"]


@Stream.register_api(staticmethod, attribute_name="from_periodic")
class FromPeriodic(Source[int]):
    """Call ``callback()`` every ``poll_interval`` and emit its return value.

    ``callback`` may be a coroutine function.  The first call happens at
    once after ``start()``; with ``wait_first=True`` (a rivermark addition,
    used by ``PeriodicDataFrame``) one ``poll_interval`` later.  The source
    cannot replay (``replayable = False``); its position is the number of
    values emitted.

    >>> from rivermark.testing import wait_for
    >>> count = iter(range(100))
    >>> source = Stream.from_periodic(lambda: next(count), poll_interval="1ms")
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: len(L) >= 3); source.stop()
    >>> L[:3]
    [0, 1, 2]
    """

    def __init__(
        self,
        callback: Callable[[], Any],
        poll_interval: Any = 0.1,
        wait_first: bool = False,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        check_callable("from_periodic", "callback", callback)
        self.callback = callback
        self.poll_interval = parse_interval(poll_interval, "from_periodic", "poll_interval")
        self.wait_first = bool(wait_first)
        super().__init__(**kwargs)
        self._position = 0

    async def run(self) -> None:
        if self.wait_first:
            await asyncio.sleep(self.poll_interval)
        while not self.stopped:
            try:
                x = self.callback()
                if inspect.isawaitable(x):
                    x = await x
            except Exception as e:
                self._user_error(None, e, self.callback)
            else:
                await self._emit_record(x, next_position=(self._position or 0) + 1)
            if self.stopped:
                break
            await asyncio.sleep(self.poll_interval)

    def state_signature(self) -> str:
        return "FromPeriodic()"
