"""The Prometheus endpoint of a running job (``Job(metrics_port=...)``, ``--metrics-port``).

Served by ``prometheus-client`` (the ``metrics`` extra) from its own thread,
in its own registry, with prometheus-client's process and platform
collectors; each scrape reads :class:`~rivermark.observe.metrics.Metrics`
once.  By Prometheus' conventions: counts are counters (rates come from
``rate()``), times of day are timestamps, and the checkpoints' duration,
pause and size are histograms.  The names and labels are in the table of
``docs/operating.md`` (a test keeps the two equal).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rivermark.checkpoint.protocol.listeners import JobListener, attach_listener
from rivermark.checkpoint.protocol.options import JobOptions, check_port
from rivermark.checkpoint.protocol.runstate import RunState
from rivermark.errors import ConfigurationError
from rivermark.observe.metrics import Metrics, Snapshot, metrics_of

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job

logger = logging.getLogger(__name__)

__all__ = ["MetricsServer", "collect_families"]


def _node_families(snap: Snapshot) -> Iterator[object]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    rin = CounterMetricFamily(
        "rivermark_records_in", "Records received by a node", labels=["node", "kind"]
    )
    rout = CounterMetricFamily(
        "rivermark_records_out", "Records passed on by a node", labels=["node", "kind"]
    )
    errs = CounterMetricFamily(
        "rivermark_errors",
        "Records whose user function raised, by error policy",
        labels=["node", "policy"],
    )
    busy = CounterMetricFamily(
        "rivermark_node_busy_seconds",
        "Seconds a node's step was seen running (sampled); rate() is the busy share",
        labels=["node"],
    )
    waits = CounterMetricFamily(
        "rivermark_node_backpressure_seconds",
        "Seconds a node waited for the nodes below it (sampled); rate() is the share",
        labels=["node"],
    )
    backlog = GaugeMetricFamily(
        "rivermark_backlog", "Records a node holds (in flight or in open windows)", labels=["node"]
    )
    marks = GaugeMetricFamily(
        "rivermark_node_watermark_timestamp_seconds",
        "Event-time watermark of a timestamps node (Unix time; once it has one)",
        labels=["node"],
    )
    late = CounterMetricFamily(
        "rivermark_late_records",
        "Records (DataFrame rows) an event-time window received after their window closed, "
        "or a join or table after their side's watermark had passed them",
        labels=["node"],
    )
    opened = GaugeMetricFamily(
        "rivermark_open_windows", "Event-time windows (per key) open in a node", labels=["node"]
    )
    for n in snap.nodes:
        rin.add_metric([n.id, n.kind], n.records_in)
        rout.add_metric([n.id, n.kind], n.records_out)
        errs.add_metric([n.id, "raised"], n.errors_raised)
        errs.add_metric([n.id, "skipped"], n.errors_skipped)
        errs.add_metric([n.id, "handled"], n.errors_handled)
        busy.add_metric([n.id], n.busy_seconds)
        waits.add_metric([n.id], n.backpressure_seconds)
        if n.backlog is not None:
            backlog.add_metric([n.id], n.backlog)
        if n.watermark is not None and math.isfinite(n.watermark):
            marks.add_metric([n.id], n.watermark)
        if n.late_records is not None:
            late.add_metric([n.id], n.late_records)
        if n.open_windows is not None:
            opened.add_metric([n.id], n.open_windows)
    yield from (rin, rout, errs, busy, waits, backlog, marks, late, opened)
    yield from _join_families(snap)


def _join_families(snap: Snapshot) -> Iterator[object]:
    """The running figures of joins and tables (:class:`~rivermark.core.figures.JoinFigures`)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    buffered = GaugeMetricFamily(
        "rivermark_join_buffered_records",
        "Records (DataFrame rows) a join holds per side, waiting for a watermark or for "
        "partners still to come",
        labels=["node", "side"],
    )
    late = CounterMetricFamily(
        "rivermark_join_late_records",
        "Records a join received per side after that side's watermark had passed them",
        labels=["node", "side"],
    )
    waited = CounterMetricFamily(
        "rivermark_join_waited_records",
        "Left records of an as-of join that waited for the table side's watermark",
        labels=["node"],
    )
    oldest = GaugeMetricFamily(
        "rivermark_join_oldest_waiting_timestamp_seconds",
        "Event time of the oldest left record an as-of join holds waiting (Unix time); "
        "time() minus it is how far its output is held back",
        labels=["node"],
    )
    keys = GaugeMetricFamily("rivermark_table_keys", "Keys a table holds", labels=["node"])
    dropped = CounterMetricFamily(
        "rivermark_table_versions_dropped",
        "Versions a table dropped by retention",
        labels=["node"],
    )
    for n in snap.nodes:
        f = n.join
        if f is None:
            continue
        for side, count in f.buffered.items():
            buffered.add_metric([n.id, side], count)
        for side, count in f.late.items():
            late.add_metric([n.id, side], count)
        if f.waited is not None:
            waited.add_metric([n.id], f.waited)
        if f.oldest_waiting is not None and math.isfinite(f.oldest_waiting):
            oldest.add_metric([n.id], f.oldest_waiting)
        if f.keys is not None:
            keys.add_metric([n.id], f.keys)
        if f.versions_dropped is not None:
            dropped.add_metric([n.id], f.versions_dropped)
    yield from (buffered, late, waited, oldest, keys, dropped)
    yield from _lookup_families(snap)


