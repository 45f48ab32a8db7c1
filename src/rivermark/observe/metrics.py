"""One metrics model for a running job: nodes, sources, checkpoints.

The hot path only keeps plain integers on the nodes (see
:mod:`rivermark.execution.counting`); :class:`Metrics` turns them into figures
when they are read, which is cheap enough to do a few times a second from
any thread:

* per node: records in, records out (a root fed by ``emit`` is counted
  once a job runs it), errors by policy (raised, skipped,
  handled by an ``on_error`` callable such as a dead-letter sender), the
  last failing record with its exception, busy time and backpressure
  (sampled while someone watches: :mod:`rivermark.observe.busy`), the bytes
  of state in the last checkpoint and,
  where a node holds records (asynchronous and windowed nodes), its backlog
  (a reading taken while a record is inside a one-to-one node's function
  counts it as passed on by that node already; at a checkpoint and at the
  end every count is exact);
* per source: records emitted, records/s since the previous reading, its
  position and, when the source can tell, its lag (Kafka: high watermark
  minus position per partition; files: bytes left);
* event time: the watermark of each ``timestamps`` node, and per source the
  watermark of the ``timestamps`` nodes below it (their minimum), per input
  partition too, with its event-time lag (the wall clock minus the
  watermark); per event-time window node the records that arrived after
  their window had closed and the windows open now (read through the
  :class:`EventTimeClock` and :class:`EventTimeWindows` contracts); per
  join and table its late records and its running figures
  (:class:`~rivermark.core.figures.JoinFigures`: records buffered per side,
  late records per side, the as-of joins' waits, a table's keys and
  versions dropped);
* per job: checkpoints written, the last one's epoch, age, duration, pause
  and size, restores, elapsed time, and the checkpoint triggers that had to
  wait for the checkpoint still being written (backpressure).

>>> import tempfile
>>> from rivermark import Stream
>>> from rivermark.checkpoint import Job
>>> source = Stream.from_iterable(range(10), name="numbers")
>>> _ = source.filter(lambda x: x % 2 == 0).map(str, name="text").sink_to_list()
>>> job = Job(source, checkpoint=tempfile.mkdtemp(), every=None)
>>> job.run()
>>> snap = Metrics(job).read()
>>> snap.node("numbers").records_out, snap.node("text").records_in
(10, 5)
>>> snap.checkpoints_written
2
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rivermark.checkpoint.protocol.counts import COUNTS as COUNTS
from rivermark.checkpoint.protocol.counts import CountsLate, totals
from rivermark.checkpoint.protocol.counts import EventTimeWindows as EventTimeWindows
from rivermark.checkpoint.protocol.listeners import JobListener, attach_listener
from rivermark.checkpoint.protocol.options import JobOptions
from rivermark.core.figures import JoinFigures
from rivermark.core.graph import ancestors
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.observe.busy import BusySampler

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job
    from rivermark.checkpoint.protocol.listeners import CheckpointFailure, CheckpointInfo

logger = logging.getLogger(__name__)

__all__ = [
    "Metrics",
    "metrics_of",
    "Snapshot",
    "NodeMetrics",
    "SourceMetrics",
    "EventTimeClock",
    "EventTimeWindows",
    "COUNTS",
]


@runtime_checkable
class EventTimeClock(Protocol):
    """A node that keeps an event-time watermark (``timestamps``), as the metrics read it.

    ``watermark`` is in epoch seconds (``-inf`` before the first record,
    ``+inf`` once the input ended); ``partition_watermarks()`` maps each
    input partition seen (``"topic:partition"``, ``""`` for a source of one
    partition) to its own watermark.  Both are read from another thread.
    """

    @property
    def watermark(self) -> float: ...

    def partition_watermarks(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class NodeMetrics:
    """The figures of one node (``backlog`` is None where the node holds nothing)."""

    id: str
    label: str
    kind: str
    records_in: int
    records_out: int
    errors_raised: int
    errors_skipped: int
    errors_handled: int
    backlog: int | None
    rate: float
    upstreams: tuple[str, ...]
    #: seconds the node's step was seen running, and its upstream waited for it and below
    busy_seconds: float = 0.0
    backpressure_seconds: float = 0.0
    #: the same as fractions of the time since the previous reading (0.0 to 1.0)
    busy: float = 0.0
    backpressure: float = 0.0
    #: the last record whose user function raised and the exception, as text
    last_error_record: str | None = None
    last_error: str | None = None
    #: bytes of the node's state in the last checkpoint (None: stateless or none yet)
    state_size: int | None = None
    #: an event-time ``timestamps`` node's watermark (epoch seconds; None: not one)
    watermark: float | None = None
    #: late records of an event-time window, a join or a table (None: not one), and a
    #: window node's open windows (None: not one)
    late_records: int | None = None
    open_windows: int | None = None
    #: a join's or a table's running figures (None: not one)
    join: JoinFigures | None = None

    @property
    def errors(self) -> int:
        return self.errors_raised + self.errors_skipped + self.errors_handled


@dataclass(frozen=True)
class SourceMetrics:
    """The figures of one source."""

    id: str
    label: str
    records: int
    rate: float
    position: Any
    lag: dict[str, int] | None
    lag_unit: str
    finished: bool
    #: event time below the source: the watermark (the minimum of its ``timestamps``
    #: nodes'; epoch seconds, -inf before the first record, +inf after the end of the
    #: input) and per input partition; None without a ``timestamps`` node below it
    watermark: float | None = None
    partition_watermarks: dict[str, float] | None = None
    #: seconds the watermark is behind the wall clock (None: no finite watermark)
    event_time_lag: float | None = None

    @property
    def total_lag(self) -> int | None:
        return None if self.lag is None else sum(self.lag.values())


@dataclass(frozen=True)
class Snapshot:
    """Everything :class:`Metrics` reports, read at one moment."""

    time: float
    elapsed: float
    nodes: tuple[NodeMetrics, ...]
    sources: tuple[SourceMetrics, ...]
    checkpoints_written: int
    recent_checkpoints: tuple[CheckpointInfo, ...]
    restored_epoch: int | None
    restores: int
    running: bool
    edges: tuple[tuple[str, str], ...] = field(default=())
    #: checkpoint triggers that waited for the one in flight (backpressure), and how long
    checkpoint_waits: int = 0
    checkpoint_wait_seconds: float = 0.0
    #: the checkpoints of this run that failed, oldest first
    checkpoint_failures: tuple[CheckpointFailure, ...] = field(default=())
    checkpoints_failed: int = 0
    #: the job holds its other sources while its tables' sources read to their end
    bootstrapping: bool = False

    def node(self, node_id: str) -> NodeMetrics:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    @property
    def last_checkpoint(self) -> CheckpointInfo | None:
        return self.recent_checkpoints[-1] if self.recent_checkpoints else None

    @property
    def last_checkpoint_age(self) -> float | None:
        last = self.last_checkpoint
        return None if last is None else max(self.time - last.time, 0.0)

    @property
    def sinks(self) -> tuple[NodeMetrics, ...]:
        """The leaves of the graph (nodes without downstreams)."""
        ups = {u for n in self.nodes for u in n.upstreams}
        return tuple(n for n in self.nodes if n.id not in ups)


def _event_time(node: Stream) -> tuple[float | None, bool, int | None]:
    """``(watermark, whether it counts late records, open windows)`` of an event-time
    node (None: not one)."""
    watermark = float(node.watermark) if isinstance(node, EventTimeClock) else None
    opened = node.open_windows if isinstance(node, EventTimeWindows) else None
    return watermark, isinstance(node, CountsLate), opened


def _source_watermarks(
    job: Job, now: float
) -> dict[int, tuple[float, dict[str, float], float | None]]:
    """Per source (by ``id()``): its watermark, per partition, and its event-time lag."""
    out: dict[int, tuple[float, dict[str, float], float | None]] = {}
    sources = {id(s) for s in job.sources}
    for n in job.nodes:
        if not isinstance(n, EventTimeClock):
            continue
        mark = float(n.watermark)
        parts = n.partition_watermarks()
        for up in [n, *ancestors(n)]:
            if id(up) not in sources:
                continue
            low, low_parts, _ = out.get(id(up), (math.inf, {}, None))
            merged = dict(low_parts)
            for p, v in parts.items():
                merged[p] = min(v, merged.get(p, math.inf))
            low = min(low, mark)
            out[id(up)] = (low, merged, now - low if math.isfinite(low) else None)
    return out


def node_backlog(node: Stream) -> int | None:
    """Records ``node`` holds: in flight in asynchronous work, or buffered in a window."""
    return node.records_held()


def _text(value: object, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _error_texts(n: Stream) -> tuple[str | None, str | None]:
    """The last failing record of ``n`` and its exception, as text (None, None: no error)."""
    last = n.last_error
    if last is None:
        return None, None
    record, exc = last
    return _text(record), f"{type(exc).__name__}: {str(exc)[:300]}"


#: histogram buckets (upper bounds) of the checkpoints' duration and pause (s) and size (bytes)
BUCKETS = {
    "duration": (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    "write": (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    "pause": (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    "size": tuple(float(4**k) for k in range(4, 17)),  # 256 B to 4 GiB
}


class _Histogram:
    """Counts per bucket of every checkpoint this run wrote (folded in as they appear)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.sum = 0.0

    def add(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, count in zip([*map(repr, self.bounds), "+Inf"], self.counts):
            total += count
            out.append((bound, float(total)))
        return out


class Metrics(JobListener):
    """Reads a :class:`Job`'s figures; rates are per second since the previous :meth:`read`.

    Every job has one (``job.metrics``, :func:`metrics_of`), attached as a
    listener when the job is made; it reads the graph when asked.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, float]] | None = None
        self._rates: dict[str, float] = {}
        self._sampler: BusySampler | None = None
        self._histograms = {k: _Histogram(v) for k, v in BUCKETS.items()}
        #: the last checkpoint (run start, epoch) folded into the histograms
        self._folded: tuple[float | None, int] = (None, -1)

    def checkpoint_histogram(self, figure: str) -> tuple[list[tuple[str, float]], float]:
        """Cumulative buckets and sum of the checkpoints' ``duration`` (end to end),
        ``write``, ``pause`` or ``size``.

        Counts every checkpoint of the current run that the job still lists
        (its last 100) when this is read: read at least once per 100
        checkpoints (a scrape does) and none is missed.
        """
        with self._lock:
            run, last = self._folded
            if run != self.job.started_at:
                self._histograms = {k: _Histogram(v) for k, v in BUCKETS.items()}
                run, last = self.job.started_at, -1
            for c in list(self.job.checkpoints):
                if c.epoch > last and c.time >= (self.job.started_at or 0.0):
                    self._histograms["duration"].add(c.duration)
                    self._histograms["write"].add(c.write)
                    self._histograms["pause"].add(c.pause)
                    self._histograms["size"].add(c.size)
                    last = c.epoch
            self._folded = (run, last)
            hist = self._histograms[figure]
            return hist.cumulative(), hist.sum

    def watch(self) -> None:
        """Start sampling busy time and backpressure until the job ends (the page, the
        terminal display and the metrics endpoint call this; idempotent)."""
        with self._lock:
            if self._sampler is None:
                self._sampler = BusySampler(self.job)
        self._sampler.start()

    def _busy(self, ids: dict[int, str]) -> tuple[dict[str, float], dict[str, float]]:
        """Busy seconds per node, and backpressure: the busy seconds of everything below it."""
        busy = {} if self._sampler is None else self._sampler.busy_seconds()
        below: dict[str, set[str]] = {}
        for n in reversed(self.job.nodes):  # downstreams first
            seen: set[str] = set()
            for d in n.downstreams:
                if id(d) in ids:
                    seen.add(ids[id(d)])
                    seen |= below.get(ids[id(d)], set())
            below[ids[id(n)]] = seen
        waits = {nid: sum(busy.get(d, 0.0) for d in ds) for nid, ds in below.items()}
        return busy, waits

    def _update_rates(self, counters: dict[str, float]) -> dict[str, float]:
        """Per-second rates of ``counters`` since the previous reading (at least 0.2 s ago)."""
        mono = time.monotonic()
        with self._lock:
            if self._last is not None and mono - self._last[0] >= 0.2:
                dt = mono - self._last[0]
                prev = self._last[1]
                self._rates = {k: max(v - prev.get(k, 0), 0) / dt for k, v in counters.items()}
                self._last = (mono, counters)
            elif self._last is None:
                self._last = (mono, counters)
            return dict(self._rates)

    def totals(self) -> dict[str, list[int]]:
        """Node id -> its counts since the job first started (:data:`COUNTS` in order).

        This run's counts plus those the restored checkpoint carried
        (``job.restored_counts``); a job writes them into each checkpoint,
        so every count carries over a restore: records in and out, errors
        raised, skipped and handled, late records.  A checkpoint of an older
        version carries records in and out only.
        """
        return totals(self.job.nodes, self.job.id_of, self.job.restored_counts)

    def read(self) -> Snapshot:
        """The figures now (thread-safe; reading costs one pass over the graph)."""
        job = self.job
        now = time.time()
        ids = {id(n): job.id_of(n) for n in job.nodes}
        totals = self.totals()
        counts = {nid: pair[0] for nid, pair in totals.items()}
        busy, waits = self._busy(ids)
        rates = self._update_rates(
            {
                **counts,
                **{"busy:" + k: v for k, v in busy.items()},
                **{"wait:" + k: v for k, v in waits.items()},
            }
        )
        last = job.checkpoints[-1] if job.checkpoints else None
        sizes = {} if last is None else last.sizes
        nodes = []
        edges = []
        for n in job.nodes:
            nid = ids[id(n)]
            _, _, raised, skipped, handled, late_total = totals[nid]
            record, error = _error_texts(n)
            watermark, late, opened = _event_time(n)
            nodes.append(
                NodeMetrics(
                    id=nid,
                    label=n.display_name() if n.name is None else n.name,
                    kind=type(n).__name__,
                    records_in=counts[nid],
                    records_out=totals[nid][1],
                    errors_raised=raised,
                    errors_skipped=skipped,
                    errors_handled=handled,
                    backlog=node_backlog(n),
                    rate=rates.get(nid, 0.0),
                    upstreams=tuple(ids[id(u)] for u in n.upstreams if id(u) in ids),
                    busy_seconds=busy.get(nid, 0.0),
                    backpressure_seconds=waits.get(nid, 0.0),
                    busy=min(rates.get("busy:" + nid, 0.0), 1.0),
                    backpressure=min(rates.get("wait:" + nid, 0.0), 1.0),
                    last_error_record=record,
                    last_error=error,
                    state_size=sizes.get(nid),
                    watermark=watermark,
                    late_records=late_total if late else None,
                    open_windows=opened,
                    join=n.join_figures(),
                )
            )
            edges += [(ids[id(u)], nid) for u in n.upstreams if id(u) in ids]
        sources = []
        marks = _source_watermarks(job, now)
        for s in job.sources:
            mark, parts, lag_seconds = marks.get(id(s), (None, None, None))
            sid = ids[id(s)]
            try:
                lag = s.lag()
                position = s.position_now()
            except Exception:  # a source changing meanwhile must not break a reading
                logger.debug("reading source %s failed", sid, exc_info=True)
                lag = position = None
            sources.append(
                SourceMetrics(
                    id=sid,
                    label=s.name or s.display_name(),
                    records=counts[sid],
                    rate=rates.get(sid, 0.0),
                    position=position,
                    lag=lag,
                    lag_unit=s.lag_unit,
                    finished=s.finished,
                    watermark=mark,
                    partition_watermarks=parts,
                    event_time_lag=lag_seconds,
                )
            )
        start = job.started_at or now
        end = job.ended_at or now
        return Snapshot(
            time=now,
            elapsed=max(end - start, 0.0),
            nodes=tuple(nodes),
            sources=tuple(sources),
            checkpoints_written=job.checkpoints_written,
            recent_checkpoints=tuple(list(job.checkpoints)),
            restored_epoch=job.restored_epoch,
            restores=0 if job.restored_epoch is None else 1,
            running=job.ended_at is None and job.started_at is not None,
            edges=tuple(edges),
            checkpoint_waits=job.checkpoint_waits,
            checkpoint_wait_seconds=job.checkpoint_wait_seconds,
            checkpoint_failures=tuple(list(job.checkpoint_failures)),
            checkpoints_failed=job.checkpoints_failed,
            bootstrapping=job.bootstrapping,
        )


def metrics_of(job: Job) -> Metrics:
    """``job``'s metrics (``job.metrics``), typed."""
    metrics = job.listener("metrics")
    if not isinstance(metrics, Metrics):
        raise ConfigurationError(f"{job!r} has no metrics: it was made before rivermark.observe")
    return metrics


def _job_metrics(job: Job, options: JobOptions) -> Metrics:
    return Metrics(job)


attach_listener("metrics", _job_metrics)
