"""One vocabulary for how a run stands and how it ended, with the reason.

Every place that shows a job (the live page, the terminal, ``rivermark run``,
the notebook widget, ``GET /api/job``, the checkpoint history) words its
state with :func:`run_state`:

=============  ==============================================================
state          meaning
=============  ==============================================================
not started    ``run()`` was not called yet
running        recovered and taking records (``stopping`` once a stop is asked)
stopped        a stop ended it: ``Job.stop()``, ``rivermark stop``, Ctrl-C or
               SIGTERM; its final checkpoint is written, it resumes from there
finished       every source reached the end of its input; final checkpoint written
failed         an exception ended it (a node, a source, a sink, a checkpoint
               write); the reason names it; it resumes from the last checkpoint
killed         it ended without a final checkpoint or a recorded failure
               (SIGKILL, a second Ctrl-C, the machine went down); only a later
               reader of its checkpoint store can tell (:func:`previous_run`)
=============  ==============================================================

``rivermark run`` exits 0 after ``finished`` and ``stopped``, 1 (or the
error's own status) after ``failed``, and 128 + the signal number when a
signal killed it (137 for SIGKILL, 130 for a second Ctrl-C).

>>> RunState("stopped", "Ctrl-C (SIGINT)").text
'stopped (Ctrl-C (SIGINT))'
>>> RunState("finished", "end of input").text
'finished (end of input)'
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..checkpoint.job import Job

__all__ = [
    "RunState",
    "run_state",
    "previous_run",
    "last_run",
    "ended_record",
    "run_record",
    "ENDED_STATES",
    "signal_reason",
]

#: the states a run can end in
ENDED_STATES = ("stopped", "finished", "failed", "killed")

#: why a run that reached the end of its input ended
END_OF_INPUT = "end of input"
#: why a run that ended without a word is taken as killed
KILLED_REASON = (
    "it ended without a final checkpoint or a recorded failure (SIGKILL, a second Ctrl-C, "
    "or the machine went down); it resumes from its last complete checkpoint"
)


@dataclass(frozen=True)
class RunState:
    """A run's state (see the module's table) and why it is in it ("" while it runs)."""

    state: str
    reason: str = ""
    #: unix time the run ended (None: it has not)
    ended_at: float | None = None

    @property
    def text(self) -> str:
        return self.state if not self.reason else f"{self.state} ({self.reason})"

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def failure_text(exc: BaseException) -> str:
    """An exception as one line: ``KeyError: 'x'`` (the first line of its message)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:500]}" if text else type(exc).__name__


def signal_reason(signum: int) -> str:
    """Why a signal stopped a run: ``Ctrl-C (SIGINT)``, ``SIGTERM``."""
    name = signal.Signals(signum).name
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else name


def run_state(job: Job) -> RunState:
    """How ``job``'s current (or last) run stands."""
    if job.running:
        return RunState("stopping" if job.stop_requested else "running")
    if job.ended_at is None:
        return RunState("not started")
    failure = job.ended_by
    if failure is not None:
        return RunState("failed", failure_text(failure), job.ended_at)
    if job.stop_requested:
        return RunState("stopped", job.stop_reason or "Job.stop()", job.ended_at)
    return RunState("finished", END_OF_INPUT, job.ended_at)


def ended_record(state: RunState) -> dict[str, Any]:
    """What a job writes into its store's ``job.json`` when its run ends."""
    return {"state": state.state, "reason": state.reason, "time": state.ended_at or time.time()}


def previous_run(info: dict[str, Any] | None) -> RunState | None:
    """How the run recorded in a store's ``job.json`` ended (None: unknown, or none yet).

    A run records ``"ended": null`` when it starts and its end state when it
    ends; a record still null when it is read by a later run (or by a reader
    while no job holds the store) means the run was killed.

    >>> previous_run({"ended": {"state": "stopped", "reason": "rivermark stop", "time": 5.0}})
    RunState(state='stopped', reason='rivermark stop', ended_at=5.0)
    >>> previous_run({"ended": None}).state
    'killed'
    >>> previous_run({}) is None
    True
    """
    if not info or "ended" not in info:
        return None  # written by an older version, or no run yet
    ended = info["ended"]
    if not isinstance(ended, dict):
        return RunState("killed", KILLED_REASON)
    return RunState(str(ended.get("state")), str(ended.get("reason", "")), ended.get("time"))


def run_record() -> dict[str, Any]:
    """Where a run is (``host``, ``pid``): recorded in ``job.json`` while it runs."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def last_run(info: dict[str, Any] | None) -> RunState | None:
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
