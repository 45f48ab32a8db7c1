"""The ``rivermark`` group, and what the commands that read a checkpoint store share."""

from __future__ import annotations

import json
import sys

import click

from rivermark.checkpoint import CheckpointCorruptError, Store
from rivermark.checkpoint.stores.signing import Keyring, Trust
from rivermark.checkpoint.tools import inspection as insp
from rivermark.cli.options import shown_logging_options

__all__ = ["cli", "damaged", "no_checkpoints", "open_store", "print_json"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rivermark")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the installed version, looked up only when asked (the lookup
    imports ``importlib.metadata``, which every ``rivermark run`` would pay for)."""
    if value and not ctx.resilient_parsing:
        click.echo(f"rivermark, version {_version()}")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
    help="Show the version and exit.",
)  # fmt: skip
@shown_logging_options
def cli() -> None:
    """rivermark: stream jobs with consistent checkpoints.

    Run an app with 'rivermark run app.py:name --checkpoint DIR'; inspect its
    checkpoints with 'rivermark checkpoints list DIR'.  Every subcommand has
    its own --help; the logging options below are accepted by every
    subcommand as well (before or after its name).
    """


def open_store(directory: str, trust_store: bool = False) -> Store:
    """The store at ``directory``, read with the configured checkpoint keys."""
    store = insp.open_checkpoint_location(directory)
    store.trust = Trust(Keyring.configured(), trust_store)
    return store


def no_checkpoints(store: Store) -> int:
    """Say that ``store`` holds no checkpoint; exit status 1."""
    print(f"rivermark: no checkpoints in {insp.where(store)}", file=sys.stderr)
    return 1


def damaged(err: CheckpointCorruptError) -> int:
    """Say that a checkpoint is damaged; exit status 1."""
    print(f"rivermark: damaged: {err}", file=sys.stderr)
    return 1


def print_json(value: object) -> None:
    """``--json`` output: indented, keys sorted, anything else as its repr."""
    print(json.dumps(value, indent=2, sort_keys=True, default=repr))
