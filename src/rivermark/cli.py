"""The ``rivermark`` command: run an app as a checkpointed job, inspect checkpoints.

``rivermark run path/to/app.py:name --checkpoint DIR [--every 2s] [--keep N]``
(or ``package.module:name``) imports the app, takes the graph that the
module-level variable ``name`` belongs to and runs it as a
:class:`rivermark.checkpoint.Job`.  It exits 0 once every source is exhausted
and the final checkpoint is written; SIGTERM and Ctrl-C stop it gracefully
(final checkpoint, exit 0) and say where it stopped and how to resume.
``python -m rivermark`` is the same command.  Every option of
``Job`` has a flag and an environment variable (``RIVERMARK_CHECKPOINT``,
``RIVERMARK_EVERY``, ...); ``rivermark run --help`` lists them.

``rivermark checkpoints list|show|verify|diff DIR [EPOCH [EPOCH2]]`` lists,
describes, verifies (exit 1 if any checkpoint is damaged) and compares
checkpoints; ``--json`` prints the same as JSON.  They are read-only: a path
that is not a checkpoint directory is a usage error and nothing is created.
``--from-scratch`` starts over explicitly, ``--from-savepoint DIR[@EPOCH]``
starts from a savepoint and ``--savepoint-on-stop`` makes a signal's final
checkpoint one (``docs/checkpointing.md``).

``rivermark replay APP.py:NAME --from DIR[@EPOCH] --until EPOCH|end --output
OUT [--diff]`` runs new code from a checkpoint of the live job, with every
sink's output written aside (:mod:`rivermark.checkpoint.replay`,
``docs/upgrading.md``).

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
import signal
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import click

from ._app import load_app, load_app_with_migrations, parse_every
from .checkpoint import CheckpointCorruptError, Job, Store, replay
from .checkpoint import inspection as insp
from .checkpoint.signing import Keyring, Trust
from .checkpoint.upgrade import UpgradeRules, plan_restore
from .errors import RivermarkError, exit_code_of
from .observe.logs import configure_logging
from .observe.metrics import Snapshot, metrics_of
from .observe.progress import ProgressReporter, summary_lines

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


def _logging_options(f: Callable[..., Any], hidden: bool = True) -> Callable[..., Any]:
    """``--log-level``, ``--log-format`` and ``-v``: shown in the group's help only.

    Every subcommand accepts them too (``rivermark run app.py:x -v``), hidden
    from its help so that they are described once, in ``rivermark --help``.
    """
    f = click.option(
        "-v",
        "--verbose",
        is_flag=True,
        expose_value=False,
        callback=_set_meta("verbose"),
        hidden=hidden,
        help="Log at INFO level (same as --log-level INFO).",
    )(f)
    f = click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        expose_value=False,
        envvar="RIVERMARK_LOG_FORMAT",
        callback=_set_meta("log_format"),
        hidden=hidden,
        help="Log lines as text or as one JSON object per line (fields: time, level, "
        "logger, message, node, epoch, position).  [env: RIVERMARK_LOG_FORMAT]",
    )(f)
    f = click.option(
        "--log-level",
        type=click.Choice(_LEVELS, case_sensitive=False),
        expose_value=False,
        envvar="RIVERMARK_LOG_LEVEL",
        callback=_set_meta("log_level"),
        hidden=hidden,
        help="Lowest level of log records written to stderr (default WARNING).  "
        "[env: RIVERMARK_LOG_LEVEL]",
    )(f)
    return f


def _shown_logging_options(f: Callable[..., Any]) -> Callable[..., Any]:
    return _logging_options(f, hidden=False)


def _setup_logging(ctx: click.Context) -> None:
    meta = ctx.meta
    level = meta.get("rivermark.log_level") or (
        "INFO" if meta.get("rivermark.verbose") else "WARNING"
    )
    configure_logging(str(level).upper(), meta.get("rivermark.log_format") or "text")
    # the live page's web server logs one line per request at INFO: only when asked
    access = logging.getLogger("aiohttp.access")
    access.setLevel(logging.INFO if meta.get("rivermark.ui_access_log") else logging.WARNING)


# ---------------------------------------------------------------- the group
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="rivermark")
@_shown_logging_options
def cli() -> None:
    """rivermark: stream jobs with consistent checkpoints.

    Run an app with 'rivermark run app.py:name --checkpoint DIR'; inspect its
    checkpoints with 'rivermark checkpoints list DIR'.  Every subcommand has
    its own --help; the logging options below are accepted by every
    subcommand as well (before or after its name).
    """


# ---------------------------------------------------------------- run
_trust_option = click.option(
    "--trust-store",
    is_flag=True,
    envvar="RIVERMARK_TRUST_STORE",
    help="Trust whoever can write the checkpoint store: accept unsigned checkpoints and load "
    "pickled state without a verified signature (see docs/security.md).  "
    "[env: RIVERMARK_TRUST_STORE]",
)


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
        "state_cache": opts["state_cache"],
    }


def _parse_renames(ctx: click.Context, param: click.Parameter, value: Any) -> dict[str, str]:
    """``--rename OLD=NEW`` (repeatable) as ``Job(rename=...)``."""
    out: dict[str, str] = {}
    for text in value or ():
        old, sep, new = text.partition("=")
        if not sep or not old or not new or "=" in new:
            raise click.BadParameter(f"{text!r} is not OLD=NEW (two node ids)", ctx, param)
        if old in out:
            raise click.BadParameter(f"{old!r} is renamed twice", ctx, param)
        out[old] = new
    return out


def _parse_migrations(ctx: click.Context, param: click.Parameter, value: Any) -> dict[str, str]:
    """``--migrate NODE=FUNCTION`` (repeatable): which function migrates which node's state."""
    out: dict[str, str] = {}
    for text in value or ():
        nid, sep, fn = text.partition("=")
        if not sep or not nid or not fn:
            raise click.BadParameter(
                f"{text!r} is not NODE=FUNCTION (a node id and a function of the app, or "
                "module:function)",
                ctx,
                param,
            )
        if nid in out:
            raise click.BadParameter(f"{nid!r} is migrated twice", ctx, param)
        out[nid] = fn
    return out


