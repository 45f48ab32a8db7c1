"""Watching a running job: metrics, Prometheus endpoint, terminal display, live page.

* :mod:`.metrics`: the one metrics model (``job.metrics.read()``);
* :mod:`.prometheus`: ``Job(metrics_port=...)``, ``rivermark run --metrics-port``;
* :mod:`.progress`: what ``rivermark run`` prints (start line, progress, summary);
* :mod:`.ui`: the live pipeline page, ``Job(ui=...)``, ``rivermark run --ui``;
* :mod:`.notebook`: live outputs in Jupyter;
* :mod:`.graphtext`: the graph as dot or Mermaid text (``rivermark graph``);
* :mod:`.logs`: the command's text and JSON log formats.

Each watcher attaches to a job as a
:class:`~rivermark.checkpoint.protocol.listeners.JobListener`: importing this
package registers the metrics (every job), the Prometheus endpoint
(``metrics_port``), the live page (``ui``) and the notebook display with
:mod:`rivermark.checkpoint.protocol.listeners`; ``import rivermark`` imports it.

See ``docs/operating.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rivermark.checkpoint.protocol.listeners import attach_display
from rivermark.observe import metrics as metrics
from rivermark.observe import prometheus as prometheus
from rivermark.observe import ui as ui

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job


def _display_job(job: Job) -> None:
    """``Job._ipython_display_``: the notebook display, an optional layer loaded on first use."""
    from rivermark.observe.notebook import display_job

    display_job(job)


attach_display(_display_job)
