"""Keyed state in four operators, run by ``rivermark run keyed_app.py:source``.

The same input and environment as ``pipeline_app.py``: RIVERMARK_APP_INPUT /
RIVERMARK_APP_OUTPUT, RIVERMARK_APP_WORK rounds of hashing per record.  Each
record goes to four stateful nodes, all checkpointed as delta chains:

* ``counts``: an ``accumulate`` over a ``KeyedState`` counts the record's key
  (``v % 997``); a key whose count reaches 40 is deleted (it starts again
  from 1), so checkpoints hold set and deleted keys.  Line ``key count``;
* ``firsts``: ``unique`` of ``v * v % 65537`` (about half the records repeat
  an earlier key).  Line ``new key`` for a key not seen before;
* ``freq``: ``frequencies`` of ``v % 7``.  Line ``freq`` and the counts;
* ``groups``: ``partition(3, key=v % 11)``.  Line ``group`` and the tuple.

The lines of one record come in that order (the graph's order).
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


def square_key(v: int) -> int:
    return v * v % 65537


def new_line(k: int) -> str:
    return f"new {k}"


def weekday(v: int) -> int:
    return v % 7


def freq_line(counts: dict[int, int]) -> str:
    return "freq " + " ".join(f"{k}:{n}" for k, n in sorted(counts.items()))


def eleventh(v: int) -> int:
    return v % 11


def group_line(group: tuple[int, ...]) -> str:
    return f"group {group}"


INPUT = os.environ.get("RIVERMARK_APP_INPUT")
OUTPUT = os.environ.get("RIVERMARK_APP_OUTPUT", os.devnull)
lines: list[str] = []
if INPUT:
    with open(INPUT) as f:
        lines = f.read().splitlines()

source = Stream.from_iterable(lines, name="lines")
values = source.map(parse)
counted = values.accumulate(count, start=KeyedState(), returns_state=True, name="counts")
firsts = values.map(square_key).unique(name="firsts").map(new_line)
freq = values.map(weekday).frequencies(name="freq").map(freq_line)
groups = values.partition(3, key=eleventh, name="groups").map(group_line)
counted.union(firsts, freq, groups).sink_to_textfile(OUTPUT)
