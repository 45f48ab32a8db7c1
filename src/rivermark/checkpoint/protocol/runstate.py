"""One vocabulary for how a run stands and how it ended, with the reason.

The job records it in its store's ``job.json`` and hands it to its
listeners when a run ends; :mod:`rivermark.observe.endstate` re-exports it
for the displays.

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

import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rivermark.checkpoint.errors import CheckpointLockedError
from rivermark.checkpoint.stores.storebase import Store
from rivermark.errors import first_line

logger = logging.getLogger(__name__)

__all__ = [
    "RunState",
    "run_state",
    "previous_run",
    "ended_record",
    "run_record",
    "ENDED_STATES",
    "END_OF_INPUT",
    "KILLED_REASON",
    "RunFacts",
    "RunRecord",
    "failure_text",
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


class RunFacts(Protocol):
    """What :func:`run_state` reads of a job (a :class:`~rivermark.checkpoint.protocol.job.Job`)."""

    @property
    def running(self) -> bool: ...

    @property
    def stop_requested(self) -> bool: ...

    @property
    def ended_by(self) -> BaseException | None: ...

    @property
    def ended_at(self) -> float | None: ...

    @property
    def stop_reason(self) -> str | None: ...


def run_state(job: RunFacts) -> RunState:
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


def ended_record(state: RunState) -> dict[str, object]:
    """What a job writes into its store's ``job.json`` when its run ends."""
    return {"state": state.state, "reason": state.reason, "time": state.ended_at or time.time()}


def previous_run(info: dict[str, object] | None) -> RunState | None:
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


def run_record() -> dict[str, object]:
    """Where a run is (``host``, ``pid``): recorded in ``job.json`` while it runs."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


class RunRecord:
    """What a run writes into its store's ``job.json``: at its start its graph, where it
    runs and where its page answers; at its end how it ended (see :func:`previous_run`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: what ``job.json`` says of the current run (None before it started)
        self.info: dict[str, Any] | None = None

    def started(
        self, fingerprint: dict[str, str], node_ids: Sequence[str], extra: dict[str, str | None]
    ) -> None:
        """Record a run that starts; ``extra``: what its listeners add (the page's address)."""
        self.info = {
            "fingerprint": fingerprint,
            "node_ids": list(node_ids),
            # where 'rivermark savepoint/stop DIR' reach this run (its page), and the
            # run that must answer there ('rivermark stop' checks it first)
            "control": None,
            "control_run": None,
            **extra,
            # how this run ended: null until it does (still null later: it was killed)
            "ended": None,
            **run_record(),
        }
        self.store.write_job_info(self.info)

    def ended(self, state: RunState, ended_by: BaseException | None) -> None:
        """Record how the run ended (a later reader sees it)."""
        if self.info is None or isinstance(ended_by, CheckpointLockedError):
            return  # refused before it started, or another job may own the store now
        try:
            self.store.write_job_info({**self.info, "ended": ended_record(state)})
        except Exception as e:  # the store may be what failed; the end state is shown anyway
            logger.info(
                "could not record the end of the run in %r: %s: %s",
                self.store, type(e).__name__, first_line(e),
            )  # fmt: skip
            logger.debug("recording the end of the run failed", exc_info=True)
