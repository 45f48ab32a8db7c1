"""A partition the Kafka client stopped fetching: found, and assigned again.

After a broker restart, librdkafka can leave an assigned partition without
fetches for good: its records are neither read nor lost, the source just
stops moving on that partition (the whole group's offset for it stays where
it was), and nothing is logged.  Recreating the consumer is what users of
the client are told to do; assigning the partition again at the source's
own next offset does the same for one partition.

:class:`FetchWatch` finds such a partition.  Every :data:`CHECK_EVERY`
seconds the source's loop hands it the next offset of every partition it
reads; a partition whose offset has not moved for :data:`STALL_AFTER`
seconds is looked up (in a thread): its latest offset asked from the broker
(never the consumer's cache, which a partition without fetches does not
update) and the consumer's own position in it.  When the broker holds
offsets past that position, the partition is assigned again at the
source's offset (and resumed).

The consumer's position counts the markers that end transactions (never
delivered), so the end of a transactional topic is no stall.  Records a
consumer skips for other reasons (an aborted transaction's, with
``isolation.level=read_committed``) might look like one: a partition is
assigned again at most once per pair of offsets, that is logged at INFO,
and only a partition that then delivers records at once gets a WARNING
saying that it had stopped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["CHECK_EVERY", "STALL_AFTER", "FetchWatch"]

logger = logging.getLogger(__name__)

TP = tuple[str, int]

#: seconds without a record from a partition before the broker is asked about it
STALL_AFTER = 30.0
#: seconds between two looks at the partitions' offsets
CHECK_EVERY = 5.0
#: seconds the broker has to answer one offset look-up
ASK_TIMEOUT = 5.0
#: a partition that delivers records within this many seconds of being assigned
#: again had stopped (a WARNING says so)
RECOVERED_WITHIN = 10.0


class FetchWatch:
    """Partitions without records although the broker has some (see the module docs)."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: per partition: its next offset at the last look, and since when it has not moved
        self._seen: dict[TP, tuple[int, float]] = {}
        #: when the broker was last asked about a partition
        self._asked: dict[TP, float] = {}
        #: per partition assigned again: (next offset, broker's latest offset, when)
        self._tried: dict[TP, tuple[int, int, float]] = {}
        self._check_at = 0.0
        self._asking: asyncio.Future[dict[TP, tuple[int, int]]] | None = None
        self._asked_for: dict[TP, int] = {}
        #: set while no look-up is on the consumer (closing the consumer waits for it)
        self._idle_event = threading.Event()
        self._idle_event.set()
        self._stopping = False
        #: how many look-ups were started (for tests and the curious)
        self.lookups = 0

    def due(self) -> bool:
        """Whether :meth:`check` has something to do (a look is due, or a look-up answered)."""
        asking = self._asking
        if asking is not None:
            return asking.done()
        return time.monotonic() >= self._check_at

    def check(self, consumer: Any, offsets: Mapping[TP, int]) -> list[tuple[TP, int]]:
        """Partitions to assign again now, each with its offset; starts a look-up when due.

        Called from the source's loop between two reads (the consumer is then
        free for the re-assignment); never waits for the broker.
        """
        again = self._answered(offsets)
        now = time.monotonic()
        if now < self._check_at or self._asking is not None:
            return again
        self._check_at = now + CHECK_EVERY
        idle = self._idle(offsets, now)
        if idle:
            for tp in idle:
                self._asked[tp] = now
            self._asked_for = idle
            self._idle_event.clear()
            self._stopping = False
            self.lookups += 1
            loop = asyncio.get_running_loop()
            try:
                self._asking = loop.run_in_executor(None, self._look_up, consumer, list(idle))
            except BaseException:
                self._idle_event.set()
                raise
        return again

    def _idle(self, offsets: Mapping[TP, int], now: float) -> dict[TP, int]:
        """Partitions whose offset has not moved for STALL_AFTER s (each asked once per period)."""
        idle: dict[TP, int] = {}
        for tp, offset in offsets.items():
            seen = self._seen.get(tp)
            if seen is None or seen[0] != offset:
                self._seen[tp] = (offset, now)
                self._moved(tp, offset, now)
                continue
            if (
                now - seen[1] >= STALL_AFTER
                and now - self._asked.get(tp, -STALL_AFTER) >= STALL_AFTER
            ):
                idle[tp] = offset
        for tp in [tp for tp in self._seen if tp not in offsets]:
            del self._seen[tp]  # no longer read
        return idle

    def _moved(self, tp: TP, offset: int, now: float) -> None:
        """A partition delivered records: say so if it had been assigned again just before."""
        tried = self._tried.pop(tp, None)
        if tried is None:
            return
        start, latest, when = tried
        if now - when <= RECOVERED_WITHIN:
            logger.warning(
                "%s: topic %r partition %d delivered no record for %.0f s although it ended at "
                "offset %d on the broker: the Kafka client had stopped fetching it; assigned "
                "again at offset %d, it reads again (now at %d)",
                self.name,
                tp[0],
                tp[1],
                STALL_AFTER,
                latest,
                start,
                offset,
            )

    def _answered(self, offsets: Mapping[TP, int]) -> list[tuple[TP, int]]:
        """The partitions a finished look-up found without fetches."""
        asking = self._asking
        if asking is None or not asking.done():
            return []
        self._asking = None
        asked, self._asked_for = self._asked_for, {}
        latest = asking.result()
        again: list[tuple[TP, int]] = []
        now = time.monotonic()
        for tp, start in asked.items():
            found = latest.get(tp)
            if found is None or offsets.get(tp) != start:
                continue  # unknown, or moved meanwhile
            position, high = found
            if high <= max(start, position):
                continue  # at its end
            tried = self._tried.get(tp)
            if tried is not None and tried[:2] == (start, high):
                continue  # assigned again already for this very state (a marker at the end)
            self._tried[tp] = (start, high, now)
            logger.info(
                "%s: no record from topic %r partition %d for %.0f s although it ends at offset "
                "%d on the broker: assigning it again at offset %d",
                self.name,
                tp[0],
                tp[1],
                STALL_AFTER,
                high,
                start,
            )
            again.append((tp, start))
        return again

    def _look_up(self, consumer: Any, parts: list[TP]) -> dict[TP, tuple[int, int]]:
        """Each partition's consumer position and latest offset on the broker (runs in a thread)."""
        import confluent_kafka as ck

        out: dict[TP, tuple[int, int]] = {}
        try:
            for t, p in parts:
                if self._stopping:
                    break
                try:
                    _, high = consumer.get_watermark_offsets(
                        ck.TopicPartition(t, p), timeout=ASK_TIMEOUT, cached=False
                    )
                    (at,) = consumer.position([ck.TopicPartition(t, p)])
                except Exception as e:  # unreachable broker: asked again later
                    logger.debug("%s: offsets of %s[%d]: %s", self.name, t, p, e)
                    continue
                if high is not None and high >= 0:
                    out[(t, p)] = (int(at.offset), int(high))
        finally:
            self._idle_event.set()
        return out

    def join(self, timeout: float = ASK_TIMEOUT + 1.0) -> bool:
        """Stop looking and wait until no look-up is on the consumer.  False if one still is."""
        self._stopping = True
        return self._idle_event.wait(timeout)
