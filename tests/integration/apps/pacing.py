"""The pacing of the test apps: RIVERMARK_APP_WORK rounds of hashing per record.

The apps import it as a sibling module (``rivermark run`` puts an app's
directory on ``sys.path``).  The hashing changes no output; it makes a run
long enough to be killed mid-data.  With ``RIVERMARK_APP_WORK_WHILE_KILLED=1``
only the runs that the crash harness will still kill are paced: it sets
``RIVERMARK_HOLD_END`` for each run while kills are owed, and the run after
the last kill, which nothing kills, goes at full speed to the same output.

>>> work_rounds({"RIVERMARK_APP_WORK": "120"})
120
>>> paced = {"RIVERMARK_APP_WORK": "120", "RIVERMARK_APP_WORK_WHILE_KILLED": "1"}
>>> work_rounds({**paced, HOLD_END_ENV: "/tmp/held"})  # a run that will be killed
120
>>> work_rounds(paced)  # the run after the last kill
0
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rivermark.checkpoint.faults import HOLD_END_ENV


def work_rounds(env: Mapping[str, str] = os.environ) -> int:
    """Rounds of hashing per record for this run (see the module docs)."""
    work = int(env.get("RIVERMARK_APP_WORK", "0"))
    if env.get("RIVERMARK_APP_WORK_WHILE_KILLED") == "1" and HOLD_END_ENV not in env:
        return 0
    return work
