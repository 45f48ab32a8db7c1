"""``rivermark run``: an app's graph as a checkpointed job, with progress and a summary."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import click

from rivermark._app import load_app_with_migrations, parse_every
from rivermark.checkpoint import Job
from rivermark.checkpoint.state.rocks.backend import parse_cache
from rivermark.cli.group import cli
from rivermark.cli.options import logged, set_meta, trust_option, upgrade_options
from rivermark.observe.metrics import Snapshot, metrics_of
from rivermark.observe.progress import ProgressReporter, summary_lines

__all__ = ["run_command", "stopped_line"]


def _job_options(opts: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :class:`Job` from the ``run`` options."""
    return {
        "checkpoint": opts["checkpoint"],
        "every": parse_every(opts["every"]),
        "every_batches": opts["every_batches"],
        "keep": opts["keep"],
        "exactly_once": opts["exactly_once"],
        "allow_new_nodes": opts["allow_new_nodes"],
        "on_error": opts["on_error"],
        "from_scratch": opts["from_scratch"],
        "from_savepoint": opts["from_savepoint"],
        "metrics_port": opts["metrics_port"],
        "metrics_addr": opts["metrics_addr"],
        "ui": opts["ui"],
        "ui_addr": opts["ui_addr"],
        "trust_store": opts["trust_store"],
        "rename": opts["rename"],
        "allow_dropped_state": opts["allow_dropped_state"],
        "state": opts["state"],
        "state_dir": opts["state_dir"],
        "state_cache": parse_cache(opts["state_cache"], "rivermark run: --state-cache"),
    }


def _note_stop_signals() -> list[int]:
    """Remember which signal stopped the job, on top of the job's own handlers."""
    received: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if not callable(handler):  # pragma: no cover - Job always installs a function
            continue

        def noting(
            num: int,
            frame: FrameType | None,
            handler: Callable[[int, FrameType | None], object] = handler,
        ) -> None:
            received.append(num)
            handler(num, frame)

        signal.signal(signum, noting)
    return received


def stopped_line(signum: int, snap: Snapshot) -> str:
    """What ``rivermark run`` says when a signal stopped the job gracefully.

    >>> from rivermark.observe.metrics import SourceMetrics
    >>> src = SourceMetrics("lines", "lines", 42, 0.0, 1234, None, "bytes", False)
    >>> print(stopped_line(signal.SIGINT, Snapshot(0, 1, (), (src,), 3, (), None, 0, False)))
    stopped by the user (Ctrl-C) at lines: 42 records, position 1234; no checkpoint written; run the same command again to resume
    """
    who = "the user (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name
    where = ", ".join(
        f"{s.id}: {s.records:,} records, position {_short(s.position)}" for s in snap.sources
    )
    last = snap.last_checkpoint
    epoch = f"last checkpoint epoch {last.epoch}" if last is not None else "no checkpoint written"
    return (
        f"stopped by {who} at {where or 'no source'}; {epoch}; run the same command again to resume"
    )


def _short(value: object) -> str:
    if isinstance(value, dict) and isinstance(value.get("offset"), int):
        value = value["offset"]  # a file's offset with the digest of the bytes before it
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _do_run(target: str, opts: dict[str, Any]) -> int:
    node, migrate = load_app_with_migrations(target, opts["migrate"])
    job = Job(node, **_job_options(opts), migrate=migrate)
    job.install_signal_handlers(savepoint=opts["savepoint_on_stop"])
    received = _note_stop_signals()
    reporter = None
    if not opts["quiet"]:
        reporter = ProgressReporter(job, sys.stdout, interval=opts["progress_interval"])
        reporter.start()
    try:
        job.run()
    finally:
        if reporter is not None:
            reporter.stop()
    if received:
        # said even with --quiet: the run did not finish, and this is how to go on
        snap = metrics_of(job).read()
        print(stopped_line(received[0], snap), file=sys.stderr)
        if opts["savepoint_on_stop"] and job.last_savepoint is not None:
            print(f"stopped with savepoint {job.last_savepoint}", file=sys.stderr)
        if reporter is not None:
            for line in summary_lines(snap)[1:]:  # the figures, without "done in ..."
                print(line)
    elif reporter is not None:
        reporter.summary()
    return 0


