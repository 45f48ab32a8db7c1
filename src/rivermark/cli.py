"""The ``rivermark`` command: run an app as a checkpointed job, inspect checkpoints.

``rivermark run path/to/app.py:name --checkpoint DIR [--every 2s] [--keep N]``
imports the script, takes the graph that the module-level variable ``name``
belongs to and runs it as a :class:`rivermark.checkpoint.Job`.  It exits 0
once every source is exhausted and the final checkpoint is written; SIGTERM
and Ctrl-C stop it gracefully (final checkpoint, exit 0).  Every option of
``Job`` has a flag and an environment variable (``RIVERMARK_CHECKPOINT``,
``RIVERMARK_EVERY``, ...); ``rivermark run --help`` lists them.

``rivermark checkpoints list|show|verify|diff DIR [EPOCH [EPOCH2]]`` lists,
describes, verifies (exit 1 if any checkpoint is damaged) and compares
checkpoints; ``--json`` prints the same as JSON.  They are read-only: a path
that is not a checkpoint directory is a usage error and nothing is created.
``--from-scratch`` starts over explicitly (``docs/checkpointing.md``).

A usage error (unknown option, bad value) prints one line and exits 2.

Each subcommand is a thin wrapper: the work is done by library functions
(:mod:`rivermark.checkpoint.inspection`, :class:`Job`) and by the small
``_do_*`` functions below, which print.

>>> import tempfile
>>> main(["checkpoints", "list", tempfile.mkdtemp()])
2
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import click

from ._app import load_app, parse_every
from .checkpoint import CheckpointCorruptError, Job, Store
from .checkpoint import inspection as insp
from .errors import RivermarkError
from .observe.logs import configure_logging
from .observe.progress import ProgressReporter

logger = logging.getLogger(__name__)

__all__ = ["main", "cli"]

_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def _version() -> str:
    try:
        return version("rivermark")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


# ---------------------------------------------------------------- logging options
def _set_meta(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None and value is not False:
            ctx.meta[f"rivermark.{key}"] = value

    return store


def _logging_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--log-level``, ``--log-format`` and ``-v`` on the group and on every subcommand."""
    f = click.option(
        "-v",
        "--verbose",
        is_flag=True,
        expose_value=False,
        callback=_set_meta("verbose"),
        help="Log at INFO level (same as --log-level INFO).",
    )(f)
    f = click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        expose_value=False,
        envvar="RIVERMARK_LOG_FORMAT",
        callback=_set_meta("log_format"),
        help="Log lines as text or as one JSON object per line (fields: time, level, "
        "logger, message, node, epoch, position).  [env: RIVERMARK_LOG_FORMAT]",
    )(f)
    f = click.option(
        "--log-level",
        type=click.Choice(_LEVELS, case_sensitive=False),
        expose_value=False,
        envvar="RIVERMARK_LOG_LEVEL",
        callback=_set_meta("log_level"),
        help="Lowest level of log records written to stderr (default WARNING).  "
        "[env: RIVERMARK_LOG_LEVEL]",
    )(f)
    return f


def _setup_logging(ctx: click.Context) -> None:
    meta = ctx.meta
    level = meta.get("rivermark.log_level") or (
        "INFO" if meta.get("rivermark.verbose") else "WARNING"
    )
    configure_logging(str(level).upper(), meta.get("rivermark.log_format") or "text")


# ---------------------------------------------------------------- the group
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="rivermark")
@_logging_options
def cli() -> None:
    """rivermark: stream jobs with consistent checkpoints.

    Run an app with 'rivermark run app.py:name --checkpoint DIR'; inspect its
    checkpoints with 'rivermark checkpoints list DIR'.  Every subcommand has
    its own --help.
    """


# ---------------------------------------------------------------- run
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
        "metrics_port": opts["metrics_port"],
        "metrics_addr": opts["metrics_addr"],
        "ui": opts["ui"],
        "ui_addr": opts["ui_addr"],
    }


def _do_run(target: str, opts: dict[str, Any]) -> int:
    node = load_app(target)
    job = Job(node, **_job_options(opts))
    job.install_signal_handlers()
    reporter = None
    if not opts["quiet"]:
        reporter = ProgressReporter(job, sys.stdout, interval=opts["progress_interval"])
        reporter.start()
    try:
        job.run()
    finally:
        if reporter is not None:
            reporter.stop()
    if reporter is not None:
        reporter.summary()
    return 0


