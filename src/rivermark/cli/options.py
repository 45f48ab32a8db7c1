"""The option blocks that several ``rivermark`` commands share, declared once.

Each block is a click decorator: a command that takes the checkpoint store's
trust flag says ``@trust_option``, one that reads a checkpoint directory
``@dir_argument``, one that restores into a changed graph
``@upgrade_options``, and so on; the flag, its default, help text and
environment variable are written here only.  :func:`logged` gives a command
the hidden logging options and sets up logging before it runs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from rivermark._app import load_app_with_migrations
from rivermark.checkpoint.protocol.upgrade import UpgradeRules
from rivermark.core.node import Stream
from rivermark.observe.logs import configure_logging

__all__ = [
    "app_argument",
    "dir_argument",
    "epoch_argument",
    "json_option",
    "load_with_upgrades",
    "logged",
    "logging_options",
    "set_meta",
    "setup_logging",
    "shown_logging_options",
    "target_argument",
    "trust_option",
    "upgrade_options",
]

F = TypeVar("F", bound=Callable[..., Any])

_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


# ---------------------------------------------------------------- logging
def set_meta(key: str) -> Callable[[click.Context, click.Parameter, object], None]:
    """A callback that keeps an option's value in ``ctx.meta`` (for the logging set-up)."""

    def store(ctx: click.Context, param: click.Parameter, value: object) -> None:
        if value is not None and value is not False:
            ctx.meta[f"rivermark.{key}"] = value

    return store


def logging_options(f: F, hidden: bool = True) -> F:
    """``--log-level``, ``--log-format`` and ``-v``: shown in the group's help only.

    Every subcommand accepts them too (``rivermark run app.py:x -v``), hidden
    from its help so that they are described once, in ``rivermark --help``.
    """
    f = click.option(
        "-v",
        "--verbose",
        is_flag=True,
        expose_value=False,
        callback=set_meta("verbose"),
        hidden=hidden,
        help="Log at INFO level (same as --log-level INFO).",
    )(f)
    f = click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        expose_value=False,
        envvar="RIVERMARK_LOG_FORMAT",
        callback=set_meta("log_format"),
        hidden=hidden,
        help="Log lines as text or as one JSON object per line (fields: time, level, "
        "logger, message, node, epoch, position).  [env: RIVERMARK_LOG_FORMAT]",
    )(f)
    f = click.option(
        "--log-level",
        type=click.Choice(_LEVELS, case_sensitive=False),
        expose_value=False,
        envvar="RIVERMARK_LOG_LEVEL",
        callback=set_meta("log_level"),
        hidden=hidden,
        help="Lowest level of log records written to stderr (default WARNING).  "
        "[env: RIVERMARK_LOG_LEVEL]",
    )(f)
    return f


def shown_logging_options(f: F) -> F:
    """The logging options as the group shows them in ``rivermark --help``."""
    return logging_options(f, hidden=False)


def setup_logging(ctx: click.Context) -> None:
    """Configure logging from the options that the command line gave."""
    meta = ctx.meta
    level = meta.get("rivermark.log_level") or (
        "INFO" if meta.get("rivermark.verbose") else "WARNING"
    )
    configure_logging(str(level).upper(), meta.get("rivermark.log_format") or "text")
    # the live page's web server logs one line per request at INFO: only when asked
    access = logging.getLogger("aiohttp.access")
    access.setLevel(logging.INFO if meta.get("rivermark.ui_access_log") else logging.WARNING)


def logged(command: Callable[..., int]) -> Callable[..., int]:
    """A command that takes the (hidden) logging options and sets logging up before it runs."""

    @functools.wraps(command)
    def run(*args: object, **kwargs: object) -> int:
        setup_logging(click.get_current_context())
        return command(*args, **kwargs)

    return logging_options(run)


# ---------------------------------------------------------------- arguments
#: a checkpoint directory or URL (``rivermark checkpoints ...``, ``rivermark ui``)
dir_argument = click.argument("directory", metavar="DIR")
#: an optional epoch of that directory (default: the newest)
epoch_argument = click.argument("epoch", type=int, required=False)
#: an app's graph (``rivermark graph``, ``rivermark replay``)
app_argument = click.argument("target", metavar="APP.py:NAME")
#: a running job, by its checkpoint directory or its page (the control commands)
target_argument = click.argument("target", metavar="DIR|URL")


# ---------------------------------------------------------------- options
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")

trust_option = click.option(
    "--trust-store",
    is_flag=True,
    envvar="RIVERMARK_TRUST_STORE",
    help="Trust whoever can write the checkpoint store: accept unsigned checkpoints and load "
    "pickled state without a verified signature (see docs/security.md).  "
    "[env: RIVERMARK_TRUST_STORE]",
)


# ---------------------------------------------------------------- upgrade options
def _parse_renames(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...] | None
) -> dict[str, str]:
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


def _parse_migrations(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...] | None
) -> dict[str, str]:
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


def _parse_dropped(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...] | None
) -> bool | list[str]:
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


def upgrade_options(command: F) -> F:
    """How a restore meets a changed graph (see docs/upgrading.md): ``run``, ``replay``, ``diff``."""
    return _new_nodes_option(_rename_option(_dropped_option(_migrate_option(command))))


def load_with_upgrades(target: str, opts: Mapping[str, Any]) -> tuple[Stream, UpgradeRules]:
    """The app's graph and the rules that ``@upgrade_options`` gave for restoring into it."""
    node, migrate = load_app_with_migrations(target, opts["migrate"])
    rules = UpgradeRules.checked(
        opts["rename"], opts["allow_dropped_state"], opts["allow_new_nodes"], migrate
    )
    return node, rules
