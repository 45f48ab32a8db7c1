"""How a run stands and how it ended, in the words every display uses.

The vocabulary (:class:`RunState`, :func:`run_state`, the table of states)
is the job's own and lives in :mod:`rivermark.checkpoint.protocol.runstate`; it is
re-exported here for the displays.  :func:`last_run` is the reader's side:
how the run recorded in a store stands for someone who holds no lock.

>>> RunState("finished", "end of input").text
'finished (end of input)'
"""

from __future__ import annotations

import os
import socket

from rivermark.checkpoint.protocol.runstate import END_OF_INPUT as END_OF_INPUT
from rivermark.checkpoint.protocol.runstate import ENDED_STATES as ENDED_STATES
from rivermark.checkpoint.protocol.runstate import KILLED_REASON as KILLED_REASON
from rivermark.checkpoint.protocol.runstate import RunState as RunState
from rivermark.checkpoint.protocol.runstate import ended_record as ended_record
from rivermark.checkpoint.protocol.runstate import failure_text as failure_text
from rivermark.checkpoint.protocol.runstate import previous_run as previous_run
from rivermark.checkpoint.protocol.runstate import run_record as run_record
from rivermark.checkpoint.protocol.runstate import run_state as run_state
from rivermark.checkpoint.protocol.runstate import signal_reason as signal_reason

__all__ = [
    "RunState",
    "run_state",
    "previous_run",
    "last_run",
    "ended_record",
    "run_record",
    "ENDED_STATES",
    "failure_text",
    "signal_reason",
]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def last_run(info: dict[str, object] | None) -> RunState | None:
    """How the run recorded in ``job.json`` stands, for a reader that holds no lock
    (the checkpoint history): a run with no end recorded is ``running`` while its
    process lives (on this machine), ``killed`` once it does not."""
    before = previous_run(info)
    if before is None or before.state != "killed" or info is None:
        return before
    host, pid = info.get("host"), info.get("pid")
    if host != socket.gethostname() or not isinstance(pid, int):
        return RunState("running", f"or killed: no end recorded yet; it ran on {host}")
    return RunState("running") if _alive(pid) else before
