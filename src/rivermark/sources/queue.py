"""``Stream.from_q``: emit what other threads put into a ``queue.Queue``."""

from __future__ import annotations

import asyncio
import logging
import queue
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["FromQ"]


@Stream.register_api(staticmethod, attribute_name="from_q")
class FromQ(Source[int]):
    """Emit every item put into ``q`` (a ``queue.Queue``-like object).

    The queue is polled: when it is empty the source sleeps ``sleep_time``
    seconds.  It cannot replay; its position is the number of items emitted.

    >>> import queue
    >>> from rivermark.testing import wait_for
    >>> q = queue.Queue()
    >>> source = Stream.from_q(q, sleep_time=0.001)
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> q.put("a"); q.put("b")
    >>> wait_for(lambda: len(L) == 2); source.stop(); L
    ['a', 'b']
    """

    def __init__(self, q: Any, sleep_time: Any = 0.01, **kwargs: Unpack[NodeOptions]) -> None:
        # optional: checks that the user passed a queue at all
        if not callable(getattr(q, "get_nowait", None)):
            raise ConfigurationError(
                f"from_q: q must be a queue.Queue-like object with get_nowait(), got {q!r}; "
                "pass e.g. queue.Queue()"
            )
        self.q = q
        self.sleep_time = parse_interval(sleep_time, "from_q", "sleep_time")
        super().__init__(**kwargs)
        self._position = 0

    async def run(self) -> None:
        while not self.stopped:
            try:
                x = self.q.get_nowait()
            except queue.Empty:
                await asyncio.sleep(self.sleep_time)
                continue
            await self._emit_record(x, next_position=(self._position or 0) + 1)
            await asyncio.sleep(0)

    def state_signature(self) -> str:
        return "FromQ()"
