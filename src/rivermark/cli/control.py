"""``rivermark savepoint`` and ``rivermark stop``: ask a running job through its page."""

from __future__ import annotations

import click

from rivermark.cli.group import cli
from rivermark.cli.options import logged, target_argument

__all__ = ["savepoint_command", "stop_command"]


def _control(target: str, path: str, what: str) -> int:
    from rivermark.observe import control

    answer = control.request(target, path, control.control_token())
    if "tasks" in answer:  # a partitioned job: one line per task
        for task, epoch in sorted(answer["tasks"].items()):
            print(f"{what} {epoch} of task {task}")
    else:
        print(f"{what} {answer['epoch']}")
    return 0


@cli.command("savepoint")
@target_argument
@logged
def savepoint_command(target: str) -> int:
    """Take a savepoint of the running job at DIR|URL; print its epoch once durable.

    DIR is the job's checkpoint directory (a job started with --ui names its
    page there), URL its page (http://HOST:PORT/).  Needs the job's control
    token in RIVERMARK_CONTROL_TOKEN or RIVERMARK_CONTROL_TOKEN_FILE.
    """
    return _control(target, "api/savepoint", "savepoint")


@cli.command("stop")
@target_argument
@click.option("--savepoint", is_flag=True, help="Make the final checkpoint a savepoint.")
@logged
def stop_command(target: str, savepoint: bool) -> int:
    """Stop the running job at DIR|URL gracefully; print its final checkpoint's epoch.

    The job writes its final checkpoint (a savepoint with --savepoint),
    commits its sinks and exits 0, as after SIGTERM.  Needs the job's
    control token (see 'rivermark savepoint --help').
    """
    path = "api/stop?savepoint=true" if savepoint else "api/stop"
    return _control(
        target, path, "stopped; final savepoint" if savepoint else "stopped; final checkpoint"
    )
