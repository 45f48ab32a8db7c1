"""A job without output files, run by ``rivermark run lease_app.py:source`` in the lease tests.

It sums ``range(RIVERMARK_APP_N)`` into the checkpointed state ``sum``;
RIVERMARK_APP_WORK rounds of hashing per record make it slow enough to freeze mid-run.
"""

from __future__ import annotations

import hashlib
import os

from rivermark import Stream

N = int(os.environ.get("RIVERMARK_APP_N", "20000"))
WORK = int(os.environ.get("RIVERMARK_APP_WORK", "0"))


def slow(x: int) -> int:
    data = str(x).encode()
    for _ in range(WORK):
        data = hashlib.sha256(data).digest()
    return x


def add(acc: int, x: int) -> int:
    return acc + x


def ignore(x: int) -> None:
    pass


source = Stream.from_iterable(range(N), name="numbers")
source.map(slow).accumulate(add, start=0, name="sum").sink(ignore)
