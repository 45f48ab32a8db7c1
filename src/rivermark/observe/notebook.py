"""Live outputs in Jupyter (the ``notebook`` extra: ``ipywidgets``).

A node shown as the last expression of a cell (``source.map(f)``) displays
a widget holding the latest record it passed on, updated as records flow,
as streamz does; :func:`node_output` builds that widget.  A :class:`Job`
shown in a cell displays its progress (records per source, rate, position,
the last checkpoint, errors), refreshed from the job's metrics about twice
a second while it runs; :func:`job_output` builds that widget.

Showing a node adds a plain ``sink`` after it (a leaf that is not
checkpointed), as in streamz; a ``Job(exactly_once=True)`` refuses such a
graph, so display nodes before building that job, not in it.
"""

from __future__ import annotations

import html
import logging
import threading
from typing import TYPE_CHECKING, Any

from ..core.node import Stream
from ..errors import ConfigurationError
from ..sinks.basic import Sink
from .progress import format_age, progress_line

if TYPE_CHECKING:  # pragma: no cover
    from ..checkpoint.job import Job

logger = logging.getLogger(__name__)

__all__ = ["node_output", "job_output", "display_node", "display_job"]


def _widgets() -> Any:
    try:
        import ipywidgets
    except ImportError as e:
        raise ConfigurationError(
            "live outputs in Jupyter need ipywidgets: pip install 'rivermark[notebook]'"
        ) from e
    return ipywidgets


def _cut(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more)"


def node_output(node: Stream) -> Any:
    """An ``ipywidgets.HTML`` showing the latest record ``node`` passes on, as they come."""
    widgets = _widgets()
    box = widgets.HTML(value=f"<code>{html.escape(str(node))}</code>: no record yet")

    def show(x: Any) -> None:
        box.value = f"<pre>{html.escape(_cut(repr(x)))}</pre>"

    Sink(node, show)
    return box


def _job_html(job: Job) -> str:
    snap = job.metrics.read()
    state = "running" if snap.running else ("done" if job.ended_at else "not started")
    rows = "".join(
        f"<tr><td>{html.escape(s.id)}</td><td>{s.records:,}</td><td>{s.rate:,.0f}/s</td>"
        f"<td>{html.escape(_cut(repr(s.position), 80))}</td></tr>"
        for s in snap.sources
    )
    last = snap.last_checkpoint
    ck = (
        f"checkpoint {last.epoch}, {format_age(snap.last_checkpoint_age or 0)} ago"
        if last is not None
        else "no checkpoint yet"
    )
    errors = sum(n.errors for n in snap.nodes)
    return (
        f"<b>rivermark job</b> {state}, {snap.elapsed:.1f}s; {ck}; errors {errors:,}"
        f"<table><tr><th>source</th><th>records</th><th>rate</th><th>position</th></tr>"
        f"{rows}</table><!-- {html.escape(progress_line(snap))} -->"
    )


def job_output(job: Job, interval: float = 0.5) -> Any:
    """An ``ipywidgets.HTML`` with ``job``'s progress, refreshed every ``interval`` seconds."""
    widgets = _widgets()
    box = widgets.HTML(value=_job_html(job))

    def refresh() -> None:
        # until the job has run and ended: a job displayed before run() waits for it
        while True:
            ended = job.ended_at is not None
            box.value = _job_html(job)
            if ended:
                return
            job.wait_ended(interval)

    threading.Thread(target=refresh, name="rivermark-notebook", daemon=True).start()
    return box


def display_node(node: Stream) -> None:
    """What a node shows as a cell's result (``Stream._ipython_display_``)."""
    from IPython.display import display

    display(node_output(node))


def display_job(job: Job) -> None:
    """What a job shows as a cell's result (``Job._ipython_display_``)."""
    from IPython.display import display

    display(job_output(job))