def _lookup_families(snap: Snapshot) -> Iterator[object]:
    """The caches of lookup joins (``lookup_sql``): hits, misses, keys held."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    hits = CounterMetricFamily(
        "rivermark_lookup_cache_hits",
        "Keys a lookup join answered from its cache (since the process started)",
        labels=["node"],
    )
    misses = CounterMetricFamily(
        "rivermark_lookup_cache_misses",
        "Keys a lookup join read from its table (since the process started)",
        labels=["node"],
    )
    cached = GaugeMetricFamily(
        "rivermark_lookup_cache_keys", "Keys in a lookup join's cache", labels=["node"]
    )
    for n in snap.nodes:
        f = n.join
        if f is None:
            continue
        for family, value in ((hits, f.cache_hits), (misses, f.cache_misses), (cached, f.cache_size)):  # fmt: skip
            if value is not None:
                family.add_metric([n.id], value)
    yield from (hits, misses, cached)


def _source_families(snap: Snapshot) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    srec = CounterMetricFamily(
        "rivermark_source_records", "Records emitted by a source", labels=["source"]
    )
    slag = GaugeMetricFamily(
        "rivermark_source_lag",
        "Left to read, all partitions (Kafka: records to the high watermarks; files: bytes)",
        labels=["source", "unit"],
    )
    plag = GaugeMetricFamily(
        "rivermark_source_partition_lag",
        "Left to read in one partition (Kafka: high watermark minus position)",
        labels=["source", "partition", "unit"],
    )
    smark = GaugeMetricFamily(
        "rivermark_source_watermark_timestamp_seconds",
        "Event-time watermark below a source, the minimum of its timestamps nodes' (Unix "
        "time); the event-time lag is time() minus it",
        labels=["source"],
    )
    pmark = GaugeMetricFamily(
        "rivermark_source_partition_watermark_timestamp_seconds",
        "Event-time watermark of one input partition (Kafka: topic:partition) below a source",
        labels=["source", "partition"],
    )
    for s in snap.sources:
        srec.add_metric([s.id], s.records)
        if s.watermark is not None and math.isfinite(s.watermark):
            smark.add_metric([s.id], s.watermark)
        for part, mark in sorted((s.partition_watermarks or {}).items()):
            if part and math.isfinite(mark):  # one unnamed partition: the source's says it all
                pmark.add_metric([s.id, part], mark)
        if s.lag is None:
            continue
        slag.add_metric([s.id, s.lag_unit], sum(s.lag.values()))
        for part, lag in sorted(s.lag.items()):
            if part:  # a file has one unnamed part: its total says it all
                plag.add_metric([s.id, part, s.lag_unit], lag)
    yield from (srec, slag, plag, smark, pmark)


def _checkpoint_families(metrics: Metrics, snap: Snapshot) -> Iterator[object]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    yield CounterMetricFamily(
        "rivermark_checkpoints", "Checkpoints written by this run", value=snap.checkpoints_written
    )
    yield CounterMetricFamily(
        "rivermark_checkpoint_failures",
        "Checkpoints of this run that failed (a failed write stops the job; a failed prune "
        "of older checkpoints does not)",
        value=snap.checkpoints_failed,
    )
    yield CounterMetricFamily(
        "rivermark_checkpoint_waits",
        "Checkpoint triggers that waited for the checkpoint in flight (backpressure)",
        value=snap.checkpoint_waits,
    )
    last = snap.last_checkpoint
    epoch = last.epoch if last is not None else snap.restored_epoch
    if epoch is not None:
        yield GaugeMetricFamily(
            "rivermark_checkpoint_epoch",
            "Epoch of the last checkpoint (after a restore: the one resumed from)",
            value=epoch,
        )
    stamp = last.time if last is not None else metrics.job.restored_time
    if stamp is not None:
        yield GaugeMetricFamily(
            "rivermark_last_checkpoint_timestamp_seconds",
            "Unix time the last checkpoint was written (after a restore: the one resumed from)",
            value=stamp,
        )
    for name, doc, hist in [
        (
            "rivermark_checkpoint_duration_seconds",
            "End-to-end time of checkpoints: from pausing the sources to the manifest written",
            "duration",
        ),
        (
            "rivermark_checkpoint_write_seconds",
            "Durable write time of checkpoints: state files and manifest",
            "write",
        ),
        (
            "rivermark_checkpoint_pause_seconds",
            "Time the sources were held for checkpoints (up to the manifest written)",
            "pause",
        ),
        ("rivermark_checkpoint_size_bytes", "State bytes written by checkpoints", "size"),
    ]:
        buckets, total = metrics.checkpoint_histogram(hist)
        yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)
    yield CounterMetricFamily(
        "rivermark_restores", "Restores from a checkpoint at start", value=snap.restores
    )
    yield GaugeMetricFamily(
        "rivermark_job_start_timestamp_seconds",
        "Unix time this run started",
        value=metrics.job.started_at or 0.0,
    )
    yield GaugeMetricFamily(
        "rivermark_job_running", "1 while the job runs", value=1 if snap.running else 0
    )
    yield GaugeMetricFamily(
        "rivermark_job_bootstrapping",
        "1 while the job reads its tables' topics to their end before its other sources",
        value=1 if snap.bootstrapping else 0,
    )


def collect_families(metrics: Metrics) -> Iterator[Any]:
    """The Prometheus metric families of one reading of ``metrics``."""
    snap = metrics.read()
    yield from _node_families(snap)
    yield from _source_families(snap)
    yield from _checkpoint_families(metrics, snap)


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        return collect_families(self.metrics)

    def describe(self) -> list[Any]:
        return []  # no reading at registration


class MetricsServer(JobListener):
    """Serves ``metrics`` in Prometheus text format at ``http://addr:port/metrics``.

    ``port=0`` picks a free port (see :attr:`port` after :meth:`start`).  As
    a job's listener (``Job(metrics_port=...)``) it serves while the job runs.
    """

    def __init__(self, metrics: Metrics, port: int, addr: str = "127.0.0.1") -> None:
        check_port(port, "metrics_port", "9100")
        self.metrics = metrics
        self.addr = addr
        self.port = port
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> None:
        try:
            from prometheus_client import (
                CollectorRegistry,
                PlatformCollector,
                ProcessCollector,
                start_http_server,
            )
        except ImportError as e:
            raise ConfigurationError(
                "metrics_port needs prometheus-client: pip install 'rivermark[metrics]'"
            ) from e
        self.metrics.watch()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.metrics))
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        try:
            self._server, self._thread = start_http_server(
                self.port, addr=self.addr, registry=registry
            )
        except OSError as e:
            raise ConfigurationError(
                f"cannot serve metrics on {self.addr}:{self.port!r} ({e}); "
                "pick another --metrics-port"
            ) from e
        self.port = int(self._server.server_port)
        logger.info("serving Prometheus metrics at %s", self.url)

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    async def started(self, job: Job) -> None:
        self.start()

    async def stopped(self, job: Job, state: RunState) -> None:
        self.stop()

    def served_at(self) -> str | None:
        return self.url

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


def _endpoint(job: Job, options: JobOptions) -> MetricsServer | None:
    if options.metrics_port is None:
        return None
    return MetricsServer(metrics_of(job), options.metrics_port, options.metrics_addr)


attach_listener("metrics_port", _endpoint)