def _parse_dropped(ctx: click.Context, param: click.Parameter, value: Any) -> bool | list[str]:
    """``--allow-dropped-state NODE`` (repeatable, or ``all``) as ``Job(allow_dropped_state=...)``."""
    ids = list(value or ())
    return True if "all" in ids else ids


_rename_option = click.option(
    "--rename",
    multiple=True,
    metavar="OLD=NEW",
    callback=_parse_renames,
    envvar="RIVERMARK_RENAME",
    help="Restore the state of node OLD of the checkpoint into node NEW (repeatable; "
    "see docs/upgrading.md).  [env: RIVERMARK_RENAME, space-separated]",
)
_dropped_option = click.option(
    "--allow-dropped-state",
    multiple=True,
    metavar="NODE",
    callback=_parse_dropped,
    envvar="RIVERMARK_ALLOW_DROPPED_STATE",
    help="Let the state of NODE, removed from the graph since the checkpoint, be dropped "
    "(repeatable; 'all' for every removed node).  "
    "[env: RIVERMARK_ALLOW_DROPPED_STATE, space-separated]",
)
_migrate_option = click.option(
    "--migrate",
    multiple=True,
    metavar="NODE=FUNCTION",
    callback=_parse_migrations,
    envvar="RIVERMARK_MIGRATE",
    help="Turn the restored state of NODE into its new shape with FUNCTION(old_state), a "
    "function of the app or module:function (repeatable; Job(migrate=...); see "
    "docs/upgrading.md).  [env: RIVERMARK_MIGRATE, space-separated]",
)
_new_nodes_option = click.option(
    "--allow-new-nodes/--no-allow-new-nodes",
    default=False,
    envvar="RIVERMARK_ALLOW_NEW_NODES",
    help="Let stateful nodes added since the checkpoint start empty.  "
    "[env: RIVERMARK_ALLOW_NEW_NODES]",
)


def _upgrade_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """How a restore meets a changed graph (see docs/upgrading.md): ``run``, ``replay``, ``diff``."""
    return _new_nodes_option(_rename_option(_dropped_option(_migrate_option(command))))