@cli.command("run")
@click.argument("target", metavar="APP.py:NAME")
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
    "--exactly-once/--no-exactly-once",
    default=False,
    envvar="RIVERMARK_EXACTLY_ONCE",
    help="Refuse graphs that cannot give exactly-once results.  [env: RIVERMARK_EXACTLY_ONCE]",
)
@click.option(
    "--allow-new-nodes/--no-allow-new-nodes",
    default=False,
    envvar="RIVERMARK_ALLOW_NEW_NODES",
    help="Let stateful nodes added since the checkpoint start empty.  "
    "[env: RIVERMARK_ALLOW_NEW_NODES]",
)
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
@click.option(
    "--from-scratch",
    is_flag=True,
    envvar="RIVERMARK_FROM_SCRATCH",
    help="Set every checkpoint aside and start over, sinks included (empties output files).  "
    "[env: RIVERMARK_FROM_SCRATCH]",
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
@_logging_options
@click.pass_context
def run_command(ctx: click.Context, /, target: str, **opts: Any) -> int:
    """Run APP.py:NAME as a checkpointed job.

    NAME is a module-level variable of APP.py holding a node of the graph
    (usually its source).  The job runs until every source is exhausted,
    writes a final checkpoint and exits 0; SIGTERM and Ctrl-C stop it the
    same way.  Run it again on the same --checkpoint directory to resume.

    It says what it resumed from, shows progress (a live table on a
    terminal, a line every --progress-interval seconds otherwise) and ends
    with a summary; --quiet turns all three off.
    """
    _setup_logging(ctx)
    return _do_run(target, opts)


# ---------------------------------------------------------------- graph
def _do_graph(target: str, fmt: str) -> int:
    from .observe.graphtext import to_dot, to_mermaid

    node = load_app(target)
    print(to_dot(node) if fmt == "dot" else to_mermaid(node))
    return 0


@cli.command("graph")
@click.argument("target", metavar="APP.py:NAME")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["dot", "mermaid"]),
    default="dot",
    show_default=True,
    help="Graphviz dot source or a Mermaid flowchart.",
)
@_logging_options
def graph_command(target: str, fmt: str) -> int:
    """Print the graph of APP.py:NAME as text (no Graphviz 'dot' program needed).

    Render dot output with 'dot -Tpng -o graph.png'; Mermaid output renders in
    GitHub markdown and many editors.
    """
    _setup_logging(click.get_current_context())
    return _do_graph(target, fmt)


# ---------------------------------------------------------------- checkpoints
def _store(directory: str) -> Store:
    return insp.open_checkpoint_location(directory)


def _no_checkpoints(store: Store) -> int:
    print(f"rivermark: no checkpoints in {insp.where(store)}", file=sys.stderr)
    return 1


def _damaged(err: CheckpointCorruptError) -> int:
    print(f"rivermark: damaged: {err}", file=sys.stderr)
    return 1


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=repr))


def _do_list(directory: str, as_json: bool) -> int:
    store = _store(directory)
    rows = insp.list_checkpoints(store)
    if as_json:
        _print_json(rows)
        return 0
    if not rows:
        print("no checkpoints")
        return 0
    print(f"{'EPOCH':>12}  {'TIME (UTC)':<24}  {'STATE BYTES':>11}  {'SOURCES':>7}")
    for r in rows:
        if r["error"] is not None:
            print(f"{r['epoch']:>12}  DAMAGED: {r['error']}")
        else:
            print(
                f"{r['epoch']:>12}  {insp.format_time(r['time']):<24}  "
                f"{r['size']:>11} bytes  {r['sources']:>3}"
            )
    return 0


def _do_show(
    directory: str, epoch: int | None, state: str | None, max_chars: int, as_json: bool
) -> int:
    store = _store(directory)
    if not store.list_epochs():
        return _no_checkpoints(store)
    try:
        if state is not None:
            value = insp.read_node_state(store, epoch, state)
            if as_json:
                _print_json(value)
            else:
                print(insp.render_value(value, max_chars))
            return 0
        info = insp.show_checkpoint(store, epoch)
    except CheckpointCorruptError as err:
        return _damaged(err)
    if as_json:
        _print_json(info)
    else:
        _print_checkpoint(info)
    return 0


def _print_checkpoint(info: dict[str, Any]) -> None:
    """``rivermark checkpoints show``'s text: positions and their meaning, state, sinks."""
    print(f"checkpoint {info['epoch']} at {insp.format_time(info['time'])}")
    for sid, pos in info["positions"].items():
        value = pos["value"]
        if isinstance(value, dict):
            for part, off in sorted(value.items(), key=lambda kv: str(kv[0])):
                print(f"  position {sid}[{part}] = {off!r}")
        else:
            print(f"  position {sid} = {value!r}")
        for line in pos["meaning"]:
            print(f"    {line}")
    for nid, meta in info["state"].items():
        print(f"  state {nid}: {meta['size']} bytes sha256={meta['sha256'][:12]}")
        chain = info["chains"].get(nid)
        if chain is not None:
            print(
                f"    delta chain: base {chain['base']} ({chain['base_size']} bytes) + "
                f"{len(chain['deltas'])} delta(s) ({chain['delta_size']} bytes)"
            )
    for kid, handle in info["sinks"].items():
        print(f"  sink {kid}: {handle!r}")


