"""What ``rivermark run`` shows while a job runs: start line, progress, summary.

* At start: ``resuming from checkpoint 12 written 3 min ago; positions: ...``
  or ``starting fresh: no checkpoint in ...``, or, when the restore itself
  failed (a sink's broker unreachable while it was being set up), ``not
  started: the restore from ... did not finish``.
* While running, on a terminal: a live table drawn with ``rich`` (the
  ``progress`` extra) with one row per source (records, records/s, position
  or % of the file, lag; with event time, the watermark and the event-time
  lag, and a table of the event-time nodes: watermarks, open windows, late
  records; a table of the joins and tables with the live page's columns),
  the last checkpoint's epoch, age and duration (or,
  after a restore and before this run's first checkpoint, "resumed from
  checkpoint N"), errors, and the busiest nodes (records in, records/s,
  busy and backpressure: :mod:`rivermark.observe.busy`; every node with errors, late
  records or backpressure is shown).  When stdout is not a terminal (or ``rich`` is missing): one plain
  line every ``interval`` seconds.
* At the end: how the run ended (:mod:`rivermark.observe.endstate`:
  ``finished after 3.2s: end of input``, ``stopped after 9.0s: rivermark
  stop``) and a summary (records per source, outputs per sink, skipped and
  dead-lettered records, checkpoints written, elapsed time).

The reporter is one of the job's listeners (it hears the run start and
end) and reads :class:`~rivermark.observe.metrics.Metrics` from its own
thread; it never works on the job's event loop.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from rivermark.checkpoint.protocol.listeners import JobListener
from rivermark.observe.endstate import RunState, run_state
from rivermark.observe.metrics import NodeMetrics, Snapshot, SourceMetrics, metrics_of

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job

logger = logging.getLogger(__name__)

__all__ = [
    "ProgressReporter",
    "format_age",
    "start_line",
    "progress_line",
    "checkpoint_text",
    "summary_lines",
    "watermark_text",
    "position_text",
    "JOIN_COLUMNS",
    "join_rows",
]


def format_age(seconds: float) -> str:
    """``42s``, ``3 min``, ``2.5 h``, ``4 days``.

    >>> [format_age(s) for s in (4.2, 200, 9000, 400000)]
    ['4s', '3 min', '2.5 h', '4.6 days']
    """
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def position_text(s: SourceMetrics) -> str:
    """A source's position as the terminal and the page show it (``byte 410,376 (45% of
    file)``, ``lag 1,200``, ``position 42``)."""
    lag = s.total_lag
    if s.lag_unit == "bytes" and isinstance(s.position, int) and lag is not None:
        total = s.position + lag
        pct = 100.0 * s.position / total if total else 100.0
        return f"byte {s.position:,} ({pct:.0f}% of file)"
    if lag is not None:
        return f"lag {lag:,}"
    text = repr(s.position)
    return f"position {text if len(text) <= 40 else text[:37] + '...'}"


def watermark_text(watermark: float | None) -> str:
    """An event-time watermark as UTC date and time (``–`` before the first record).

    >>> watermark_text(1_700_000_000.25), watermark_text(float("-inf")), watermark_text(float("inf"))
    ('2023-11-14 22:13:20 UTC', '–', 'end of input')
    """
    if watermark is None or watermark == -math.inf:
        return "–"
    if watermark == math.inf:
        return "end of input"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(watermark))


def _event_time_text(s: SourceMetrics) -> str:
    """``watermark ... (event-time lag ...)`` of a source with event time below it."""
    lag = "" if s.event_time_lag is None else f" (event-time lag {format_age(s.event_time_lag)})"
    return f"watermark {watermark_text(s.watermark)}{lag}"


def start_line(job: Job) -> str:
    """What the job resumed from, that it starts fresh, or that its restore did not finish."""
    if not job.recovered:
        return (
            f"not started: the restore from {job.store!r} did not finish (the error below says why)"
        )
    if job.restored_epoch is None:
        return f"starting fresh: no checkpoint in {job.store!r}"
    age = format_age(max(time.time() - (job.restored_time or time.time()), 0.0))
    by_id = {job.id_of(s): s for s in job.sources}
    parts = []
    for sid, pos in sorted(job.restored_positions.items()):
        if isinstance(pos, dict) and isinstance(pos.get("offset"), int):
            pos = pos["offset"]  # a file's offset with the digest of the bytes before it
        text = repr(pos)
        if sid in by_id and by_id[sid].lag_unit == "bytes" and isinstance(pos, int):
            text = f"byte {pos:,}"
        parts.append(f"{sid} {text if len(text) <= 60 else text[:57] + '...'}")
    before = job.previous_run
    return (
        f"resuming from checkpoint {job.restored_epoch} written {age} ago; "
        f"positions: {', '.join(parts) if parts else '(none)'}"
        + ("" if before is None else f"; the previous run: {before.text}")
    )


def checkpoint_text(snap: Snapshot) -> str:
    """The last checkpoint with its age and duration; after a restore, where it resumed."""
    last = snap.last_checkpoint
    if last is not None:
        age = format_age(snap.last_checkpoint_age or 0)
        return f"checkpoint {last.epoch} ({age} ago, took {last.duration * 1000:,.0f} ms)"
    if snap.restored_epoch is not None:
        return f"resumed from checkpoint {snap.restored_epoch}"
    return "no checkpoint yet"


def progress_line(snap: Snapshot) -> str:
    """One plain line: per source records, rate, position; last checkpoint; errors."""
    parts = [
        f"{s.id}: {s.records:,} records ({s.rate:,.0f}/s), {position_text(s)}"
        + ("" if s.watermark is None else f", {_event_time_text(s)}")
        for s in snap.sources
    ]
    parts.append(checkpoint_text(snap))
    errors = sum(n.errors for n in snap.nodes)
    parts.append(f"errors {errors:,}")
    windows = [n for n in snap.nodes if n.open_windows is not None]
    if windows:
        opened = sum(n.open_windows or 0 for n in windows)
        late = sum(n.late_records or 0 for n in windows)
        parts.append(f"open windows {opened:,}, late records {late:,}")
    return "progress: " + "; ".join(parts)


def summary_lines(snap: Snapshot, state: RunState | None = None) -> list[str]:
    """The end-of-run summary: how the run ended (``finished after 3.2s: end of input``)
    and its figures."""
    head = "ended" if state is None else state.state
    why = "" if state is None or not state.reason else f": {state.reason}"
    lines = [f"{head} after {snap.elapsed:.1f}s{why}"]
    for s in snap.sources:
        lines.append(f"  source {s.id}: {s.records:,} records")
    for n in snap.sinks:
        lines.append(f"  sink {n.id}: {n.records_in:,} records")
    skipped = sum(n.errors_skipped for n in snap.nodes)
    handled = sum(n.errors_handled for n in snap.nodes)
    lines.append(f"  skipped: {skipped:,}, dead-lettered (on_error handler): {handled:,}")
    last = snap.last_checkpoint
    tail = f", last epoch {last.epoch}" if last is not None else ""
    lines.append(f"  checkpoints written: {snap.checkpoints_written}{tail}")
    return lines


def _lag_text(s: SourceMetrics) -> str:
    lag = s.total_lag
    return "–" if lag is None else f"{lag:,} {s.lag_unit}"


#: the node rows the terminal shows: at least the busiest ones
BUSIEST = 5
#: at most this many rows of nodes with errors, late records or backpressure
FLAGGED = 12


def _flagged(n: NodeMetrics) -> bool:
    """A node the terminal always shows: it has errors, late records or backpressure."""
    return n.errors > 0 or bool(n.late_records) or n.backpressure >= 0.01


def shown_nodes(snap: Snapshot, limit: int = BUSIEST) -> list[NodeMetrics]:
    """The node rows of the terminal display: every node with errors, late records or
    backpressure (most errors first; at most :data:`FLAGGED`), then the busiest of the
    others up to ``limit`` rows."""
    flagged = sorted(
        (n for n in snap.nodes if _flagged(n)),
        key=lambda n: (-n.errors, -(n.late_records or 0), -n.backpressure, n.id),
    )[:FLAGGED]
    ids = {n.id for n in flagged}
    rest = sorted(
        (n for n in snap.nodes if n.id not in ids), key=lambda n: (-n.busy, -n.backpressure, n.id)
    )
    return flagged + rest[: max(limit - len(flagged), 0)]


def _late_text(n: NodeMetrics) -> str:
    return "" if n.late_records is None else f"{n.late_records:,}"


def _node_cells(n: NodeMetrics) -> list[str]:
    """A node's row in both layouts: id, in, rate, busy, backpressure, errors, late."""
    return [
        n.id,
        f"{n.records_in:,}",
        f"{n.rate:,.0f}",
        f"{100 * n.busy:.0f}%",
        f"{100 * n.backpressure:.0f}%",
        f"{n.errors:,}",
        _late_text(n),
    ]