def _note_stop_signals() -> list[int]:
    """Remember which signal stopped the job, on top of the job's own handlers."""
    received: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if not callable(handler):  # pragma: no cover - Job always installs a function
            continue

        def noting(num: int, frame: Any, handler: Callable[[int, Any], Any] = handler) -> None:
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


def _short(value: Any) -> str:
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
@_upgrade_options
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
@_trust_option
@click.option(
    "--ui-access-log",
    is_flag=True,
    envvar="RIVERMARK_UI_ACCESS_LOG",
    expose_value=False,
    callback=_set_meta("ui_access_log"),
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
@_logging_options
@click.pass_context
def run_command(ctx: click.Context, /, target: str, **opts: Any) -> int:
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
def _store(directory: str, trust_store: bool = False) -> Store:
    """The store at ``directory``, read with the configured checkpoint keys."""
    store = insp.open_checkpoint_location(directory)
    store.trust = Trust(Keyring.configured(), trust_store)
    return store


def _no_checkpoints(store: Store) -> int:
    print(f"rivermark: no checkpoints in {insp.where(store)}", file=sys.stderr)
    return 1


def _damaged(err: CheckpointCorruptError) -> int:
    print(f"rivermark: damaged: {err}", file=sys.stderr)
    return 1


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=repr))


def _duration_text(value: float | None) -> str:
    """``0.042 s``, or ``-`` when the checkpoint did not record it."""
    return "-" if value is None else f"{value:.3f} s"


def _do_list(directory: str, as_json: bool) -> int:
    store = _store(directory)
    rows = insp.list_checkpoints(store)
    if as_json:
        _print_json(rows)
        return 0
    if not rows:
        print("no checkpoints")
        return 0
    print(
        f"{'EPOCH':>12}  {'TIME (UTC)':<24}  {'KIND':<9}  {'END TO END':>10}  {'WRITE':>9}  "
        f"{'PAUSE':>9}  "
        f"{'STATE BYTES':>17}  {'SOURCES':>7}  RUN"
    )
    for r in rows:
        if r["error"] is not None:
            print(f"{r['epoch']:>12}  DAMAGED: {r['error']}")
        else:
            began = f"  {r['run_began']}" if r["run_began"] else ""
            print(
                f"{r['epoch']:>12}  {insp.format_time(r['time']):<24}  {r['kind']:<9}  "
                f"{_duration_text(r['duration']):>10}  {_duration_text(r['write']):>9}  "
                f"{_duration_text(r['pause']):>9}  "
                f"{r['size']:>11} bytes  {r['sources']:>7}{began}"
            )
    return 0


def _do_prune(directory: str, keep: int, dry_run: bool, as_json: bool) -> int:
    store = _store(directory)
    if not store.list_epochs():
        return _no_checkpoints(store)
    result = insp.prune_checkpoints(store, keep, dry_run)
    if as_json:
        _print_json({**result, "dry_run": dry_run})
        return 0
    verb = "would delete" if dry_run else "deleted"
    gone = ", ".join(map(str, result["deleted"])) or "nothing"
    print(f"{verb} {gone}; kept {', '.join(map(str, result['kept']))}")
    return 0


def _do_show(
    directory: str,
    epoch: int | None,
    state: str | None,
    max_chars: int,
    as_json: bool,
    trust_store: bool = False,
) -> int:
    store = _store(directory, trust_store)
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
        for attr, files in info.get("rocks", {}).get(nid, {}).items():
            print(f"    {attr!r} in RocksDB: {files['files']} files, {files['bytes']:,} bytes")
    for kid, handle in info["sinks"].items():
        print(f"  sink {kid}: {handle!r}")


#: how ``verify`` names each problem
_PROBLEM = {
    "damaged": "DAMAGED",
    "unsigned": "UNSIGNED",
    "foreign-signed": "FOREIGN-SIGNED",
    "bad-signature": "BAD SIGNATURE",
    "untrusted": "UNTRUSTED",
}


