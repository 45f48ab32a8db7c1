"""A keyed running count in a ``KeyedState``, run by ``rivermark run keyed_app.py:source``.

The same input and environment as ``pipeline_app.py``: RIVERMARK_APP_INPUT /
RIVERMARK_APP_OUTPUT, RIVERMARK_APP_WORK rounds of hashing per record.  Each
record counts its key (``v % 997``); a key whose count reaches 40 is deleted
(it starts again from 1), so checkpoints hold set and deleted keys.  One
output line per record: ``key count``.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from rivermark import KeyedState, Stream

WORK = int(os.environ.get("RIVERMARK_APP_WORK", "0"))


def parse(line: str) -> int:
    data = line.encode()
    for _ in range(WORK):
        data = hashlib.sha256(data).digest()
    return int(json.loads(line)["v"])


def count(acc: KeyedState, v: int) -> tuple[KeyedState, str]:
    key = v % 997
    n = acc.get(key, 0) + 1
    if n >= 40:
        del acc[key]
    else:
        acc[key] = n
    return acc, f"{key} {n}"


def as_line(x: Any) -> str:
    return str(x)


INPUT = os.environ.get("RIVERMARK_APP_INPUT")
OUTPUT = os.environ.get("RIVERMARK_APP_OUTPUT", os.devnull)
lines: list[str] = []
if INPUT:
    with open(INPUT) as f:
        lines = f.read().splitlines()

source = Stream.from_iterable(lines, name="lines")
(
    source.map(parse)
    .accumulate(count, start=KeyedState(), returns_state=True, name="counts")
    .sink_to_textfile(OUTPUT)
)