def _do_verify(directory: str, epoch: int | None, as_json: bool) -> int:
    store = _store(directory)
    results = insp.verify_checkpoints(store, epoch)
    if not results:
        return _no_checkpoints(store)
    if as_json:
        _print_json(results)
    else:
        for r in results:
            print(
                f"{r['epoch']:>12}  ok" if r["ok"] else f"{r['epoch']:>12}  DAMAGED: {r['error']}"
            )
        if epoch is None:
            good = [r["epoch"] for r in results if r["ok"]]
            if good:
                print(f"{len(good)} of {len(results)} verify; a job resumes from {good[-1]}")
            else:
                print(
                    f"none of {len(results)} verifies; a job refuses to start (restore a good "
                    "copy, or run with --from-scratch)"
                )
    return 0 if all(r["ok"] for r in results) else 1


def _do_diff(directory: str, a: int | None, b: int | None, as_json: bool) -> int:
    store = _store(directory)
    if not store.list_epochs():
        return _no_checkpoints(store)
    try:
        d = insp.diff_checkpoints(store, a, b)
    except CheckpointCorruptError as err:
        return _damaged(err)
    if as_json:
        _print_json(d)
        return 0
    print(f"diff {d['from']} -> {d['to']}")
    for sid, (pa, pb) in d["positions"].items():
        print(f"  position {sid}: {pa!r} -> {pb!r}")
    for nid, (sa, sb) in d["state"].items():
        print(f"  state {nid}: {sa} -> {sb} bytes (checksum differs)")
    for kid, (ha, hb) in d["sinks"].items():
        print(f"  sink {kid}: {ha!r} -> {hb!r}")
    if d["fingerprint_differs"]:
        print("  graph fingerprint differs")
    return 0


@cli.group("checkpoints")
@_logging_options
def checkpoints() -> None:
    """Inspect a checkpoint directory (no job needs to be running on it)."""


_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
_dir_argument = click.argument("directory", metavar="DIR")


@checkpoints.command("list")
@_dir_argument
@_json_option
@_logging_options
def list_command(directory: str, as_json: bool) -> int:
    """List the checkpoints in DIR: epoch, time, state size, sources."""
    _setup_logging(click.get_current_context())
    return _do_list(directory, as_json)


@checkpoints.command("show")
@_dir_argument
@click.argument("epoch", type=int, required=False)
@click.option(
    "--state",
    metavar="NODE",
    help="Print the state of node NODE (unpickled, pretty-printed); node ids are listed "
    "by 'show' without --state.",
)
@click.option(
    "--max-chars",
    type=click.IntRange(min=0),
    default=2000,
    show_default=True,
    help="Cut the printed state after this many characters (0: never).",
)
@_json_option
@_logging_options
def show_command(
    directory: str, epoch: int | None, state: str | None, max_chars: int, as_json: bool
) -> int:
    """Describe checkpoint EPOCH of DIR (default: the newest).

    Prints each source's position with its meaning (file, line and bytes
    left; Kafka topic, partition and offset), the state files and the sink
    handles.
    """
    _setup_logging(click.get_current_context())
    return _do_show(directory, epoch, state, max_chars, as_json)


@checkpoints.command("verify")
@_dir_argument
@click.argument("epoch", type=int, required=False)
@_json_option
@_logging_options
def verify_command(directory: str, epoch: int | None, as_json: bool) -> int:
    """Verify checksums of every checkpoint in DIR (or of EPOCH); exit 1 if one is damaged."""
    _setup_logging(click.get_current_context())
    return _do_verify(directory, epoch, as_json)


@checkpoints.command("diff")
@_dir_argument
@click.argument("epoch", type=int, required=False)
@click.argument("epoch2", type=int, required=False)
@_json_option
@_logging_options
def diff_command(directory: str, epoch: int | None, epoch2: int | None, as_json: bool) -> int:
    """Compare checkpoints EPOCH and EPOCH2 of DIR (default: the last two)."""
    _setup_logging(click.get_current_context())
    return _do_diff(directory, epoch, epoch2, as_json)


# ---------------------------------------------------------------- entry point
def _usage_line(err: click.UsageError) -> str:
    ctx = err.ctx
    where = f"{ctx.command_path} --help" if ctx is not None else "rivermark --help"
    return f"rivermark: error: {err.format_message()} (see '{where}')"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rivermark`` command; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        result = cli.main(args=args, prog_name="rivermark", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:
        print(e.format_message(), file=sys.stderr)
        return 2
    except click.UsageError as e:
        print(_usage_line(e), file=sys.stderr)
        return 2
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.Abort:
        print("rivermark: aborted", file=sys.stderr)
        return 1
    except click.ClickException as e:
        print(f"rivermark: error: {e.format_message()}", file=sys.stderr)
        return e.exit_code
    except RivermarkError as e:
        msg = str(e)
        print(msg if msg.startswith("rivermark") else f"rivermark: {msg}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        logger.debug("rivermark failed", exc_info=True)
        print(f"rivermark: {e}", file=sys.stderr)
        return 1
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