def _title(snap: Snapshot) -> str:
    errors = sum(n.errors for n in snap.nodes)
    return f"rivermark  {snap.elapsed:.0f}s  {checkpoint_text(snap)}  errors {errors:,}"


def _wide(snap: Snapshot) -> Any:
    from rich.console import Group
    from rich.table import Table

    table = Table(title=_title(snap), title_justify="left", expand=False)
    table.add_column("source")
    table.add_column("records", justify="right")
    table.add_column("records/s", justify="right")
    table.add_column("position")
    table.add_column("lag", justify="right")
    timed = any(s.watermark is not None for s in snap.sources)
    if timed:
        table.add_column("watermark")
        table.add_column("event-time lag", justify="right")
    for s in snap.sources:
        row = [s.id, f"{s.records:,}", f"{s.rate:,.0f}", position_text(s), _lag_text(s)]
        if timed:
            lag = "–" if s.event_time_lag is None else format_age(s.event_time_lag)
            row += [watermark_text(s.watermark), lag]
        table.add_row(*row)
    nodes = Table(title="busiest nodes", title_justify="left", expand=False)
    nodes.add_column("node")
    for head in ("records in", "records/s", "busy", "backpressure", "errors", "late"):
        nodes.add_column(head, justify="right")
    for n in shown_nodes(snap):
        nodes.add_row(*_node_cells(n))
    extra = [t for t in (_event_time_table(snap), _joins_table(snap)) if t is not None]
    return Group(table, nodes, *extra)


