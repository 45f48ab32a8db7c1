"""Which offsets may be committed: the contiguous completed prefix per partition.

Batches (offset ranges) finish out of order when the pipeline has concurrency
downstream.  Committing the end of a batch that finished early would skip a
batch still in flight if the process died, so the tracker only moves a
partition's committable offset over ranges that are finished *and* preceded
by finished ranges.

>>> t = OffsetTracker()
>>> t.started("t", 0, 0, 10); t.started("t", 0, 10, 20)
>>> t.finished("t", 0, 10, 20)   # the later batch finishes first
>>> t.committable()
{}
>>> t.finished("t", 0, 0, 10)
>>> t.committable()
{('t', 0): 20}
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

__all__ = ["OffsetTracker"]

TP = tuple[str, int]


@dataclass
class _Partition:
    # next offset after the completed prefix (None: nothing started)
    low: int | None = None
    # ranges in emission order, start -> [end, finished]
    pending: dict[int, list[int]] = field(default_factory=dict)
    # value last handed out by committable() (to report only changes)
    reported: int | None = None


class OffsetTracker:
    """Track offset ranges ``[start, end)`` per (topic, partition).

    ``started`` registers a range when it is emitted, ``finished`` when its
    completion callback fires.  ``committable()`` returns, for every
    partition whose contiguous completed prefix moved since the last call,
    the next offset to commit (Kafka's convention: the offset of the next
    record to read).

    >>> t = OffsetTracker()
    >>> t.started("a", 1, 5, 6); t.finished("a", 1, 5, 6); t.committable()
    {('a', 1): 6}
    >>> t.committable()  # nothing new
    {}
    """

    def __init__(self) -> None:
        self._parts: dict[TP, _Partition] = {}

    def reset(self, topic: str, partition: int, offset: int) -> None:
        """Forget a partition's ranges and start its prefix at ``offset`` (after a seek)."""
        self._parts[(topic, partition)] = _Partition(low=offset, reported=offset)

    def started(self, topic: str, partition: int, start: int, end: int) -> None:
        """Register the in-flight range ``[start, end)``."""
        if end <= start:
            raise ValueError(f"OffsetTracker: empty range [{start!r}, {end!r})")
        p = self._parts.setdefault((topic, partition), _Partition())
        if p.low is None:
            p.low = start
            p.reported = start
        p.pending[start] = [end, 0]

    def finished(self, topic: str, partition: int, start: int, end: int) -> None:
        """Mark ``[start, end)`` as completed (downstream fully done with it)."""
        p = self._parts.get((topic, partition))
        entry = None if p is None else p.pending.get(start)
        if p is None or entry is None or entry[0] != end:
            logger.debug(
                "OffsetTracker: ignoring unknown range %s[%s] %s-%s", topic, partition, start, end
            )
            return
        entry[1] = 1
        # emission order, not offset arithmetic: offsets may have gaps
        # (transaction markers, compaction), so a range's successor is the next
        # range emitted for the partition
        while p.pending:
            first = next(iter(p.pending))
            e, fin = p.pending[first]
            if not fin:
                break
            del p.pending[first]
            p.low = e

    def in_flight(self) -> int:
        """How many ranges are emitted but not finished."""
        return sum(1 for p in self._parts.values() for _, fin in p.pending.values() if not fin)

    def committable(self) -> dict[TP, int]:
        """Partitions whose committable offset advanced since the last call."""
        out: dict[TP, int] = {}
        for tp, p in self._parts.items():
            if p.low is not None and p.low != p.reported:
                out[tp] = p.low
                p.reported = p.low
        return out

    def low_watermark(self, topic: str, partition: int) -> int | None:
        """The current committable offset of one partition (None if unknown)."""
        p = self._parts.get((topic, partition))
        return None if p is None else p.low