def _verify_line(r: dict[str, Any]) -> str:
    if r.get("superseded"):
        what = "savepoint" if r["savepoint"] else "checkpoint"
        then = (
            "a savepoint is never pruned: delete it, or re-sign it with "
            "'rivermark checkpoints resign' while its key is still among the old keys"
            if r["savepoint"]
            else "it goes when pruned"
        )
        return (
            f"{r['epoch']:>12}  {_PROBLEM[r['problem']]} (older than every signed checkpoint: "
            f"a {what} from before the key was set or rotated, never resumed from with the "
            f"key; not a failure; {then})"
        )
    if not r["ok"]:
        return f"{r['epoch']:>12}  {_PROBLEM[r['problem']]}: {r['error']}"
    sig = {"ok": ", signed", "unchecked": ", signed (not checked: no key)"}
    return f"{r['epoch']:>12}  ok{sig.get(r['signature'], '')}"


def _do_verify(directory: str, epoch: int | None, as_json: bool, trust_store: bool = False) -> int:
    store = _store(directory, trust_store)
    results = insp.verify_checkpoints(store, epoch)
    if not results:
        return _no_checkpoints(store)
    failed = any(not (r["ok"] or r["superseded"]) for r in results)
    if as_json:
        _print_json(results)
        return 1 if failed else 0
    for r in results:
        print(_verify_line(r))
    if epoch is None:
        good = [r["epoch"] for r in results if r["ok"]]
        if good:
            print(f"{len(good)} of {len(results)} verify; a job resumes from {good[-1]}")
        else:
            print(
                f"none of {len(results)} verifies; a job refuses to start (restore a good "
                "copy, or run with --from-scratch)"
            )
    if store.trust.keyring is None and any(r["signature"] == "unsigned" for r in results):
        print(
            "checkpoints are not signed: set RIVERMARK_CHECKPOINT_KEY to sign them "
            "(see docs/security.md)"
        )
    return 1 if failed else 0


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
    for sid in d["positions"]:
        print(f"  position {sid}: {d['moved'][sid]['text']}")
    for nid, sizes in d["state"].items():
        print(f"  state {nid}: {_state_change(sizes, d['entries'][nid])}")
    for kid, (ha, hb) in d["sinks"].items():
        print(f"  sink {kid}: {ha!r} -> {hb!r}")
    if d["fingerprint_differs"]:
        print("  graph fingerprint differs")
    return 0


def _state_change(sizes: list[int | None], entries: list[int | None]) -> str:
    """A node's state from one checkpoint to another, for a person.

    >>> _state_change([9471, 14471], [2000, 3000])
    'grew by 1,000 entries (2,000 -> 3,000), 9471 -> 14471 bytes'
    >>> _state_change([16, 16], [None, None])
    '16 -> 16 bytes (contents differ)'
    >>> _state_change([None, 20], [None, 0])
    'new in the later checkpoint, 20 bytes'
    """
    (sa, sb), (ka, kb) = sizes, entries
    if sa is None:
        return f"new in the later checkpoint, {sb} bytes"
    if sb is None:
        return f"gone from the later checkpoint (was {sa} bytes)"
    if ka is None or kb is None or ka == kb:
        same = f"{ka:,} entries, " if ka is not None and ka == kb else ""
        return f"{same}{sa} -> {sb} bytes (contents differ)"
    how = "grew" if kb > ka else "shrank"
    return f"{how} by {abs(kb - ka):,} entries ({ka:,} -> {kb:,}), {sa} -> {sb} bytes"


