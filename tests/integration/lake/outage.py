"""A job process whose server goes away while it runs: how the job stopped.

The lake sinks' outage tests (``lake/test_lake_outage.py``) cut a TCP proxy
in front of the S3 server, the SQL sink's (``sql/test_sql_errors.py``) stop
the PostgreSQL server; both then check that the job stopped on its own,
within its timeout, with one line on stderr.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rivermark.testing import wait_for


@dataclass(frozen=True)
class Stopped:
    """How a job ended after its server went away."""

    returncode: int
    #: seconds from the outage to the job's exit
    seconds: float
    stderr: str

    def said(self) -> list[str]:
        """The lines of stderr that the command line wrote itself (``rivermark...``)."""
        return [line for line in self.stderr.splitlines() if line.startswith("rivermark")]


def run_into_outage(
    cmd: Sequence[str],
    env: Mapping[str, str],
    ready: Callable[[], bool],
    cut: Callable[[], object],
    *,
    what: str,
    exit_timeout: float,
    ready_timeout: float = 120.0,
) -> Stopped:
    """Start ``cmd``; when ``ready()``, ``cut()`` its server and wait for the job to exit.

    The job must still be running when it is ready (``what`` names that
    moment) and must exit within ``exit_timeout`` seconds of the cut; a job
    still running when the test fails is killed (SIGKILL).
    """
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: proc.poll() is not None or ready(), timeout=ready_timeout, what=what)
        if proc.poll() is not None:
            assert proc.stderr is not None
            raise AssertionError(
                f"the job ended before its server went away: {proc.stderr.read().decode()}"
            )
        started = time.monotonic()
        cut()
        rc = proc.wait(timeout=exit_timeout)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return Stopped(rc, took, err)
