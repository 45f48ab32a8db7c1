"""An as-of join over a file, run by ``rivermark run asofjoin_app.py:source``.

RIVERMARK_APP_INPUT is a file of JSON lines, each a change of the table
(``{"s": "T", "i": i, "ts": t, "k": k, "v": value or null}``, null deleting
the key) or a record to join (``{"s": "L", "i": i, "ts": t, "k": k}``), out of
order by up to 3 s, a few far behind (late).  RIVERMARK_APP_OUTPUT gets one
line per joined record (``how="left"``), per pair of a record and a change
at most 0.5 s apart (an interval join, left-outer) and per late record;
RIVERMARK_APP_WORK adds units of waiting (pacing.py) per line (a longer run, the same
output).  RIVERMARK_APP_JOINS names the joins to run, comma-separated, of
``asof``, ``interval`` and ``window`` (a co-group of the records and the
changes of one key in 1 s tumbling windows, ``how="outer"``); all three by
default.  With ``--state rocksdb`` the table and the buffers live in RocksDB.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pacing import pace

from rivermark import Stream
from rivermark.operators.eventtime import WindowResult

JOINS = os.environ.get("RIVERMARK_APP_JOINS", "asof,interval,window").split(",")


def parse(line: str) -> dict[str, Any]:
    pace.record()
    return dict(json.loads(line))


def is_change(r: dict[str, Any]) -> bool:
    return bool(r["s"] == "T")


def is_record(r: dict[str, Any]) -> bool:
    return bool(r["s"] == "L")


def event_time(r: dict[str, Any]) -> float:
    return float(r["ts"])


def key(r: dict[str, Any]) -> int:
    return int(r["k"])


def value(r: dict[str, Any]) -> Any:
    return r["v"]


def joined_line(pair: tuple[dict[str, Any], Any]) -> str:
    r, v = pair
    return f"join {r['i']} {r['ts']} {r['k']} {v}"


def pair_line(pair: tuple[dict[str, Any], Any]) -> str:
    r, c = pair
    return f"pair {r['i']} {None if c is None else c['i']}"


def ids(lefts: list[dict[str, Any]], rights: list[dict[str, Any]]) -> str:
    return f"{[r['i'] for r in lefts]} {[c['i'] for c in rights]}"


def window_line(w: WindowResult) -> str:
    return f"window {w.start} {w.key} {w.value}"


def late_line(r: dict[str, Any]) -> str:
    return f"late {r['s']} {r['i']} {r['ts']}"


INPUT = os.environ.get("RIVERMARK_APP_INPUT", os.devnull)
OUTPUT = os.environ.get("RIVERMARK_APP_OUTPUT", os.devnull)

source = Stream.from_textfile(INPUT, stop_at_eof=True, name="lines")
rows = source.map(parse, name="parse")
change_times = rows.filter(is_change, name="changes").timestamps(
    event_time, max_delay="4s", name="table_times"
)
record_times = rows.filter(is_record, name="records").timestamps(
    event_time, max_delay="4s", name="record_times"
)
outputs: list[Stream] = []
if "asof" in JOINS:
    table = change_times.to_table(key=key, value=value, name="table")
    joined = record_times.join_asof(table, key=key, how="left", name="join")
    outputs += [joined.map(joined_line), joined.late.map(late_line), table.late.map(late_line)]
if "interval" in JOINS:
    pairs = record_times.join_interval(
        change_times, key=key, lower=-0.5, upper=0.5, how="left", name="pairs"
    )
    outputs += [pairs.map(pair_line), pairs.late.map(late_line)]
if "window" in JOINS:
    windows = record_times.join_window(
        change_times, key=key, size=1.0, func=ids, how="outer", name="windows"
    )
    outputs += [windows.map(window_line), windows.late.map(late_line)]
outputs[0].union(*outputs[1:]).sink_to_textfile(OUTPUT)
