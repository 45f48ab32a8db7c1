"""Waiting for Kafka records without holding the event loop and without sleeping.

A Kafka source reads what the consumer already holds with
``consume(timeout=0)`` on the event loop.  Only when nothing is there does it
wait, in a thread of its own (:class:`RecordWaiter`), inside librdkafka:
``poll(wait)`` for a source of single records (it returns as soon as one
arrives), ``consume(n, wait)`` for a batched source (it returns when ``n``
records arrived or ``wait`` passed, as streamz's ``poll_interval`` does).  The
loop runs other work meanwhile, and a record that arrives is handed on at once
instead of after a sleep.

Only one call runs on the consumer at a time: while the thread waits, the
source holds back the calls it would make on the loop (offset commits queue
up and follow the wait), and closing the consumer first waits for the thread
(each wait lasts at most :data:`MAX_WAIT` seconds).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["MAX_WAIT", "RecordWaiter"]

#: the longest one wait inside librdkafka lasts (seconds): a stop waits at most this long
MAX_WAIT = 0.25


class RecordWaiter:
    """One thread that waits for a consumer's next records (see the module docs).

    ``wait_s`` is how long one wait lasts (the source's ``poll_interval``,
    at most :data:`MAX_WAIT`; 0 turns the loop once instead); ``single``
    returns after the first record.
    """

    def __init__(self, name: str, wait_s: float, single: bool) -> None:
        self.name = name
        self.wait_s = min(max(float(wait_s), 0.0), MAX_WAIT)
        self.single = single
        self._pool: ThreadPoolExecutor | None = None
        #: set while no call of the thread is on the consumer
        self.idle = threading.Event()
        self.idle.set()

    @property
    def busy(self) -> bool:
        """Whether the thread is inside a call on the consumer."""
        return not self.idle.is_set()

    def _call(self, consumer: Any, n: int) -> list[Any]:
        try:
            if self.single:
                m = consumer.poll(self.wait_s)
                return [] if m is None else [m]
            return list(consumer.consume(num_messages=n, timeout=self.wait_s))
        finally:
            self.idle.set()

    async def wait(self, consumer: Any, n: int) -> list[Any]:
        """The records that arrive within one wait (an empty list if none did)."""
        if self.wait_s <= 0:
            await asyncio.sleep(0)
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"rivermark-wait-{self.name}")
        self.idle.clear()
        try:
            fut = asyncio.get_running_loop().run_in_executor(self._pool, self._call, consumer, n)
        except BaseException:
            self.idle.set()
            raise
        return await fut

    def join(self, timeout: float = MAX_WAIT + 1.0) -> bool:
        """Wait until the thread left the consumer; release the thread.  False if it did not."""
        done = self.idle.wait(timeout)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        return done