def _do_diff_against(directory: str, target: str, opts: dict[str, Any], as_json: bool) -> int:
    store = _store(directory)
    node, migrate = load_app_with_migrations(target, opts["migrate"])
    rules = UpgradeRules.checked(
        opts["rename"], opts["allow_dropped_state"], opts["allow_new_nodes"], migrate
    )
    manifest = None
    for e in reversed(store.list_epochs()):
        try:
            manifest = store.load_chains(e)[0]
            break
        except CheckpointCorruptError as err:
            print(f"rivermark: skipping damaged checkpoint {e}: {err}", file=sys.stderr)
    if manifest is None:
        return _no_checkpoints(store)
    plan = plan_restore(manifest, node, rules)
    ok = not plan.refused
    if as_json:
        _print_json(
            {
                "epoch": plan.epoch,
                "restore": "would start" if ok else "refused",
                "nodes": [d.as_dict() for d in plan.decisions],
            }
        )
    else:
        print(f"checkpoint {plan.epoch} of {insp.where(store)} into {target}:")
        for d in plan.decisions:
            print(f"  {d.action}: {d.node}: {d.detail}")
        print("the restore would start" if ok else "the restore would be refused")
    return 0 if ok else 2


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
    help="Print the state of node NODE (decoded, pretty-printed); node ids are listed "
    "by 'show' without --state.",
)
@click.option(
    "--max-chars",
    type=click.IntRange(min=0),
    default=2000,
    show_default=True,
    help="Cut the printed state after this many characters (0: never).",
)
@_trust_option
@_json_option
@_logging_options
def show_command(
    directory: str,
    epoch: int | None,
    state: str | None,
    max_chars: int,
    trust_store: bool,
    as_json: bool,
) -> int:
    """Describe checkpoint EPOCH of DIR (default: the newest).

    Prints each source's position with its meaning (file, line and bytes
    left; Kafka topic, partition and offset), the state files and the sink
    handles.
    """
    _setup_logging(click.get_current_context())
    return _do_show(directory, epoch, state, max_chars, as_json, trust_store)


