"""Watching a running job: metrics, Prometheus endpoint, terminal display, live page.

* :mod:`.metrics`: the one metrics model (``job.metrics.read()``);
* :mod:`.prometheus`: ``Job(metrics_port=...)``, ``rivermark run --metrics-port``;
* :mod:`.progress`: what ``rivermark run`` prints (start line, progress, summary);
* :mod:`.ui`: the live pipeline page, ``Job(ui=...)``, ``rivermark run --ui``;
* :mod:`.notebook`: live outputs in Jupyter;
* :mod:`.graphtext`: the graph as dot or Mermaid text (``rivermark graph``);
* :mod:`.logs`: the command's text and JSON log formats.

See ``docs/operating.md``.
"""
