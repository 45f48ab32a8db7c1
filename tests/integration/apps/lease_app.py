"""A job without output files, run by ``rivermark run lease_app.py:source`` in the lease tests.

It sums ``range(RIVERMARK_APP_N)`` into the checkpointed state ``sum``;
RIVERMARK_APP_WORK units of waiting (pacing.py) per record make it slow enough to freeze mid-run.
"""

from __future__ import annotations

import os

from pacing import pace

from rivermark import Stream

N = int(os.environ.get("RIVERMARK_APP_N", "20000"))


def slow(x: int) -> int:
    pace.record()
    return x


def add(acc: int, x: int) -> int:
    return acc + x


def ignore(x: int) -> None:
    pass


source = Stream.from_iterable(range(N), name="numbers")
source.map(slow).accumulate(add, start=0, name="sum").sink(ignore)