def _jsonable(value: Any) -> Any:
    """A value of a state row as JSON has it: numpy scalars as numbers, times as ISO text."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    iso = getattr(value, "isoformat", None)
    if callable(iso):
        return iso()
    return repr(value)


def _do_export(
    directory: str, node: str, epoch: int | None, fmt: str, output: str | None, trust: bool
) -> int:
    store = _store(directory, trust)
    if not store.list_epochs():
        return _no_checkpoints(store)
    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet writes a file: give --output FILE")
    try:
        rows = insp.state_rows(insp.read_node_state(store, epoch, node, as_pandas=True))
    except CheckpointCorruptError as err:
        return _damaged(err)
    if fmt == "jsonl":
        lines = "".join(json.dumps(r, default=_jsonable) + "\n" for r in rows)
        if output is None:
            sys.stdout.write(lines)
        else:
            Path(output).write_text(lines, encoding="utf-8")
        return 0
    import pandas as pd

    try:
        pd.DataFrame(rows).to_parquet(output, index=False)
    except ImportError:
        raise click.UsageError(
            "--format parquet needs pyarrow: pip install pyarrow, or use --format jsonl"
        ) from None
    except (TypeError, ValueError) as e:  # pyarrow cannot type a column of mixed values
        raise click.UsageError(
            f"the state of {node!r} does not fit a parquet table ({e}); use --format jsonl"
        ) from None
    return 0


@checkpoints.command("export")
@_dir_argument
@click.argument("node", metavar="NODE")
@click.option("--epoch", type=int, default=None, help="The checkpoint (default: the newest).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "parquet"]),
    default="jsonl",
    show_default=True,
    help="One JSON object a line, or a parquet file (needs pyarrow).",
)
@click.option("--output", "-o", metavar="FILE", help="Write to FILE (jsonl: default stdout).")
@_trust_option
@_logging_options
def export_command(
    directory: str,
    node: str,
    epoch: int | None,
    fmt: str,
    output: str | None,
    trust_store: bool,
) -> int:
    """Write the state of NODE in a checkpoint of DIR as rows, for people and notebooks.

    A keyed or accumulated mapping gives one row per key (key, value), a
    list one per item (index, value), a DataFrame groupby aggregation the
    rows of its value by key (a mean, variance or deviation: its running
    parts, as 'sum.x', 'count.x' columns).
    Reads the store only; pickled state only as 'show --state' does.
    """
    _setup_logging(click.get_current_context())
    return _do_export(directory, node, epoch, fmt, output, trust_store)


@checkpoints.command("verify")
@_dir_argument
@click.argument("epoch", type=int, required=False)
@_trust_option
@_json_option
@_logging_options
def verify_command(directory: str, epoch: int | None, trust_store: bool, as_json: bool) -> int:
    """Verify every checkpoint in DIR (or EPOCH); exit 1 if one fails.

    Checks checksums and, with the job's checkpoint key in the environment
    (RIVERMARK_CHECKPOINT_KEY, RIVERMARK_CHECKPOINT_KEY_FILE), signatures:
    unsigned, foreign-signed and bad-signature checkpoints fail.  State holding
    pickled objects fails unless its checkpoint's signature verified or
    --trust-store is given: loading it would run code.
    """
    _setup_logging(click.get_current_context())
    return _do_verify(directory, epoch, as_json, trust_store)


@checkpoints.command("resign")
@_dir_argument
@click.option("--dry-run", is_flag=True, help="Say what would be re-signed; change nothing.")
@_trust_option
@_json_option
@_logging_options
def resign_command(directory: str, dry_run: bool, trust_store: bool, as_json: bool) -> int:
    """Sign with the new key every checkpoint of DIR that an old key signed (a key rotation).

    Reads the keys as a job does (RIVERMARK_CHECKPOINT_KEY_FILE: the new key
    first, the old ones after it).  Savepoints, which pruning never deletes,
    are re-signed too, so the old key can be dropped; with --trust-store,
    unsigned checkpoints (from before the key was set) are signed as well.
    Refused while a job runs on DIR.  Exit 1 if a checkpoint was left as it
    is because it does not verify.
    """
    _setup_logging(click.get_current_context())
    store = _store(directory, trust_store)
    if not store.list_epochs():
        return _no_checkpoints(store)
    rows = insp.resign_checkpoints(store, dry_run)
    if as_json:
        _print_json({"checkpoints": rows, "dry_run": dry_run})
    else:
        verb = "would re-sign" if dry_run else "re-signed"
        for r in rows:
            if r["action"] == "resigned":
                print(f"{r['epoch']:>12}  {verb} (was {r['was']})")
            elif r["action"] == "kept":
                print(f"{r['epoch']:>12}  already signed with the new key")
            else:
                print(f"{r['epoch']:>12}  left as it is: {r['error']}")
    return 1 if any(r["action"] == "refused" for r in rows) else 0


@checkpoints.command("prune")
@_dir_argument
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    required=True,
    help="How many of the newest checkpoints to keep.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@_json_option
@_logging_options
def prune_command(directory: str, keep: int, dry_run: bool, as_json: bool) -> int:
    """Delete all but the newest --keep checkpoints of DIR.

    A checkpoint that a kept one builds on (the base and deltas of its keyed
    state) is kept too, so every checkpoint left restores.  Refused while a
    job runs on DIR: a running job prunes to its own keep= itself.
    """
    _setup_logging(click.get_current_context())
    return _do_prune(directory, keep, dry_run, as_json)


@checkpoints.command("diff")
@_dir_argument
@click.argument("epoch", type=int, required=False)
@click.argument("epoch2", type=int, required=False)
@click.option(
    "--against",
    metavar="APP.py:NAME",
    help="Instead: say what restoring the newest checkpoint into that app's graph would do "
    "(kept, renamed, dropped, added, migrated, refused; exit 2 if refused), without running it.",
)
@_upgrade_options
@_json_option
@_logging_options
def diff_command(
    directory: str,
    epoch: int | None,
    epoch2: int | None,
    against: str | None,
    as_json: bool,
    **rules: Any,
) -> int:
    """Compare checkpoints EPOCH and EPOCH2 of DIR (default: the last two).

    With --against APP.py:NAME (and the upgrade options of 'rivermark run'),
    print what a restore of the newest checkpoint that verifies into the
    app's graph would do, one line per node; exit 0 if it would start, 2 if
    it would be refused.  Migrations are Python and come from the app's own
    Job: a changed node shows as refused here.
    """
    _setup_logging(click.get_current_context())
    if against is not None:
        if epoch is not None:
            raise click.UsageError("--against compares the newest checkpoint: give no EPOCH")
        return _do_diff_against(directory, against, rules, as_json)
    return _do_diff(directory, epoch, epoch2, as_json)


# ---------------------------------------------------------------- replay
def _parse_until(ctx: click.Context, param: click.Parameter, value: Any) -> int | None:
    """``--until EPOCH|end``: an epoch, or None for the end of the input."""
    text = str(value).strip()
    if text == "end":
        return None
    if not text.isdigit():
        raise click.BadParameter(f"{text!r} is neither an epoch number nor 'end'", ctx, param)
    return int(text)


#: what a refused replay's option is called on the command line
_REPLAY_OPTIONS = {"from": "'--from'", "until": "'--until'", "output": "'--output'"}


def _replay_refused(err: Exception, option: str) -> click.UsageError:
    ctx = click.get_current_context()
    hint = _REPLAY_OPTIONS.get(option)
    if hint is None:
        return click.UsageError(str(err), ctx)
    return click.BadParameter(str(err), ctx, param_hint=hint)


def _print_replayed(
    target: str, plan: replay.ReplayPlan, run: replay.ReplayRun, output: str
) -> None:
    end = "the end of the input" if plan.until is None else f"checkpoint {plan.until.epoch}"
    print(
        f"replayed {target} from checkpoint {plan.start.epoch} of {insp.where(plan.live)} "
        f"to {end}; side outputs in {output}:"
    )
    for sid, side in run.sides.items():
        print(f"  {sid}: {side.records:,} records -> {side.path}")


def _print_diffs(diffs: list[replay.SinkDiff]) -> int:
    """Each sink's comparison with the live output; 1 if any differs."""
    for d in diffs:
        if d.not_compared is not None:
            print(f"{d.sink}: not compared: {d.not_compared}")
        elif d.diff:
            print("\n".join(d.diff))
        else:
            print(f"{d.sink}: the same as the live output")
    return 1 if any(d.diff for d in diffs) else 0


