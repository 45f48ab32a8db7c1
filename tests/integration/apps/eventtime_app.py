"""Event-time windows over a file, run by ``rivermark run eventtime_app.py:source``.

RIVERMARK_APP_INPUT is a file of JSON lines ``{"v": i, "ts": t, "k": k}``
whose times are out of order (by up to 4 s) with a few records far behind
(late); RIVERMARK_APP_OUTPUT gets one line per window and per late record;
RIVERMARK_APP_WORK adds units of waiting (pacing.py) per record (the same output, a
longer run).  Four event-time nodes share one watermark (``max_delay`` 5 s):

* ``tumble``: per key, 1 s windows, count and sum of ``v``, grace 1 s;
* ``hop``: unkeyed 4 s windows every 2 s, the mean of ``v``;
* ``sessions``: per key, sessions with a 2 s gap, the values collected;
* ``late``: the records ``tumble`` could no longer count;
* ``alarms``: a ``keyed_process`` that, 3 s (event time) after a key's
  first record, reports how many records the key had by then.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pacing import pace

from rivermark import Stream
from rivermark.operators.eventtime import WindowResult


def parse(line: str) -> dict[str, Any]:
    pace.record()
    return dict(json.loads(line))


def event_time(r: dict[str, Any]) -> float:
    return float(r["ts"])


def key(r: dict[str, Any]) -> int:
    return int(r["k"])


def count_sum(acc: tuple[int, int], r: dict[str, Any]) -> tuple[int, int]:
    return (acc[0] + 1, acc[1] + r["v"])


def value(r: dict[str, Any]) -> int:
    return int(r["v"])


def line(tag: str) -> Any:
    def as_line(w: WindowResult) -> str:
        return f"{tag} {w.start:.2f} {w.end:.2f} {w.key} {w.value}"

    return as_line


def note(ctx: Any, r: dict[str, Any]) -> None:
    if ctx.state is None:
        ctx.set_timer(ctx.time + 3)
    ctx.state = (ctx.state or 0) + 1


def alarm(ctx: Any, t: float) -> None:
    ctx.emit(f"alarm {ctx.key} {t:.2f} {ctx.state}")
    ctx.state = None


def late_line(r: dict[str, Any]) -> str:
    return f"late {r['v']} {r['ts']}"


INPUT = os.environ.get("RIVERMARK_APP_INPUT", os.devnull)
OUTPUT = os.environ.get("RIVERMARK_APP_OUTPUT", os.devnull)

source = Stream.from_textfile(INPUT, stop_at_eof=True, name="lines")
times = source.map(parse).timestamps(event_time, max_delay="5s", name="times")
tumble = times.tumbling_window(1, key=key, fold=count_sum, start=(0, 0), grace=1, name="tumble")
hop = times.hopping_window(4, 2, agg="mean", value=value, name="hop")
sessions = times.session_window(2, key=key, agg="collect", value=value, name="sessions")
alarms = times.keyed_process(note, key=key, on_timer=alarm, name="alarms")
tumble.map(line("tumble")).union(
    hop.map(line("hop")), sessions.map(line("session")), tumble.late.map(late_line), alarms
).sink_to_textfile(OUTPUT)
