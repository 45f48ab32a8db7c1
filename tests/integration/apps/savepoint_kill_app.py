"""A job with a large keyed state, for savepoints taken while it is SIGKILLed.

``rivermark run savepoint_kill_app.py:source --checkpoint CKPT --ui 0``
with RIVERMARK_APP_INPUT (one integer a line) and RIVERMARK_APP_OUTPUT: a
``KeyedState`` counts ``v % 40000`` (so a savepoint writes tens of
thousands of keys: its write takes long enough to be killed in), and the
output gets ``key count`` for every record.  RIVERMARK_APP_SLOW (seconds
per 1,000 records) keeps the job running while savepoints are asked for.
"""

from __future__ import annotations

import os
import time

from rivermark import KeyedState, Stream

KEYS = int(os.environ.get("RIVERMARK_APP_KEYS", "40000"))
SLOW = float(os.environ.get("RIVERMARK_APP_SLOW", "0"))


def count(acc: KeyedState, v: int) -> tuple[KeyedState, str]:
    key = v % KEYS
    acc[key] = acc.get(key, 0) + 1
    if SLOW and v % 1000 == 0:
        time.sleep(SLOW)
    return acc, f"{key} {acc[key]}"


source = Stream.from_textfile(os.environ["RIVERMARK_APP_INPUT"], stop_at_eof=True, name="lines")
(
    source.map(int)
    .accumulate(count, start=KeyedState(), returns_state=True, name="counts")
    .sink_to_textfile(os.environ["RIVERMARK_APP_OUTPUT"], name="out")
)
