"""Keyed state in six operators, run by ``rivermark run keyed_app.py:source``.

The same input and environment as ``pipeline_app.py``: RIVERMARK_APP_INPUT /
RIVERMARK_APP_OUTPUT, RIVERMARK_APP_WORK units of waiting (pacing.py) per record.  Each
record goes to four stateful nodes, and every 250 records to two running
groupby aggregations of a streaming DataFrame, all checkpointed as delta
chains:

* ``counts``: an ``accumulate`` over a ``KeyedState`` counts the record's key
  (``v % 997``); a key whose count reaches 40 is deleted (it starts again
  from 1), so checkpoints hold set and deleted keys.  Line ``key count``;
* ``firsts``: ``unique`` of ``v * v % 65537`` (about half the records repeat
  an earlier key).  Line ``new key`` for a key not seen before;
* ``freq``: ``frequencies`` of ``v % 7``.  Line ``freq`` and the counts;
* ``groups``: ``partition(3, key=v % 11)``.  Line ``group`` and the tuple;
* ``gsum`` and ``gvar``: ``partition(250)`` makes a DataFrame of 250 records
  (``k = (v // 125) * 31 % 997``: 800 keys, each batch changes two of them,
  new keys come out of order); ``groupby("k").v.sum()`` and
  ``groupby("k").x.var()``.  Lines ``gsum``/``gvar`` with the number of keys
  and a digest of the whole result.

The lines of one record come in that order (the graph's order).

``RIVERMARK_APP_KEYS=K`` gives ``counts`` scattered keys instead: the key of
record ``v`` is ``(v % K) * 2654435761 % 2**32`` (K distinct keys in an order
that jumps all over the key space, as user or session ids do), and
``RIVERMARK_APP_PAD=B`` stores B bytes of text beside each count (state that
fills a disk quickly).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np
import pandas as pd
from pacing import pace

from rivermark import KeyedState, Stream
from rivermark.dataframe import DataFrame

KEYS = int(os.environ.get("RIVERMARK_APP_KEYS", "0"))
PAD = int(os.environ.get("RIVERMARK_APP_PAD", "0"))


def parse(line: str) -> int:
    pace.record()
    return int(json.loads(line)["v"])


def count(acc: KeyedState, v: int) -> tuple[KeyedState, str]:
    key = v % 997 if not KEYS else (v % KEYS) * 2654435761 % 2**32
    old = acc.get(key, (0,) if PAD else 0)
    n = (old[0] if PAD else old) + 1
    if n >= 40:
        del acc[key]
    elif PAD:
        acc[key] = (n, hashlib.shake_256(str(key).encode()).hexdigest(PAD // 2))
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


def as_frame(batch: tuple[int, ...]) -> pd.DataFrame:
    v = np.array(batch, dtype=np.int64)
    return pd.DataFrame({"k": (v // 125) * 31 % 997, "v": v, "x": (v * 7919 % 1009) / 8})


def digest(tag: str) -> Any:
    def line(result: pd.Series) -> str:
        data = result.index.to_numpy().tobytes() + result.to_numpy().tobytes()
        return f"{tag} {len(result)} {hashlib.sha256(data).hexdigest()[:16]}"

    return line


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
sdf = DataFrame(values.partition(250, name="batches").map(as_frame), example=as_frame(()))
gsum = sdf.groupby("k").v.sum().stream
gvar = sdf.groupby("k").x.var().stream
gsum.name, gvar.name = "gsum", "gvar"
sums, variances = gsum.map(digest("gsum")), gvar.map(digest("gvar"))
counted.union(firsts, freq, groups, sums, variances).sink_to_textfile(OUTPUT)
