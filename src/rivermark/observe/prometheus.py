"""The Prometheus endpoint of a running job (``Job(metrics_port=...)``, ``--metrics-port``).

Served by ``prometheus-client`` (the ``metrics`` extra) from its own thread,
in its own registry; each scrape reads :class:`~rivermark.observe.metrics.Metrics`
once.  Metric names (all prefixed ``rivermark_``):

=====================================  =========  ================================
name                                   type       labels
=====================================  =========  ================================
``records_in_total``                   counter    node, kind
``records_out_total``                  counter    node, kind
``errors_total``                       counter    node, policy (raised, skipped,
                                                  handled)
``backlog``                            gauge      node (nodes that hold records)
``source_records_total``               counter    source
``source_records_per_second``          gauge      source
``source_lag``                         gauge      source, partition, unit
``checkpoints_total``                  counter
``checkpoint_epoch``                   gauge      (the last one written)
``checkpoint_age_seconds``             gauge
``checkpoint_duration_seconds``        gauge      (write and commit of the last)
``checkpoint_pause_seconds``           gauge      (sources held for the last)
``checkpoint_size_bytes``              gauge
``restores_total``                     counter
``job_elapsed_seconds``                gauge
``job_running``                        gauge
=====================================  =========  ================================
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigurationError
from .metrics import Metrics

logger = logging.getLogger(__name__)

__all__ = ["MetricsServer", "collect_families"]


def collect_families(metrics: Metrics) -> Iterator[Any]:
    """The Prometheus metric families of one reading of ``metrics``."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    snap = metrics.read()
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
    backlog = GaugeMetricFamily(
        "rivermark_backlog", "Records a node holds (in flight or in open windows)", labels=["node"]
    )
    for n in snap.nodes:
        rin.add_metric([n.id, n.kind], n.records_in)
        rout.add_metric([n.id, n.kind], n.records_out)
        errs.add_metric([n.id, "raised"], n.errors_raised)
        errs.add_metric([n.id, "skipped"], n.errors_skipped)
        errs.add_metric([n.id, "handled"], n.errors_handled)
        if n.backlog is not None:
            backlog.add_metric([n.id], n.backlog)
    yield from (rin, rout, errs, backlog)

    srec = CounterMetricFamily(
        "rivermark_source_records", "Records emitted by a source", labels=["source"]
    )
    srate = GaugeMetricFamily(
        "rivermark_source_records_per_second",
        "Records emitted per second since the previous reading",
        labels=["source"],
    )
    slag = GaugeMetricFamily(
        "rivermark_source_lag",
        "Left to read (Kafka: high watermark minus position; files: bytes)",
        labels=["source", "partition", "unit"],
    )
    for s in snap.sources:
        srec.add_metric([s.id], s.records)
        srate.add_metric([s.id], s.rate)
        for part, lag in sorted((s.lag or {}).items()):
            slag.add_metric([s.id, part, s.lag_unit], lag)
    yield from (srec, srate, slag)

    yield CounterMetricFamily(
        "rivermark_checkpoints", "Checkpoints written by this run", value=snap.checkpoints_written
    )
    yield CounterMetricFamily(
        "rivermark_checkpoint_waits",
        "Checkpoint triggers that waited for the checkpoint in flight (backpressure)",
        value=snap.checkpoint_waits,
    )
    last = snap.last_checkpoint
    if last is not None:
        age = snap.last_checkpoint_age or 0.0
        for name, doc, value in [
            ("rivermark_checkpoint_epoch", "Epoch of the last checkpoint", last.epoch),
            ("rivermark_checkpoint_age_seconds", "Seconds since the last checkpoint", age),
            (
                "rivermark_checkpoint_duration_seconds",
                "Write and commit time of the last checkpoint",
                last.duration,
            ),
            (
                "rivermark_checkpoint_pause_seconds",
                "Time the sources were held for the last checkpoint",
                last.pause,
            ),
            ("rivermark_checkpoint_size_bytes", "State bytes of the last checkpoint", last.size),
        ]:
            yield GaugeMetricFamily(name, doc, value=value)
    yield CounterMetricFamily(
        "rivermark_restores", "Restores from a checkpoint at start", value=snap.restores
    )
    yield GaugeMetricFamily("rivermark_job_elapsed_seconds", "Run time", value=snap.elapsed)
    yield GaugeMetricFamily(
        "rivermark_job_running", "1 while the job runs", value=1 if snap.running else 0
    )


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        return collect_families(self.metrics)

    def describe(self) -> list[Any]:
        return []  # no reading at registration


class MetricsServer:
    """Serves ``metrics`` in Prometheus text format at ``http://addr:port/metrics``.

    ``port=0`` picks a free port (see :attr:`port` after :meth:`start`).
    """

    def __init__(self, metrics: Metrics, port: int, addr: str = "127.0.0.1") -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigurationError(
                f"metrics_port must be a TCP port number (0-65535), got {port!r}; pass e.g. 9100"
            )
        self.metrics = metrics
        self.addr = addr
        self.port = port
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError as e:
            raise ConfigurationError(
                "metrics_port needs prometheus-client: pip install 'rivermark[metrics]'"
            ) from e
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.metrics))
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

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