def _compact(snap: Snapshot) -> object:
    """The same figures in rows for a small terminal (80 columns): each source on lines
    of its own (position and watermark uncut), the nodes in a table without borders."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(_title(snap), style="bold")]
    for s in snap.sources:
        lag = "" if s.total_lag is None else f"  lag {_lag_text(s)}"
        parts.append(Text(f"{s.id}  {s.records:,} records  {s.rate:,.0f}/s{lag}"))
        parts.append(Text(f"  {position_text(s)}"))
        if s.watermark is not None:
            parts.append(Text(f"  {_event_time_text(s)}"))
    nodes = Table(box=None, expand=False, pad_edge=False, title_justify="left")
    nodes.add_column("node", overflow="fold")
    for head in ("in", "/s", "busy", "bp", "errors", "late"):
        nodes.add_column(head, justify="right")
    timed = any(n.watermark is not None or n.open_windows is not None for n in snap.nodes)
    if timed:
        nodes.add_column("open", justify="right")
    for n in shown_nodes(snap):
        row = _node_cells(n)
        if timed:
            row.append("" if n.open_windows is None else f"{n.open_windows:,}")
        nodes.add_row(*row)
    parts.append(nodes)
    marks = [n for n in snap.nodes if n.watermark is not None]
    for n in marks:
        parts.append(Text(f"{n.id}: watermark {watermark_text(n.watermark)}"))
    for row in join_rows(snap):
        # a join's or a table's figures, each after its column's name (dashes left out)
        named = [f"{head} {v}" for head, v in zip(JOIN_COLUMNS[1:], row[1:]) if v != "–"]
        parts.append(Text(f"{row[0]}: {', '.join(named)}"))
    return Group(*parts)


def _table(snap: Snapshot, width: int | None = None) -> Any:
    """The live display: tables when they fit in ``width`` columns, else compact rows."""
    wide = _wide(snap)
    if width is None:
        return wide
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=10_000)  # a measurement is clamped to the console's width
    needed = max(Measurement.get(console, console.options, r).maximum for r in wide.renderables)
    return wide if needed <= width else _compact(snap)


#: the columns of the joins-and-tables table, as the live page has them
JOIN_COLUMNS = (
    "node",
    "held left",
    "held right",
    "late left",
    "late right",
    "waited",
    "oldest waiting",
    "keys",
    "versions dropped",
    "cache hits",
    "cache misses",
    "cache size",
)


def join_rows(snap: Snapshot) -> list[list[str]]:
    """One row of :data:`JOIN_COLUMNS` per join and table (the terminal's and the notebook's;
    the page draws the same from ``GET /api/job``): ``–`` where a figure is not the node's,
    the oldest waiting record's event time as a watermark is shown."""

    def count(value: int | None) -> str:
        return "–" if value is None else f"{value:,}"

    rows = []
    for n in snap.nodes:
        j = n.join
        if j is None:
            continue
        oldest = "–" if j.oldest_waiting is None else watermark_text(j.oldest_waiting)
        rows.append(
            [
                n.id,
                count(j.buffered.get("left")),
                count(j.buffered.get("right")),
                count(j.late.get("left")),
                count(j.late.get("right")),
                count(j.waited),
                oldest,
                count(j.keys),
                count(j.versions_dropped),
                count(j.cache_hits),
                count(j.cache_misses),
                count(j.cache_size),
            ]
        )
    return rows


