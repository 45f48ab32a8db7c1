"""The ``rivermark`` command's entry point: exit statuses and one-line errors."""

from __future__ import annotations

import logging
import os
import sys

import click

from rivermark.cli.group import cli
from rivermark.errors import RivermarkError, exit_code_of
from rivermark.lake.worker import abandoned

logger = logging.getLogger(__name__)

__all__ = ["main"]


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
    """Entry point of the ``rivermark`` command; returns the exit status.

    Run as the command (``argv`` None), it ends the process itself when a
    file sink gave up on a store that stopped answering: the thread blocked
    there must not be stopped by the interpreter's shutdown (see
    :func:`rivermark.lake.worker.abandoned`).
    """
    code = _main(argv)
    if argv is None and abandoned():
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _main(argv: list[str] | None) -> int:
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
