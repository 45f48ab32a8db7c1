"""Event times and watermarks: the time convention and the per-partition watermark.

Event times are **epoch seconds as a float** (seconds since 1970-01-01 UTC).
A record's time may be given as an ``int``/``float`` of epoch seconds (numpy's
integer and floating scalars too, as pandas hands them out: an integer is
taken exactly, as a Python ``int`` would be) or as a timezone-aware
:class:`datetime.datetime` (a ``pandas.Timestamp`` with a timezone is one,
to the nanosecond), which is converted by whole seconds and the exact
fraction after them (:func:`~rivermark.core.timeutil.epoch_seconds`, as a
DataFrame's time column is); a naive datetime, a string, ``None``,
``NaN`` or anything else is refused with a :class:`TypeError` or
:class:`ValueError` naming what was given (the node's error policy decides
what happens to the record).

The watermark of a :class:`WatermarkTracker` is the minimum, over the input
partitions that are not idle, of ``largest time seen in the partition -
max_delay``; it starts at ``-inf``, never goes backwards, and is ``+inf``
after :meth:`WatermarkTracker.end`.  A partition that has received nothing
for ``idle_timeout`` seconds (wall clock) is left out of the minimum until
its next record.  A partition the input is known to read
(:meth:`WatermarkTracker.expect`) holds the watermark at ``-inf`` until its
first record.

A record is judged (late or not) against the larger of that watermark and
its own partition's (its partition's largest time, itself included, minus
``max_delay``): whether a record is late then depends on the records of its
own partition alone, not on how the partitions were interleaved.

>>> w = WatermarkTracker(max_delay=5.0)
>>> w.observe("p0", 100.0), w.observe("p1", 110.0), w.observe("p0", 120.0)
(95.0, 105.0, 115.0)
>>> w.watermark
105.0
>>> to_epoch(dt.datetime(1970, 1, 1, 0, 1, tzinfo=dt.timezone.utc))
60.0
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import numbers
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from rivermark.core.timeutil import epoch_seconds

logger = logging.getLogger(__name__)

__all__ = ["to_epoch", "WatermarkTracker"]

NEG_INF = -math.inf
POS_INF = math.inf


def to_epoch(value: object) -> float:
    """``value`` (epoch seconds or a timezone-aware datetime) as epoch seconds.

    >>> to_epoch(12), to_epoch(1.5)
    (12.0, 1.5)
    >>> to_epoch(dt.datetime(2024, 1, 1))
    Traceback (most recent call last):
    ...
    TypeError: event time: a naive datetime (2024-01-01 00:00:00) has no timezone; give it one (tzinfo=datetime.timezone.utc) or return epoch seconds
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        # numpy's scalars are numbers too (an integer one exactly, through int)
        seconds = float(int(value)) if isinstance(value, numbers.Integral) else float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"event time: {value!r} is not a finite number of epoch seconds")
        return seconds
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise TypeError(
                f"event time: a naive datetime ({value}) has no timezone; give it one "
                "(tzinfo=datetime.timezone.utc) or return epoch seconds"
            )
        delta = value - _EPOCH  # a pandas.Timestamp's is a pandas.Timedelta, to the ns
        # optional: a pandas Timedelta has nanoseconds, a datetime.timedelta not
        nanos = delta.microseconds * 1000 + getattr(delta, "nanoseconds", 0)
        return float(epoch_seconds(delta.days * 86400 + delta.seconds, nanos))
    raise TypeError(
        f"event time: expected epoch seconds (a number) or a timezone-aware datetime, "
        f"got {type(value).__name__} {value!r}"
    )


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class WatermarkTracker:
    """The watermark of several input partitions (see the module docs).

    ``clock`` gives the wall-clock seconds used for idleness only (a test may
    pass its own).  The state (:meth:`get_state`) is the largest time seen
    per partition and the watermark; idleness restarts from the restore.
    """

    def __init__(
        self,
        max_delay: float = 0.0,
        idle_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_delay = max_delay
        self.idle_timeout = idle_timeout
        self.clock = clock
        #: the largest event time seen per partition
        self.largest: dict[Any, float] = {}
        #: wall-clock time of each partition's last record (idleness only)
        self._last_seen: dict[Any, float] = {}
        self.watermark = NEG_INF

    def observe(self, partition: object, seconds: float) -> float:
        """Note a record of ``partition`` at ``seconds``; return what it is judged against.

        That is the larger of the watermark after the record (:attr:`watermark`)
        and the record's own partition's watermark (see the module docs).
        """
        largest = self.largest
        before = largest.get(partition)
        if self.idle_timeout is not None:
            self._last_seen[partition] = self.clock()
        elif before is not None and seconds <= before:
            # nothing that the minimum depends on changed
            own, mark = before - self.max_delay, self.watermark
            return own if own > mark else mark
        if before is None or seconds > before:
            largest[partition] = seconds
        elif before is not None:
            seconds = before
        if len(largest) == 1 and self.idle_timeout is None:
            candidate = seconds - self.max_delay  # one partition: its own watermark
            if candidate > self.watermark:
                self.watermark = candidate
            return self.watermark
        mark = self._recompute()
        own = seconds - self.max_delay
        return own if own > mark else mark

    def expect(self, partitions: Iterable[Hashable]) -> None:
        """The input reads ``partitions``: each holds the watermark until its first record.

        Without it a partition counts from its first record, so one that
        starts late (a backfill hands over one partition's records before
        another's) could find windows closed by the others.  An expected
        partition is at ``-inf`` until then, or until it is idle for
        ``idle_timeout``.  Partitions already known keep what they have.
        """
        now = self.clock() if self.idle_timeout is not None else None
        for p in partitions:
            if p not in self.largest:
                self.largest[p] = NEG_INF
                if now is not None:
                    self._last_seen[p] = now

    def _recompute(self) -> float:
        largest = self.largest
        if self.idle_timeout is None:
            low = min(largest.values())
        else:
            cutoff = self.clock() - self.idle_timeout
            seen = self._last_seen
            active = [v for p, v in largest.items() if seen.get(p, cutoff) > cutoff]
            # every partition idle: the most recent one still holds the watermark
            low = min(active) if active else max(largest.values())
        candidate = low - self.max_delay
        if candidate > self.watermark:
            self.watermark = candidate
        return self.watermark

    def low_of_others(self, partition: object) -> float:
        """The smallest largest time of the partitions other than ``partition`` that count now.

        ``+inf`` when there is none.  A partition idle for ``idle_timeout`` does
        not count.  With it, the watermark of a run of records of
        ``partition`` (a DataFrame batch) is, record by record,
        ``min(largest so far in partition, low_of_others) - max_delay``, never
        below the watermark before the run; :meth:`observe_run` records it.

        >>> w = WatermarkTracker(max_delay=1.0)
        >>> w.observe("p0", 10.0), w.observe("p1", 20.0), w.watermark
        (9.0, 19.0, 9.0)
        >>> w.low_of_others("p0"), w.low_of_others("p1"), w.low_of_others("p2")
        (20.0, 10.0, 10.0)
        """
        largest = self.largest
        if self.idle_timeout is None:
            return min((v for p, v in largest.items() if p != partition), default=math.inf)
        cutoff = self.clock() - self.idle_timeout
        seen = self._last_seen
        return min(
            (v for p, v in largest.items() if p != partition and seen.get(p, cutoff) > cutoff),
            default=math.inf,
        )

    def observe_run(self, partition: object, largest: float, watermark: float) -> float:
        """A run of records of ``partition`` whose largest time is ``largest`` moved the
        watermark to ``watermark`` (computed by the caller, see :meth:`low_of_others`).

        Returns the watermark after the run (it never goes backwards).
        """
        before = self.largest.get(partition)
        if before is None or largest > before:
            self.largest[partition] = largest
        if self.idle_timeout is not None:
            self._last_seen[partition] = self.clock()
        if watermark > self.watermark:
            self.watermark = watermark
        return self.watermark

    def partition_watermarks(self) -> dict[Any, float]:
        """Each partition's own watermark (its largest time minus ``max_delay``).

        Safe to call from another thread while records are observed (a
        reading taken in the middle of a change is taken again).
        """
        for _ in range(100):
            try:
                return {p: v - self.max_delay for p, v in list(self.largest.items())}
            except RuntimeError:  # the dict changed size while copied: read it again
                continue
        return {}

    def end(self, at: float = math.inf) -> float:
        """The end of the input: the watermark becomes ``at`` (``+inf``; never goes back)."""
        self.watermark = max(self.watermark, at)
        return self.watermark

    def get_state(self) -> dict[str, object]:
        return {"largest": dict(self.largest), "watermark": self.watermark}

    def set_state(self, state: dict[str, Any]) -> None:
        self.largest = dict(state["largest"])
        now = self.clock()
        self._last_seen = dict.fromkeys(self.largest, now)
        self.watermark = float(state["watermark"])