def _joins_table(snap: Snapshot) -> Any:
    """The joins and tables (None: there are none)."""
    from rich.table import Table

    rows = join_rows(snap)
    if not rows:
        return None
    table = Table(title="joins and tables", title_justify="left", expand=False)
    for i, head in enumerate(JOIN_COLUMNS):
        table.add_column(head, justify="left" if i in (0, 6) else "right")
    for row in rows:
        table.add_row(*row)
    return table


def _event_time_table(snap: Snapshot) -> Any:
    """The event-time nodes: watermarks, open windows, late records (None: there are none)."""
    from rich.table import Table

    shown = [n for n in snap.nodes if n.watermark is not None or n.open_windows is not None]
    if not shown:
        return None
    table = Table(title="event time", title_justify="left", expand=False)
    table.add_column("node")
    table.add_column("watermark")
    table.add_column("open windows", justify="right")
    table.add_column("late records", justify="right")
    for n in shown:
        table.add_row(
            n.id,
            watermark_text(n.watermark) if n.watermark is not None else "",
            "" if n.open_windows is None else f"{n.open_windows:,}",
            "" if n.late_records is None else f"{n.late_records:,}",
        )
    return table


class ProgressReporter(JobListener):
    """Shows a running job's progress on ``out`` from a thread (see the module docs)."""

    def __init__(
        self, job: Job, out: IO[str], interval: float = 10.0, live: bool | None = None
    ) -> None:
        self.job = job
        self.out = out
        self.interval = interval
        if live is None:
            # optional: a user's stream object may not say whether it is a terminal
            isatty = getattr(out, "isatty", None)
            live = bool(isatty and isatty())
        if live:
            try:
                import rich  # noqa: F401
            except ImportError:
                logger.info("rich is not installed: plain progress lines")
                live = False
        self.live = live
        self._stop = threading.Event()
        #: set once the run started (or ended without starting), or the reporter stops
        self._began = threading.Event()
        self._thread: threading.Thread | None = None

    async def started(self, job: Job) -> None:
        self._began.set()

    async def stopped(self, job: Job, state: RunState) -> None:
        self._began.set()

    def start(self) -> None:
        """Listen to the job and report from a thread of its own until :meth:`stop`."""
        self.job.add_listener(self)
        if self.job.running or self.job.ended_at is not None:
            self._began.set()  # it started before the reporter
        self._thread = threading.Thread(target=self._run, name="rivermark-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._began.set()
        if self._thread is not None:
            self._thread.join(10)
        self.job.remove_listener(self)

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def _wait_started(self) -> bool:
        self._began.wait()
        if not self._stop.is_set():
            return True
        return self.job.started_at is not None

    def _run(self) -> None:
        if not self._wait_started():
            return
        self._print(start_line(self.job))
        metrics = metrics_of(self.job)
        metrics.watch()
        if self.live:
            self._run_live()
            return
        while not self._stop.wait(self.interval):
            self._print(progress_line(metrics.read()))

    def _run_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=self.out)
        metrics = metrics_of(self.job)

        def draw() -> Any:
            return _table(metrics.read(), console.width)

        with Live(draw(), console=console, auto_refresh=False) as live:
            while not self._stop.wait(0.5):
                live.update(draw(), refresh=True)
            live.update(draw(), refresh=True)

    def summary(self) -> None:
        """Print the end-of-run summary."""
        for line in summary_lines(metrics_of(self.job).read(), run_state(self.job)):
            self._print(line)