@cli.command("run")
@click.argument("target", metavar="APP.py:NAME|MODULE:NAME")
@click.option(
    "--checkpoint",
    "-c",
    required=True,
    envvar="RIVERMARK_CHECKPOINT",
    metavar="DIR",
    help="Checkpoint directory or URL (s3://bucket/prefix); running again on it resumes.  "
    "[env: RIVERMARK_CHECKPOINT]",
)
@click.option(
    "--every",
    default="2s",
    show_default=True,
    envvar="RIVERMARK_EVERY",
    help="Checkpoint interval (2s, 200ms, 1.5; 0 or none: only at start and end).  "
    "[env: RIVERMARK_EVERY]",
)
@click.option(
    "--every-batches",
    type=click.IntRange(min=1),
    default=None,
    envvar="RIVERMARK_EVERY_BATCHES",
    help="Also checkpoint after this many records from the sources.  "
    "[env: RIVERMARK_EVERY_BATCHES]",
)
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    envvar="RIVERMARK_KEEP",
    help="How many checkpoints to keep.  [env: RIVERMARK_KEEP]",
)
@click.option(
    "--state",
    type=click.Choice(["memory", "rocksdb"]),
    default="memory",
    show_default=True,
    envvar="RIVERMARK_STATE",
    help="Where keyed state lives: in memory, or in RocksDB (larger than memory; "
    "pip install 'rivermark[rocksdb]').  [env: RIVERMARK_STATE]",
)
@click.option(
    "--state-dir",
    default=None,
    envvar="RIVERMARK_STATE_DIR",
    metavar="DIR",
    help="Local directory of the RocksDB state, one job at a time (default: one per job in "
    "this user's private <tmp>/rivermark-state-<uid>, removed when the job ends).  "
    "[env: RIVERMARK_STATE_DIR]",
)
@click.option(
    "--state-cache",
    default=None,
    envvar="RIVERMARK_STATE_CACHE",
    metavar="BYTES",
    help="RocksDB cache of the job, which bounds its memory (default 256MiB).  "
    "[env: RIVERMARK_STATE_CACHE]",
)
@click.option(
    "--exactly-once/--no-exactly-once",
    default=False,
    envvar="RIVERMARK_EXACTLY_ONCE",
    help="Refuse graphs that cannot give exactly-once results.  [env: RIVERMARK_EXACTLY_ONCE]",
)
@upgrade_options
@click.option(
    "--on-error",
    type=click.Choice(["raise", "skip"]),
    default=None,
    envvar="RIVERMARK_ON_ERROR",
    help="Error policy of nodes that set none: raise (stop the job) or skip (drop and "
    "count the record).  [env: RIVERMARK_ON_ERROR]",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    envvar="RIVERMARK_METRICS_PORT",
    metavar="PORT",
    help="Serve Prometheus metrics at http://ADDR:PORT/metrics while the job runs "
    "(0: a free port).  [env: RIVERMARK_METRICS_PORT]",
)
@click.option(
    "--metrics-addr",
    default="127.0.0.1",
    show_default=True,
    envvar="RIVERMARK_METRICS_ADDR",
    metavar="ADDR",
    help="Address the metrics endpoint listens on (0.0.0.0: every interface).  "
    "[env: RIVERMARK_METRICS_ADDR]",
)
@click.option(
    "--ui",
    type=click.IntRange(0, 65535),
    default=None,
    envvar="RIVERMARK_UI",
    metavar="PORT",
    help="Serve the live pipeline page at http://UI-ADDR:PORT/ while the job runs.  "
    "[env: RIVERMARK_UI]",
)
@click.option(
    "--ui-addr",
    default="127.0.0.1",
    show_default=True,
    envvar="RIVERMARK_UI_ADDR",
    metavar="ADDR",
    help="Address the page listens on.  [env: RIVERMARK_UI_ADDR]",
)
@trust_option
@click.option(
    "--ui-access-log",
    is_flag=True,
    envvar="RIVERMARK_UI_ACCESS_LOG",
    expose_value=False,
    callback=set_meta("ui_access_log"),
    help="Log every request to the live page (at INFO level; off by default).  "
    "[env: RIVERMARK_UI_ACCESS_LOG]",
)
@click.option(
    "--from-scratch",
    is_flag=True,
    envvar="RIVERMARK_FROM_SCRATCH",
    help="Set every checkpoint aside and start over, sinks included (empties output files).  "
    "[env: RIVERMARK_FROM_SCRATCH]",
)
@click.option(
    "--from-savepoint",
    default=None,
    envvar="RIVERMARK_FROM_SAVEPOINT",
    metavar="DIR[@EPOCH]",
    help="Start from a savepoint: the newest in DIR (or URL), or DIR@EPOCH.  Into an empty "
    "--checkpoint it is copied first; in its own location newer checkpoints are set aside.  "
    "[env: RIVERMARK_FROM_SAVEPOINT]",
)
@click.option(
    "--savepoint-on-stop",
    is_flag=True,
    envvar="RIVERMARK_SAVEPOINT_ON_STOP",
    help="Make the final checkpoint of a stop by SIGTERM or Ctrl-C a savepoint.  "
    "[env: RIVERMARK_SAVEPOINT_ON_STOP]",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    envvar="RIVERMARK_QUIET",
    help="Show no progress, start line or summary.  [env: RIVERMARK_QUIET]",
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=0.05),
    default=10.0,
    show_default=True,
    envvar="RIVERMARK_PROGRESS_INTERVAL",
    metavar="SECONDS",
    help="Seconds between progress lines when stdout is not a terminal.  "
    "[env: RIVERMARK_PROGRESS_INTERVAL]",
)
@logged
def run_command(target: str, **opts: object) -> int:
    """Run APP.py:NAME (or package.module:NAME) as a checkpointed job.

    NAME is a module-level variable of the app holding a node of the graph
    (usually its source).  The job runs until every source is exhausted,
    writes a final checkpoint and exits 0; SIGTERM and Ctrl-C stop it the
    same way and say where it stopped.  Run it again on the same
    --checkpoint directory to resume.

    It says what it resumed from, shows progress (a live table on a
    terminal, a line every --progress-interval seconds otherwise) and ends
    with a summary; --quiet turns all three off.
    """
    return _do_run(target, opts)
