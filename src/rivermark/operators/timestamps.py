"""``timestamps``: each record's event time, and the watermark of the input.

:class:`Timestamps` is the event-time clock of the nodes below it: the
windows of :mod:`rivermark.operators.eventtime`, the joins by time
(:mod:`rivermark.operators.timejoins`, :mod:`~rivermark.operators.intervaljoin`,
:mod:`~rivermark.operators.windowjoin`) and ``keyed_process`` timers; each
finds it with :func:`attach` and acts when it moves (:class:`WatermarkClient`).
See ``docs/event-time.md``.

>>> s = Stream()
>>> t = s.timestamps(lambda r: r[0], max_delay=2)
>>> s.emit((10, "a")); s.emit((7, "b")); t.watermark
8.0
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Protocol, Unpack

from rivermark.core.naming import function_name
from rivermark.core.node import Fixed, NodeOptions, Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.execution.steps import step
from rivermark.operators.watermarks import NEG_INF, POS_INF, WatermarkTracker, to_epoch

logger = logging.getLogger(__name__)

__all__ = ["Timestamps", "WatermarkClient", "attach"]

Results = list[Awaitable[object]] | None


def _merge(a: Results, b: Results) -> Results:
    if not b:
        return a
    if not a:
        return b
    return [*a, *b]


def _fname(func: object) -> str:
    return function_name(func)


def _partition_of(metadata: Metadata | None) -> object:
    """The input partition a record comes from: its Kafka ``(topic, partition)``, else one."""
    if metadata:
        m = metadata[0]
        if "partition" in m:
            return (m.get("topic"), m["partition"])
    return None


def _source_time(metadata: Metadata | None) -> object:
    """The time the source recorded for a record (``from_kafka(..., timestamps=True)``)."""
    if metadata:
        for m in metadata:
            t = m.get("timestamp")
            if t is not None:
                return t
    raise ValueError(
        "timestamps: the record carries no source timestamp; read it with "
        "from_kafka(..., timestamps=True) (a Kafka record without a timestamp has none), "
        "or pass func=lambda record: <its time>"
    )


#: seconds ahead of the wall clock beyond which a time is warned about (without max_future)
FAR_AHEAD = 86400.0


def _ahead_of(ts: float, now: float) -> str:
    """How far ``ts`` is ahead of ``now``, in words (``"2 days"``, ``"1,700,000,000 years"``)."""
    seconds = ts - now
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("hours", 3600.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:,.0f} s"


def _delay(value: object, kind: str, arg: str) -> float:
    """A non-negative interval (0 allowed, unlike :func:`parse_interval`)."""
    if value == 0 and not isinstance(value, bool):
        return 0.0
    return parse_interval(value, kind, arg)


@Stream.register_api(attribute_name="timestamps")
class Timestamps(Stream):
    """Give each record its event time and keep the watermark of the input.

    ``func(record)`` returns the record's time: epoch seconds (``int`` or
    ``float``) or a timezone-aware ``datetime``.  A time that is missing or
    of another type (a ``KeyError`` in ``func``, a naive datetime, a string)
    goes through the node's error policy (``on_error``).  Records are passed
    on unchanged.  Without ``func`` the time is the one the source recorded
    with the record: the Kafka record timestamp of ``from_kafka(...,
    timestamps=True)`` (a record without one goes through ``on_error``).

    The watermark is, per input partition (a Kafka partition; any other
    source is one partition), the largest time seen minus ``max_delay``
    (seconds or a duration string, default 0), and over the partitions the
    minimum; a partition that received nothing for ``idle_timeout`` (wall
    clock) is left out of the minimum until its next record, and one the
    source announced (:meth:`expect_partitions`) holds it until its first.
    ``partition=func`` names each record's partition instead (records of
    several files joined by ``union``, say), and ``partitions=`` the
    partitions it will name, each holding the watermark until its first
    record.
    ``max_future`` (seconds or a duration string) refuses a time further
    ahead of the wall clock than that: the record goes through the error
    policy, and the watermark does not move (one such time, say milliseconds
    among seconds, would move it to the year 55,000 for good and make every
    later record late).  Without it, the first time more than a day ahead
    is logged as a WARNING naming the record.
    It never goes backwards.  A record is judged late against the larger of
    the watermark and its own partition's.  :meth:`end_of_input` (called by a :class:`~rivermark.Job`
    when every source is exhausted) makes it ``+inf``.

    >>> s = Stream()
    >>> t = s.timestamps(lambda r: r["ts"], max_delay="5s")
    >>> s.emit({"ts": 100}); s.emit({"ts": 90}); t.watermark
    95.0
    """

    _graphviz_shape = "cds"
    str_list = ["func", "max_delay"]
    #: whether each record is a DataFrame batch of rows with their own times
    #: (``rivermark.dataframe``'s ``sdf.timestamps(column)``)
    carries_frames = False
    #: one record out per record in, less those whose time was refused
    derived_out = True
    #: fixed when the node is created (a generated graph's code holds them as values)
    max_delay = Fixed()
    idle_timeout = Fixed()
    tracker = Fixed()

    def __init__(
        self,
        upstream: Stream,
        func: Callable[[Any], Any] | None = None,
        max_delay: Any = 0,
        idle_timeout: Any = None,
        partition: Callable[[Any], Hashable] | None = None,
        partitions: Iterable[Hashable] | None = None,
        max_future: Any = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        if func is not None:
            check_callable("timestamps", "func", func)
        if partition is not None:
            check_callable("timestamps", "partition", partition)
        elif partitions is not None:
            raise ConfigurationError(
                "timestamps: partitions= names the partitions that partition=func gives; "
                "pass partition=func too (Kafka sources announce their partitions themselves)"
            )
        self.func = func
        #: the partition of a record, when the user names it (else its Kafka partition)
        self.partition = partition
        self._max_delay = _delay(max_delay, "timestamps", "max_delay")
        self._idle_timeout = (
            None
            if idle_timeout is None
            else parse_interval(idle_timeout, "timestamps", "idle_timeout")
        )
        self._tracker = WatermarkTracker(self._max_delay, self._idle_timeout)
        #: a time more than this many seconds ahead of the wall clock is refused (None: warned)
        self.max_future = (
            None if max_future is None else _delay(max_future, "timestamps", "max_future")
        )
        #: the wall clock the times are compared with (a test may set its own)
        self.wall_clock: Callable[[], float] = time.time
        self._ahead = FAR_AHEAD if self.max_future is None else self.max_future
        #: the wall clock plus ``_ahead`` when last read: a time below it is fine
        self._far = -math.inf
        self._warned_far = False
        #: the event time of the record being passed on (read by the windows below)
        self.current = math.nan
        #: the watermark that record is judged against (moved by it already): the
        #: larger of the watermark and its own partition's (see :mod:`.watermarks`)
        self.record_watermark = -math.inf
        self._windows: list[WatermarkClient] = []
        #: the watermark at which the next window may close (none open: +inf)
        self.due = math.inf
        #: where the end of the input moves the watermark: ``+inf`` (every window is
        #: emitted); a replay up to a checkpoint sets the live run's watermark there
        self.end_watermark = math.inf
        if partitions is not None:
            self.tracker.expect(list(partitions))
        Stream.__init__(self, upstream, **kwargs)

    @property
    def watermark(self) -> float:
        """The current watermark (epoch seconds; ``-inf`` before the first record)."""
        return self._tracker.watermark

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        func = self.func
        partition = self.partition
        try:
            ts = _source_time(metadata) if func is None else func(x)
            if type(ts) is not float or not NEG_INF < ts < POS_INF:
                ts = to_epoch(ts)  # the conversions and the refusals
            if ts > self._far:
                self.check_future(x, ts)
        except Exception as e:
            self._user_error(x, e, func or "source timestamp")
            return None
        if partition is None:
            part = _partition_of(metadata) if metadata else None
        else:
            try:
                part = partition(x)
                hash(part)  # a partition that cannot be one is this record's error
            except Exception as e:
                self._user_error(x, e, partition)
                return None
        # the watermark moves first (what it closes, and the timers it fires, come
        # before this record, which it can never make late: it is at most ts - max_delay);
        # the record is judged against it or its own partition's, the larger
        tracker = self._tracker
        before = tracker.largest.get(part)
        if self._idle_timeout is None and before is not None and ts <= before:
            # WatermarkTracker.observe's first rule without its call (most records): below
            # its partition's largest time the watermark stays, and the record is judged
            # against its partition's watermark or the watermark, the larger
            watermark = tracker.watermark
            judge = before - self._max_delay
            if judge < watermark:
                judge = watermark
        else:
            judge = tracker.observe(part, ts)
            watermark = tracker.watermark
        if watermark >= self.due:
            closed = self._advance(watermark)
            if closed:  # windows closed by this record's watermark, still being passed on
                self.current = ts
                self.record_watermark = judge
                return _merge(closed, self._emit(x, metadata))
        self.current = ts
        self.record_watermark = judge
        return self._emit(x, metadata)

    def check_future(self, x: Any, ts: float) -> None:
        """A time far ahead of the wall clock: refused beyond ``max_future`` (``ValueError``,
        for the error policy), else warned about once (it moves the watermark for good)."""
        now = self.wall_clock()
        self._far = now + self._ahead
        if ts <= self._far:
            return
        ahead = _ahead_of(ts, now)
        if self.max_future is not None:
            raise ValueError(
                f"timestamps: event time {ts!r} is {ahead} ahead of the wall clock, beyond "
                f"max_future={self.max_future:g} s; it would move the watermark there for good "
                "and make every later record late (a time in milliseconds? return seconds)"
            )
        if not self._warned_far:
            self._warned_far = True
            logger.warning(
                "%s: event time %r of record %.200r is %s ahead of the wall clock; the "
                "watermark moves there for good and every later record with a present time "
                "will be late (a time in milliseconds? return seconds). Pass "
                "max_future= (e.g. '1h') to send such records through on_error instead",
                self.display_name(),
                ts,
                x,
                ahead,
            )

    def _advance(self, watermark: float) -> Results:
        windows = self._windows
        if len(windows) == 1:  # one client (a table's join, say): no merge, no min
            client = windows[0]
            closed = client.close_until(watermark)
            self.due = client.next_due()
            return closed if closed else None
        results: Results = None
        due = math.inf
        for w in windows:
            results = _merge(results, w.close_until(watermark))
            due = min(due, w.next_due())
        self.due = due
        return results

    def add_client(self, client: WatermarkClient) -> None:
        """Have ``client`` act when the watermark moves (a window, a timer, a join).

        The clock calls ``client.close_until(watermark)`` once the watermark
        reaches the smallest ``next_due()`` of its clients (or the time a
        client asked for with :meth:`wake_at`), then asks each for its next.
        """
        self._windows.append(client)

    def wake_at(self, watermark: float) -> None:
        """A client holds something due when the watermark reaches ``watermark``."""
        if watermark < self.due:
            self.due = watermark

    def recheck(self) -> None:
        """A client's held state was restored: the next record asks every client what is due."""
        self.due = -math.inf

    def end_of_input(self) -> Results:
        """The input is complete: the watermark becomes ``+inf`` and every window is emitted.

        With :attr:`end_watermark` set (a replay up to a checkpoint), the
        watermark moves to it instead, and the windows the live run still
        held open there stay open.
        """
        return self._advance(self.tracker.end(self.end_watermark))

    def expect_partitions(self, partitions: Iterable[Hashable]) -> None:
        """The input reads ``partitions`` (``(topic, partition)`` pairs): each holds the
        watermark until its first record, or until it is idle for ``idle_timeout``.

        A Kafka source tells the nodes below it when it is assigned partitions,
        so that the windows of a backfill, which may hand over one partition's
        records before another's first, are those of a live read.
        """
        self.tracker.expect(partitions)

    def partition_watermarks(self) -> dict[str, float]:
        """The watermark of each input partition seen: ``"topic:partition"`` (``""`` for a
        source of one partition) -> epoch seconds (read by the metrics, from any thread)."""
        return {
            "" if p is None else ":".join(map(str, p)): v
            for p, v in self.tracker.partition_watermarks().items()
        }

    def get_state(self) -> object:
        return {"watermarks": self.tracker.get_state()}

    def set_state(self, state: Any) -> None:
        self.tracker.set_state(state["watermarks"])
        self.due = -math.inf  # the windows' own restores set it; the next record looks again

    def state_signature(self) -> str:
        func = "source timestamp" if self.func is None else _fname(self.func)
        part = "" if self.partition is None else f", partition={_fname(self.partition)}"
        return f"Timestamps(func={func}, max_delay={self.max_delay}{part})"


class WatermarkClient(Protocol):
    """A node below :class:`Timestamps` that acts when the watermark moves (windows, timers)."""

    def close_until(self, watermark: float) -> Results:
        """Emit what is due at ``watermark``; return what ``_emit`` returned."""
        ...

    def next_due(self) -> float:
        """The watermark at which something is due next (``+inf``: nothing)."""
        ...


def attach(node: Stream, kind: str, upstream: Stream) -> Timestamps:
    """``upstream`` as the event-time clock of ``node`` (refused unless it is a :class:`Timestamps`)."""
    if isinstance(upstream, Timestamps) and upstream.carries_frames:
        raise ConfigurationError(
            f"{kind}: the node above gives times to the rows of DataFrame batches; window "
            f"the streaming DataFrame itself: sdf.timestamps(column, ...).{kind}(...).count()"
        )
    if not isinstance(upstream, Timestamps):
        raise ConfigurationError(
            f"{kind}: needs event times from the node right above it; "
            f"write stream.timestamps(func, max_delay=...).{kind}(...)"
        )
    return upstream
