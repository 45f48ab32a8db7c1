"""A kill loop: run a job script, SIGKILL it at random moments, restart it.

:func:`run_with_crashes` starts ``cmd`` in a subprocess, kills it with
SIGKILL after a random delay (seeded), and restarts it until it exits 0 on
its own.  Then, once per named fault point, it runs the command with
``RIVERMARK_FAULT`` set (the process kills itself there, see
:mod:`rivermark.testing.faults`) and restarts it without the variable until
it finishes.  The caller compares the output with :func:`run_uncrashed`'s.

A test that asks for N kills gets N, on a fast machine as on a slow one:
while kills are still owed, a run may not end.  The harness sets
``RIVERMARK_HOLD_END`` for it, and a :class:`~rivermark.checkpoint.Job`
about to end (input exhausted, or asked to stop) announces it and waits
there, before its final checkpoint; the harness kills it at once (counted
in :attr:`CrashReport.kills_at_end`).  A script that runs no ``Job`` calls
:func:`hold_before_end` where it ends (or, in any language: if the variable
is set, create the file it names and sleep); a run that exits 0 while kills
are owed is an error, not a test with fewer kills.

:func:`run_with_kills_at` kills by progress instead of by time, so the
number of kills does not depend on the machine's speed or load: the job
calls :func:`hold_point` with its progress (e.g. the id of each record);
when that reaches the next kill point the process announces it (a file)
and waits there, the harness sends SIGKILL and restarts it with the next
point.

A tiny real example: a script that would finish at once holds at its end
until its one kill has landed, then finishes:

>>> import sys
>>> script = "from rivermark.testing.crash import hold_before_end; hold_before_end()"
>>> report = run_with_crashes([sys.executable, "-c", script], kills=1, max_delay=60.0)
>>> report.completed, report.kills, report.kills_at_end, report.runs
(True, 1, 1, 2)
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rivermark.checkpoint import faults
from rivermark.errors import RivermarkError
from rivermark.testing import _next_pause

logger = logging.getLogger(__name__)

__all__ = [
    "CrashReport",
    "run_with_crashes",
    "run_with_kills_at",
    "hold_point",
    "hold_before_end",
    "run_uncrashed",
    "CrashHarnessError",
    "HOLD_AT_ENV",
    "HOLD_FILE_ENV",
]

#: environment variables read by :func:`hold_point`
HOLD_AT_ENV = "RIVERMARK_HOLD_AT"
HOLD_FILE_ENV = "RIVERMARK_HOLD_FILE"


class CrashHarnessError(RivermarkError):
    """The job under test failed (non-zero exit that was not our kill) or hung."""


@dataclass
class CrashReport:
    """What :func:`run_with_crashes` did."""

    kills: int = 0  #: random SIGKILLs that hit a running process
    runs: int = 0  #: processes started
    fault_kills: dict[str, int] = field(default_factory=dict)  #: fault point -> self-kills
    completed: bool = False  #: the last run exited 0
    kill_points: list[int] = field(default_factory=list)  #: progress at each kill (by progress)
    kills_at_end: int = 0  #: of ``kills``: runs that reached their end and held there

    def summary(self) -> str:
        """One readable line: how many kills, where, how many runs."""
        text = f"killed with SIGKILL {self.kills} time{'s' if self.kills != 1 else ''}"
        if self.kills_at_end:
            text += f" ({self.kills_at_end} held at the end of the job)"
        if self.kill_points:
            text += " (at progress " + ", ".join(f"{p:,}" for p in self.kill_points) + ")"
        for point, n in sorted(self.fault_kills.items()):
            text += f", {n} self-kill(s) at fault point {point!r}"
        text += f"; {self.runs} runs; " + ("finished" if self.completed else "did NOT finish")
        return text


def _env(env: dict[str, str] | None, fault: str | None) -> dict[str, str]:
    out = dict(os.environ if env is None else env)
    out.pop("RIVERMARK_FAULT", None)
    if fault:
        out["RIVERMARK_FAULT"] = fault
    return out


def _check_failed(proc: subprocess.Popen[bytes], rc: int, cmd: Sequence[str]) -> None:
    """Raise if ``proc`` (ended with ``rc``) failed on its own, with its stderr; close that pipe."""
    err = ""
    if proc.stderr is not None:
        if rc not in (0, -signal.SIGKILL):
            err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    if rc not in (0, -signal.SIGKILL):
        raise CrashHarnessError(f"run_with_crashes: {list(cmd)!r} exited with {rc}:\n{err[-3000:]}")


def run_uncrashed(
    cmd: Sequence[str], env: dict[str, str] | None = None, timeout: float = 300.0
) -> None:
    """Run ``cmd`` once to completion; raise :class:`CrashHarnessError` if it fails."""
    res = subprocess.run(list(cmd), env=_env(env, None), capture_output=True, timeout=timeout)
    if res.returncode != 0:
        raise CrashHarnessError(
            f"run_uncrashed: {list(cmd)!r} exited with {res.returncode}:\n"
            f"{res.stderr.decode(errors='replace')[-3000:]}"
        )


def run_with_crashes(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    kills: int = 20,
    min_delay: float = 0.05,
    max_delay: float = 1.0,
    fault_points: Sequence[str] = (),
    timeout: float = 300.0,
    seed: int = 0,
    on_kill: Callable[[int], None] | None = None,
    ready: Callable[[int], bool] | None = None,
    progress: Callable[[], int | None] | None = None,
    limit: float = 1800.0,
) -> CrashReport:
    """Kill ``cmd`` ``kills`` times at random, then once at each fault point.

    Every phase restarts the command until it exits 0.  While random kills
    are owed, a run that reaches its end holds there (see the module docs)
    and is killed at once; one that exits 0 instead raises
    :class:`CrashHarnessError`.  ``on_kill(n)`` is
    called after the n-th random kill (e.g. to record how far the job got),
    and after each kill at a fault point (``n``: the random kills so far).
    ``ready(pid)``, if given, is polled after each start and the random delay
    counts from when it first returns true (e.g. "the job holds its lock"), so
    slow interpreter start-up under load does not eat the delay.
    ``progress()``, if given, says how far the job got (e.g. the position
    in its newest checkpoint, None before the first): then ``timeout`` is
    counted from the last time that grew, not from the start, so a loaded
    machine that is slow but still moving is waited for (``limit`` seconds
    at most in all).  Raises :class:`CrashHarnessError` when a run fails on
    its own or the deadline passes.
    """
    run = _Runs(cmd, env, timeout, progress, limit)
    try:
        _random_kills(run, kills, random.Random(seed), (min_delay, max_delay), on_kill, ready)
        _fault_kills(run, fault_points, on_kill)
    finally:
        shutil.rmtree(run.hold_dir, ignore_errors=True)
    run.report.completed = True
    return run.report


def _random_kills(
    run: _Runs,
    kills: int,
    rng: random.Random,
    delays: tuple[float, float],
    on_kill: Callable[[int], None] | None,
    ready: Callable[[int], bool] | None,
) -> None:
    """Phase 1: ``kills`` random kills (none when ``kills <= 0``), then a run to the end."""
    done = kills <= 0
    while not done:
        owed = run.report.kills < kills
        proc = run.start(None, hold=owed)
        if owed:
            if ready is not None:
                run.wait_ready(proc, ready)
            rc = run.killed_after(proc, rng.uniform(*delays))
            if rc is None:
                if on_kill is not None:
                    on_kill(run.report.kills)
                continue
            _check_failed(proc, rc, run.cmd)
            if rc == -signal.SIGKILL:  # killed by someone else (the OOM killer): again
                continue
            raise CrashHarnessError(
                f"run_with_crashes: {run.cmd!r} exited {rc} after {run.report.kills} of "
                f"{kills} kills instead of holding at its end: run it as a rivermark Job, "
                "or call rivermark.testing.crash.hold_before_end() where it ends"
            )
        rc = run.to_end(proc)
        _check_failed(proc, rc, run.cmd)
        done = rc == 0


def _fault_kills(
    run: _Runs, fault_points: Sequence[str], on_kill: Callable[[int], None] | None
) -> None:
    """Phase 2: one self-kill per fault point, each followed by a run to the end."""
    cmd = run.cmd
    for point in fault_points:
        proc = run.start(point)
        rc = run.to_end(proc)
        _check_failed(proc, rc, cmd)
        if rc == -signal.SIGKILL:
            run.report.fault_kills[point] = run.report.fault_kills.get(point, 0) + 1
            if on_kill is not None:
                on_kill(run.report.kills)
        proc = run.start(None)
        rc = run.to_end(proc)
        _check_failed(proc, rc, cmd)
        if rc != 0:
            raise CrashHarnessError(f"run_with_crashes: {list(cmd)!r} was killed unexpectedly")


class _Runs:
    """The runs of one :func:`run_with_crashes`: starts, the overall deadline, the report."""

    def __init__(
        self,
        cmd: Sequence[str],
        env: dict[str, str] | None,
        timeout: float,
        progress: Callable[[], int | None] | None = None,
        limit: float = 1800.0,
    ) -> None:
        self.cmd, self.env, self.timeout = list(cmd), env, timeout
        self.report = CrashReport()
        self.start_time = time.monotonic()
        self.deadline = self.start_time + timeout
        self.progress, self.limit = progress, limit
        self.best: int | None = None
        self.next_poll = 0.0  # progress() is asked at most once a second
        self.hold_dir = Path(tempfile.mkdtemp(prefix="rivermark-crash-"))
        self.held = self.hold_dir / "held"  # created by a run that holds at its end

    def start(self, fault: str | None, hold: bool = False) -> subprocess.Popen[bytes]:
        self.report.runs += 1
        env = _env(self.env, fault)
        self.held.unlink(missing_ok=True)
        if hold:
            env[faults.HOLD_END_ENV] = str(self.held)
        return subprocess.Popen(
            self.cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def remaining(self) -> float:
        now = time.monotonic()
        if self.progress is not None and now >= self.next_poll:
            self.next_poll = now + 1.0
            got = self.progress()
            if got is not None and (self.best is None or got > self.best):
                self.best = got
                self.deadline = min(now + self.timeout, self.start_time + self.limit)
        left = self.deadline - now
        if left <= 0:
            moving = "" if self.progress is None else f" without progress (it got to {self.best})"
            raise CrashHarnessError(
                f"run_with_crashes: {self.cmd!r} did not finish in {self.timeout} s{moving}"
            )
        return left

    def wait_ready(self, proc: subprocess.Popen[bytes], ready: Callable[[int], bool]) -> None:
        pause = 0.002  # growing to 50 ms: the poll leaves the processors to the job
        while proc.poll() is None and not ready(proc.pid) and not self.held.exists():
            self.remaining()
            time.sleep(pause)
            pause = _next_pause(pause, 0.002)

    def _wait(self, proc: subprocess.Popen[bytes], most: float) -> int | None:
        """Wait up to ``most`` s (1 s at most, so progress meanwhile moves the deadline).

        The exit status, or None if ``proc`` still runs; past the deadline it
        kills ``proc`` and raises :class:`CrashHarnessError`.
        """
        try:
            return proc.wait(timeout=min(most, self.remaining(), 1.0))
        except subprocess.TimeoutExpired:
            return None
        except CrashHarnessError:
            proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
            raise

    def killed_after(self, proc: subprocess.Popen[bytes], delay: float) -> int | None:
        """SIGKILL ``proc`` after ``delay`` s, or as soon as it holds at its end (None).

        Its exit status if it ended first.
        """
        kill_at = time.monotonic() + delay
        while (left := kill_at - time.monotonic()) > 0 and not self.held.exists():
            rc = self._wait(proc, min(left, 0.01))
            if rc is not None:
                return rc
        if self.held.exists():
            self.report.kills_at_end += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.report.kills += 1
        if proc.stderr:
            proc.stderr.close()
        return None

    def to_end(self, proc: subprocess.Popen[bytes]) -> int:
        """Wait for ``proc`` to end by itself; its exit status."""
        while (rc := self._wait(proc, 1.0)) is None:
            pass
        return rc


def hold_before_end() -> None:
    """Where a job script that runs no :class:`~rivermark.checkpoint.Job` ends: wait to be killed.

    Does nothing unless :func:`run_with_crashes` still owes the run kills
    (it sets ``RIVERMARK_HOLD_END``); a ``Job`` does this by itself.
    """
    asyncio.run(faults.hold_before_end())


_hold_at = os.environ.get(HOLD_AT_ENV)
_hold_file = os.environ.get(HOLD_FILE_ENV)


def hold_point(progress: int) -> None:
    """Wait here for good once ``progress`` reaches ``RIVERMARK_HOLD_AT``.

    Does nothing unless both ``RIVERMARK_HOLD_AT`` and ``RIVERMARK_HOLD_FILE``
    are set (by :func:`run_with_kills_at`).  Then, the first time
    ``progress >= RIVERMARK_HOLD_AT``, it creates the file and blocks this
    thread until the harness kills the process.
    """
    if _hold_at is None or _hold_file is None or progress < int(_hold_at):
        return
    Path(_hold_file).touch()
    while True:  # the harness sends SIGKILL
        time.sleep(1)


def run_with_kills_at(
    cmd: Sequence[str],
    points: Sequence[int],
    *,
    hold_file: str | os.PathLike[str],
    env: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> CrashReport:
    """Run ``cmd`` and SIGKILL it once at each progress point, then let it finish.

    ``cmd`` must call :func:`hold_point` with its progress.  Each run gets
    the next point; the harness waits (no timer) until the job announces it
    reached that point, kills it there, and restarts it.  A run that exits
    0 before its point counts no kill.  Raises :class:`CrashHarnessError`
    when a run fails on its own or ``timeout`` seconds pass.
    """
    report = CrashReport()
    deadline = time.monotonic() + timeout
    marker = Path(hold_file)

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CrashHarnessError(
                f"run_with_kills_at: {list(cmd)!r} did not finish in {timeout} s"
            )
        return remaining

    for point in [*points, None]:
        marker.unlink(missing_ok=True)
        run_env = _env(env, None)
        run_env.pop(HOLD_AT_ENV, None)
        if point is not None:
            run_env[HOLD_AT_ENV] = str(point)
            run_env[HOLD_FILE_ENV] = str(marker)
        report.runs += 1
        proc = subprocess.Popen(
            list(cmd), env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            while proc.poll() is None and not (point is not None and marker.exists()):
                left()
                time.sleep(0.005)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                report.kills += 1
                report.kill_points.append(int(point or 0))
                continue
            _check_failed(proc, proc.returncode, cmd)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr:
                proc.stderr.close()
        if point is None:
            report.completed = True
    marker.unlink(missing_ok=True)
    return report
