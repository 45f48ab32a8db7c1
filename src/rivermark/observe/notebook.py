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

A streaming DataFrame or Series shown in a cell displays its latest rows
(the last batch, or an updating frame's current result), redrawn at most
every ``interval`` seconds and always after the last record
(:func:`frame_output`).  Without ipywidgets the same outputs are plain HTML
displays that are replaced in place (IPython's ``display_id``).
"""

from __future__ import annotations

import html
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rivermark.checkpoint.protocol.listeners import CheckpointFailure, CheckpointInfo, JobListener
from rivermark.checkpoint.protocol.runstate import RunState
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.observe.endstate import run_state
from rivermark.observe.metrics import Snapshot, metrics_of
from rivermark.observe.progress import JOIN_COLUMNS, checkpoint_text, join_rows, progress_line
from rivermark.sinks.basic import Sink

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job

logger = logging.getLogger(__name__)


class Frame(Protocol):
    """What a notebook shows of a streaming DataFrame: its example and its stream of batches."""

    example: Any

    @property
    def local_stream(self) -> Stream: ...


__all__ = [
    "node_output",
    "job_output",
    "frame_output",
    "display_node",
    "display_job",
    "display_frame",
]

#: replaces the HTML of one output
SetHtml = Callable[[str], None]


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


def _widget(value: str) -> tuple[Any, SetHtml]:
    """An ``ipywidgets.HTML`` holding ``value``, and how to replace it."""
    box = _widgets().HTML(value=value)

    def set_html(text: str) -> None:
        box.value = text

    return box, set_html


def _show(value: str) -> SetHtml:
    """Display ``value`` in the current cell; the widget, else an HTML display replaced in place."""
    from IPython.display import HTML, display

    try:
        box, set_html = _widget(value)
    except ConfigurationError:
        handle = display(HTML(value), display_id=True)

        def replace(text: str) -> None:
            handle.update(HTML(text))

        return replace
    display(box)
    return set_html


def _node_intro(node: Stream) -> str:
    return f"<code>{html.escape(str(node))}</code>: no record yet"


def _record_html(x: Any) -> str:
    return f"<pre>{html.escape(_cut(repr(x)))}</pre>"


def _follow_node(node: Stream, set_html: SetHtml, interval: float = 0.25) -> None:
    # at most one message to the notebook every ``interval`` seconds, and always the last record
    Sink(node, _Throttled(_record_html, set_html, interval))


def node_output(node: Stream, interval: float = 0.25) -> object:
    """An ``ipywidgets.HTML`` showing the latest record ``node`` passes on.

    Redrawn at most every ``interval`` seconds (a message to the notebook
    each time), and always after the last record.
    """
    box, set_html = _widget(_node_intro(node))
    _follow_node(node, set_html, interval)
    return box


def _job_html(job: Job) -> str:
    snap = metrics_of(job).read()
    state = html.escape(run_state(job).text)
    rows = "".join(
        f"<tr><td>{html.escape(s.id)}</td><td>{s.records:,}</td><td>{s.rate:,.0f}/s</td>"
        f"<td>{html.escape(_cut(repr(s.position), 80))}</td></tr>"
        for s in snap.sources
    )
    ck = checkpoint_text(snap)
    errors = sum(n.errors for n in snap.nodes)
    return (
        f"<b>rivermark job</b> {state}, {snap.elapsed:.1f}s; {ck}; errors {errors:,}"
        f"<table><tr><th>source</th><th>records</th><th>rate</th><th>position</th></tr>"
        f"{rows}</table>{_joins_html(snap)}<!-- {html.escape(progress_line(snap))} -->"
    )


def _joins_html(snap: Snapshot) -> str:
    """The joins and tables, in the live page's columns (empty: there are none)."""
    rows = join_rows(snap)
    if not rows:
        return ""

    def line(tag: str, cells: Sequence[str]) -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>"

    body = "".join(line("td", row) for row in rows)
    return f"<table class='joins'>{line('th', JOIN_COLUMNS)}{body}</table>"


class _JobView(JobListener):
    """Redraws a job's output every ``interval`` seconds, and at once when a checkpoint
    completes or fails and when the run ends (the job's listener until then)."""

    def __init__(self, job: Job, set_html: SetHtml, interval: float) -> None:
        self.job = job
        self.set_html = set_html
        self.interval = interval
        self._changed = threading.Event()

    def checkpoint_completed(self, info: CheckpointInfo) -> None:
        self._changed.set()

    def checkpoint_failed(self, failure: CheckpointFailure) -> None:
        self._changed.set()

    async def stopped(self, job: Job, state: RunState) -> None:
        self._changed.set()

    def refresh(self) -> None:
        # until the job has run and ended: a job displayed before run() waits for it
        try:
            while True:
                ended = self.job.ended_at is not None
                self.set_html(_job_html(self.job))
                if ended:
                    return
                self._changed.wait(self.interval)
                self._changed.clear()
        finally:
            self.job.remove_listener(self)


def _follow_job(job: Job, set_html: SetHtml, interval: float) -> None:
    metrics_of(job).watch()
    view = _JobView(job, set_html, interval)
    job.add_listener(view)
    threading.Thread(target=view.refresh, name="rivermark-notebook", daemon=True).start()


def job_output(job: Job, interval: float = 0.5) -> object:
    """An ``ipywidgets.HTML`` with ``job``'s progress, refreshed every ``interval`` seconds."""
    box, set_html = _widget(_job_html(job))
    _follow_job(job, set_html, interval)
    return box


def _rows_html(value: object, rows: int) -> str:
    """The last ``rows`` rows of a pandas object as an HTML table; anything else as text."""
    # optional: a DataFrame or Series has .tail, a plain record does not
    tail = getattr(value, "tail", None)
    if callable(tail):
        value = tail(rows)
        if hasattr(value, "to_frame"):
            value = value.to_frame()
        if hasattr(value, "_repr_html_"):
            return str(value._repr_html_())
    return f"<pre>{html.escape(_cut(repr(value)))}</pre>"


class _Throttled:
    """Render the latest value at most every ``interval`` seconds, and always the last one."""

    def __init__(self, render: Callable[[Any], str], set_html: SetHtml, interval: float) -> None:
        self._render, self._set_html, self._interval = render, set_html, interval
        self._lock = threading.Lock()
        self._latest: Any = None
        self._timer: threading.Timer | None = None

    def __call__(self, value: object) -> None:
        with self._lock:
            self._latest = value
            if self._timer is not None:
                return
            self._timer = threading.Timer(self._interval, self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            value, self._timer = self._latest, None
        self._set_html(self._render(value))


#: the heading of an updating frame (the class names follow streamz: ``DataFrames``, ``Seriess``)
_UPDATING = {"DataFrames": "DataFrame", "Seriess": "Series"}


def _frame_title(frame: Frame) -> str:
    """``DataFrame: latest rows`` (batches) or ``Series (updating): current result``."""
    name = type(frame).__name__
    if name in _UPDATING:
        return f"<h5>{_UPDATING[name]} (updating): current result</h5>"
    return f"<h5>{html.escape(name)}: latest rows</h5>"


def _frame_intro(frame: Frame) -> str:
    return _frame_title(frame) + "no rows yet; elements like" + _rows_html(frame.example, 2)


def _follow_frame(frame: Frame, set_html: SetHtml, rows: int, interval: float) -> None:
    title = _frame_title(frame)
    Sink(frame.local_stream, _Throttled(lambda v: title + _rows_html(v, rows), set_html, interval))


def frame_output(frame: Frame, rows: int = 10, interval: float = 0.25) -> object:
    """An ``ipywidgets.HTML`` with the last ``rows`` rows ``frame`` produced, kept current."""
    box, set_html = _widget(_frame_intro(frame))
    _follow_frame(frame, set_html, rows, interval)
    return box


@Stream.register_api(attribute_name="_ipython_display_")
def display_node(node: Stream) -> None:
    """What a node shows as a cell's result (``Stream._ipython_display_``)."""
    _follow_node(node, _show(_node_intro(node)))


def display_job(job: Job) -> None:
    """What a job shows as a cell's result (``Job._ipython_display_``)."""
    _follow_job(job, _show(_job_html(job)), 0.5)


def display_frame(frame: Frame) -> None:
    """What a streaming frame shows as a cell's result (``Streaming._ipython_display_``)."""
    _follow_frame(frame, _show(_frame_intro(frame)), 10, 0.25)
