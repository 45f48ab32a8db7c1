"""``rivermark replay``: new code run from a checkpoint of the live job, its output aside."""

from __future__ import annotations

from typing import Any

import click

from rivermark.checkpoint.tools import inspection as insp
from rivermark.checkpoint.tools import replay
from rivermark.cli.group import cli
from rivermark.cli.options import (
    app_argument,
    load_with_upgrades,
    logged,
    trust_option,
    upgrade_options,
)

__all__ = ["replay_command"]


def _parse_until(ctx: click.Context, param: click.Parameter, value: object) -> int | None:
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
    node, rules = load_with_upgrades(target, opts)
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
@app_argument
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
@upgrade_options
@trust_option
@logged
def replay_command(target: str, **opts: object) -> int:
    """Dry-run APP.py:NAME from a checkpoint of the live job, writing its sinks' output aside.

    The graph restores checkpoint --from of the live job (with the upgrade
    options of 'rivermark run') and runs until --until; every sink is
    replaced by a file DIR/<sink id>.txt (a sink(func) is not called, a
    Kafka sink produces nothing).  The live checkpoints and outputs are only
    read.  See docs/upgrading.md.
    """
    return _do_replay(target, opts)
