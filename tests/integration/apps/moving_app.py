"""A keyed count over a text file, for moving a job with a savepoint.

``rivermark run moving_app.py:source``; ``MOVING_IN`` names the input (one
number a line), ``MOVING_OUT`` the output (the number of keys after each
record), ``MOVING_MARK`` a file created once record 3,000 went through, after
which each record takes a millisecond (so that a signal finds the job
running); without it records are not slowed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from keyedcount import count

from rivermark import KeyedState, Stream

MARK = os.environ.get("MOVING_MARK")


def seen(line: str) -> int:
    i = int(line)
    if MARK is not None and i >= 3000:
        if i == 3000:
            Path(MARK).touch()
        time.sleep(0.001)  # pacing, not synchronisation
    return (i * 13) % 211


source = Stream.from_textfile(os.environ["MOVING_IN"], stop_at_eof=True, name="lines")
acc = source.map(seen).accumulate(count, start=KeyedState(), name="counts")
acc.map(len).sink_to_textfile(os.environ["MOVING_OUT"])
