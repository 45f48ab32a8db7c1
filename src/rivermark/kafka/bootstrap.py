"""Reading a Kafka source to the end its partitions have at start (a table's bootstrap).

A table built with ``to_table(..., bootstrap=True)`` asks the job to read
the sources of its changes to their end before the job's other sources
start.  A Kafka source takes part through
:class:`~rivermark.core.contracts.ReadsToEnd`, whose members
:class:`CatchUp` gives it:

* :meth:`CatchUp.mark_end`: once its partitions are assigned (after
  ``prepare``, fresh or restored), the source notes each assigned
  partition's high watermark now (for a compacted topic, the log's end);
* :meth:`CatchUp.check_caught_up`: its run loop looks, between two reads
  from the consumer, whether every such partition's next offset has reached
  that end; the consumer's own position counts too, since a transaction
  marker or a compacted-away record occupies an offset no record is read at.
  A partition that is empty, or whose start is already at its end (a
  restore that had read it all), is caught up at once.

A record is counted as read only once it was emitted and processed (the
emit awaits the graph), so a join's other side never starts before the
table holds every change written before the job started.  Partitions that
appear after the start are read as usual, not waited for.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rivermark.kafka.assignment import PartitionAssignment

logger = logging.getLogger(__name__)

__all__ = ["CatchUp"]


class CatchUp:
    """The :class:`~rivermark.core.contracts.ReadsToEnd` members of a Kafka source (a mixin).

    The source provides ``partitions``, ``consumer``, ``records_emitted``,
    ``finished`` and ``display_name()``; its run loop calls
    :meth:`check_caught_up` where no call on the consumer is in progress.
    """

    partitions: PartitionAssignment
    consumer: Any
    records_emitted: int
    finished: bool

    #: ``{(topic, partition): end offset}`` noted by :meth:`mark_end` (None: no bootstrap)
    catch_up_end: dict[tuple[str, int], int] | None = None
    _caught_up = False

    def display_name(self) -> str:
        raise NotImplementedError  # the source's (a Stream's)

    async def mark_end(self) -> None:
        """Note every assigned partition's end offset now (blocking calls, in a thread)."""
        loop = asyncio.get_running_loop()
        ends = await loop.run_in_executor(None, self._end_offsets)
        self._caught_up = False
        self.catch_up_end = ends
        logger.info(
            "%s: bootstrap: reading up to %s",
            self.display_name(),
            {f"{t}:{p}": end for (t, p), end in sorted(ends.items())},
        )
        self.check_caught_up()

    def _end_offsets(self) -> dict[tuple[str, int], int]:
        import confluent_kafka as ck

        out: dict[tuple[str, int], int] = {}
        for t, p in sorted(self.partitions.assigned):
            _, high = self.consumer.get_watermark_offsets(ck.TopicPartition(t, p), timeout=10)
            out[(t, p)] = int(high)
        return out

    def caught_up(self) -> bool:
        """Every partition read to the end :meth:`mark_end` noted (or the source ended)."""
        return self._caught_up or self.finished

    def records_read(self) -> int:
        return self.records_emitted

    def check_caught_up(self) -> None:
        """Between two reads: whether every noted partition has reached its end offset."""
        ends = self.catch_up_end
        if ends is None or self._caught_up:
            return
        offsets = self.partitions.offsets
        behind = [(t, p) for (t, p), end in ends.items() if offsets.get(f"{t}:{p}", -1) < end]
        if behind and self.consumer is not None:
            import confluent_kafka as ck

            where = self.consumer.position([ck.TopicPartition(t, p) for t, p in behind])
            behind = [
                (w.topic, w.partition) for w in where if w.offset < ends[(w.topic, w.partition)]
            ]
        if not behind:
            self._caught_up = True
            logger.info("%s: bootstrap: every partition read to its end", self.display_name())