def _do_replay(target: str, opts: dict[str, Any]) -> int:
    until, output = opts["until"], opts["output"]
    if opts["diff"] and until is None:
        raise click.UsageError(
            "--diff compares with what the live job wrote between two checkpoints: "
            "give --until EPOCH",
            click.get_current_context(),
        )
    node, migrate = load_app_with_migrations(target, opts["migrate"])
    rules = UpgradeRules.checked(
        opts["rename"], opts["allow_dropped_state"], opts["allow_new_nodes"], migrate
    )
    try:
        plan = replay.plan_replay(node, opts["start"], until, rules, opts["trust_store"])
        run = replay.run_replay(plan, output, signals=True)
    except replay.ReplayError as e:
        raise _replay_refused(e, e.option) from None
    _print_replayed(target, plan, run, output)
    if run.stopped:
        print(f"rivermark: stopped before the end; the side outputs in {output} are partial")
        return 1
    return _print_diffs(replay.diff_outputs(plan, run)) if opts["diff"] else 0


@cli.command("replay")
@click.argument("target", metavar="APP.py:NAME")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="LOCATION[@EPOCH]",
    help="The live job's checkpoint directory or URL, and the checkpoint to start from "
    "(default: its newest).",
)
@click.option(
    "--until",
    required=True,
    metavar="EPOCH|end",
    callback=_parse_until,
    help="Stop where every source was at checkpoint EPOCH of the same location, or read "
    "the input to its end.",
)
@click.option(
    "--output",
    "-o",
    required=True,
    metavar="DIR",
    help="Where the side outputs go: DIR/<sink id>.txt (the id encoded as one file name), "
    "one line per record.",
)
@click.option(
    "--diff",
    is_flag=True,
    help="Compare each side output with what the live sink (sink_to_textfile, to_kafka) wrote "
    "between the two checkpoints; exit 1 if one differs.",
)
@_upgrade_options
@_trust_option
@_logging_options
def replay_command(target: str, **opts: Any) -> int:
    """Dry-run APP.py:NAME from a checkpoint of the live job, writing its sinks' output aside.

    The graph restores checkpoint --from of the live job (with the upgrade
    options of 'rivermark run') and runs until --until; every sink is
    replaced by a file DIR/<sink id>.txt (a sink(func) is not called, a
    Kafka sink produces nothing).  The live checkpoints and outputs are only
    read.  See docs/upgrading.md.
    """
    _setup_logging(click.get_current_context())
    return _do_replay(target, opts)


# ---------------------------------------------------------------- ui
def _do_ui(directory: str, port: int, addr: str) -> int:
    import asyncio
    import signal

    from .observe.history import HistoryServer

    server = HistoryServer(_store(directory), port, addr)

    async def serve() -> None:
        await server.start()
        print(f"serving the checkpoint history of {directory} at {server.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(serve())
    return 0


@cli.command("ui")
@_dir_argument
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="TCP port of the page (0: a free one, printed).",
)
@click.option(
    "--addr",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default; see docs/security.md).",
)
@_logging_options
def ui_command(directory: str, port: int, addr: str) -> int:
    """Serve a page with the checkpoint history of DIR (a job that ran or runs there).

    One row per retained checkpoint: time, kind, state size per node, each
    source's position.  Reads the store only; stops on Ctrl-C or SIGTERM.
    """
    _setup_logging(click.get_current_context())
    return _do_ui(directory, port, addr)


