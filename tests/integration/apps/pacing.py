"""The pacing of the test apps: RIVERMARK_APP_WORK units of work per record.

The apps import it as a sibling module (``rivermark run`` puts an app's
directory on ``sys.path``).  The pacing changes no output; it makes a run
long enough to be killed mid-data.  With ``RIVERMARK_APP_WORK_WHILE_KILLED=1``
only the runs that the crash harness will still kill are paced: it sets
``RIVERMARK_HOLD_END`` for each run while kills are owed, and the run after
the last kill, which nothing kills, goes at full speed to the same output.

A unit of work is ``UNIT`` seconds of waiting, about what a round of SHA-256
hashing costs here.  The apps wait rather than compute: the crash tests run
on several pytest processes of a two-core machine, and a paced job that
sleeps leaves the processors to the others (the kills land inside the user's
function either way).  The wait is owed per record and slept in slices of at
least ``SLICE`` seconds, so a record's share costs no system call.

>>> work_rounds({"RIVERMARK_APP_WORK": "120"})
120
>>> paced = {"RIVERMARK_APP_WORK": "120", "RIVERMARK_APP_WORK_WHILE_KILLED": "1"}
>>> work_rounds({**paced, HOLD_END_ENV: "/tmp/held"})  # a run that will be killed
120
>>> work_rounds(paced)  # the run after the last kill
0
>>> pacer = Pacer(100)
>>> start = time.monotonic()
>>> for _ in range(200):
...     pacer.record()
>>> 0.025 <= time.monotonic() - start < 5  # 200 records x 100 units x 1.5 us
True
>>> Pacer(0).record()  # no work: returns at once
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from rivermark.checkpoint.faults import HOLD_END_ENV

UNIT = 1.5e-6
SLICE = 0.002


def work_rounds(env: Mapping[str, str] = os.environ) -> int:
    """Units of work per record for this run (see the module docs)."""
    work = int(env.get("RIVERMARK_APP_WORK", "0"))
    if env.get("RIVERMARK_APP_WORK_WHILE_KILLED") == "1" and HOLD_END_ENV not in env:
        return 0
    return work


class Pacer:
    """Waits ``work`` units per record, slept in slices (see the module docs)."""

    def __init__(self, work: int) -> None:
        self.each = work * UNIT
        self.owed = 0.0

    def record(self, count: int = 1) -> None:
        """The wait of ``count`` records (slept once a slice is owed)."""
        if self.each <= 0:
            return
        self.owed += self.each * count
        if self.owed >= SLICE:
            start = time.monotonic()
            time.sleep(self.owed)
            # a longer sleep than owed is credited to the next records
            self.owed -= time.monotonic() - start


pace = Pacer(work_rounds())
