"""The ``rivermark`` commands: an option that several of them take means the same in each."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import click

from rivermark.cli import cli

#: flags that two commands spell alike but that mean different things there
#: (``run --keep`` keeps checkpoints as the job runs, ``prune --keep`` deletes
#: the rest now; ``run --state`` picks the state backend, ``show --state`` a
#: node; each ``--dry-run``, ``--format`` and ``--output`` says what its own
#: command would do or write)
DIFFERENT_ON_PURPOSE = {"--keep", "--state", "--dry-run", "--format", "--output"}


def _commands(group: click.Group, path: str) -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        out[f"{path} {name}"] = command
        if isinstance(command, click.Group):
            out.update(_commands(command, f"{path} {name}"))
    return out


def _declarations() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Each flag (or argument, by its metavar) -> command -> how that command declares it."""
    seen: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    for path, command in _commands(cli, "rivermark").items():
        for param in command.params:
            info = param.to_info_dict()
            info["callback"] = getattr(param.callback, "__qualname__", None)
            key = (
                param.opts[0]
                if isinstance(param, click.Option)
                else f"<{param.metavar or param.name}>"
            )
            seen[key][path] = [info]
    return seen


def test_an_option_that_commands_share_is_declared_the_same_in_each() -> None:
    shared = {k: v for k, v in _declarations().items() if len(v) > 1}
    # the blocks of rivermark.cli.options, and the hidden logging options of every command
    assert {
        "--trust-store",
        "--json",
        "--rename",
        "--migrate",
        "<DIR>",
        "<DIR|URL>",
        "<epoch>",
    } <= set(shared)
    assert len(shared["--log-level"]) == len(_commands(cli, "rivermark"))
    for flag, by_command in shared.items():
        if flag in DIFFERENT_ON_PURPOSE:
            continue
        first, *others = by_command.items()
        for path, declared in others:
            assert declared == first[1], f"{flag} of {path!r} differs from {first[0]!r}'s"


def test_the_upgrade_options_are_the_same_block_in_run_replay_and_diff() -> None:
    upgrade = ["--allow-new-nodes", "--rename", "--allow-dropped-state", "--migrate"]
    decl = _declarations()
    for flag in upgrade:
        assert set(decl[flag]) == {
            "rivermark run",
            "rivermark replay",
            "rivermark checkpoints diff",
        }