# ---------------------------------------------------------------- control
_target_argument = click.argument("target", metavar="DIR|URL")


def _control(target: str, path: str, what: str) -> int:
    from .observe import control

    answer = control.request(target, path, control.control_token())
    if "tasks" in answer:  # a partitioned job: one line per task
        for task, epoch in sorted(answer["tasks"].items()):
            print(f"{what} {epoch} of task {task}")
    else:
        print(f"{what} {answer['epoch']}")
    return 0


@cli.command("savepoint")
@_target_argument
@_logging_options
def savepoint_command(target: str) -> int:
    """Take a savepoint of the running job at DIR|URL; print its epoch once durable.

    DIR is the job's checkpoint directory (a job started with --ui names its
    page there), URL its page (http://HOST:PORT/).  Needs the job's control
    token in RIVERMARK_CONTROL_TOKEN or RIVERMARK_CONTROL_TOKEN_FILE.
    """
    _setup_logging(click.get_current_context())
    return _control(target, "api/savepoint", "savepoint")


@cli.command("stop")
@_target_argument
@click.option("--savepoint", is_flag=True, help="Make the final checkpoint a savepoint.")
@_logging_options
def stop_command(target: str, savepoint: bool) -> int:
    """Stop the running job at DIR|URL gracefully; print its final checkpoint's epoch.

    The job writes its final checkpoint (a savepoint with --savepoint),
    commits its sinks and exits 0, as after SIGTERM.  Needs the job's
    control token (see 'rivermark savepoint --help').
    """
    _setup_logging(click.get_current_context())
    path = "api/stop?savepoint=true" if savepoint else "api/stop"
    return _control(
        target, path, "stopped; final savepoint" if savepoint else "stopped; final checkpoint"
    )


# ---------------------------------------------------------------- entry point
def _command_path(args: list[str]) -> str:
    """``rivermark run`` (``rivermark checkpoints list``): the subcommand ``args`` name."""
    path: list[str] = ["rivermark"]
    group: click.Command = cli
    for arg in args:
        command = group.commands.get(arg) if isinstance(group, click.Group) else None
        if command is None:
            if not arg.startswith("-"):
                break  # an argument, not a subcommand
            continue
        path.append(arg)
        group = command
    return " ".join(path)


def _usage_line(err: click.UsageError, args: list[str] | None = None) -> str:
    """One line: the error and where its help is (a subcommand's own, when named).

    >>> print(_usage_line(click.UsageError("Option '--ui' requires an argument."), ["run", "--ui"]))
    rivermark: error: Option '--ui' requires an argument. (see 'rivermark run --help')
    """
    ctx = err.ctx
    path = ctx.command_path if ctx is not None else _command_path(args or [])
    return f"rivermark: error: {err.format_message()} (see '{path} --help')"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rivermark`` command; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        result = cli.main(args=args, prog_name="rivermark", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:
        print(e.format_message(), file=sys.stderr)
        return 2
    except click.UsageError as e:
        print(_usage_line(e, args), file=sys.stderr)
        return 2
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.Abort:
        print("rivermark: aborted", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C before the job's own handlers are in place (e.g. while starting)
        print(
            "rivermark: interrupted (Ctrl-C) before the job started; nothing was run",
            file=sys.stderr,
        )
        return 130
    except click.ClickException as e:
        print(f"rivermark: error: {e.format_message()}", file=sys.stderr)
        return e.exit_code
    except RivermarkError as e:
        msg = str(e)
        print(msg if msg.startswith("rivermark") else f"rivermark: {msg}", file=sys.stderr)
        return exit_code_of(e)
    except OSError as e:
        logger.debug("rivermark failed", exc_info=True)
        print(f"rivermark: {e}", file=sys.stderr)
        return 1
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
