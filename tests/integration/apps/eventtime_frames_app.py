"""Event-time windows on a streaming DataFrame, run by ``rivermark run eventtime_frames_app.py:source``.

RIVERMARK_APP_INPUT is a file of JSON lines, each a batch: a list of
``[v, ts, k]`` rows whose times are out of order (by up to 4 s) with a few
rows far behind (late); RIVERMARK_APP_OUTPUT gets one line per window and
per late row; RIVERMARK_APP_WORK adds units of waiting (pacing.py) per row (the same
output, a longer run).  Three windows share one watermark (``max_delay`` 5 s):

* ``tumble``: per key, 1 s windows, the sum of ``v``, grace 1 s, and its late rows;
* ``hop``: 4 s windows every 2 s, the mean of ``v``;
* ``sessions``: per key, sessions with a 2 s gap, the last ``v`` (a function).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pandas as pd
from pacing import pace

from rivermark import Stream
from rivermark.dataframe import DataFrame

EXAMPLE = pd.DataFrame(
    {
        "v": pd.Series([], dtype="int64"),
        "ts": pd.Series([], dtype="float64"),
        "k": pd.Series([], dtype="int64"),
    }
)


def parse(line: str) -> pd.DataFrame:
    rows = json.loads(line)
    pace.record(len(rows))
    return pd.DataFrame(rows, columns=["v", "ts", "k"]).astype(EXAMPLE.dtypes.to_dict())


def last(values: pd.Series) -> int:
    return int(values.iloc[-1])


def lines(tag: str, key: bool) -> Any:
    def as_lines(frame: pd.DataFrame) -> str:
        return "\n".join(
            f"{tag} {r.start:.2f} {r.end:.2f} {r.k if key else '-'} {r.v!r}"
            for r in frame.itertuples()
        )

    return as_lines


def late_lines(frame: pd.DataFrame) -> str:
    return "\n".join(f"late {r.v} {r.ts}" for r in frame.itertuples())


INPUT = os.environ.get("RIVERMARK_APP_INPUT", os.devnull)
OUTPUT = os.environ.get("RIVERMARK_APP_OUTPUT", os.devnull)

source = Stream.from_textfile(INPUT, stop_at_eof=True, name="lines")
timed = DataFrame(source.map(parse), example=EXAMPLE).timestamps("ts", max_delay="5s", name="times")
tumble = timed.tumbling_window(1, grace=1).groupby("k").v.sum(name="tumble")
hop = timed.hopping_window(4, 2).v.mean(name="hop")
sessions = timed.session_window(2).groupby("k").v.agg(last, name="sessions")
tumble.stream.map(lines("tumble", True)).union(
    hop.stream.map(lines("hop", False)),
    sessions.stream.map(lines("session", True)),
    tumble.late.stream.map(late_lines),
).sink_to_textfile(OUTPUT)
