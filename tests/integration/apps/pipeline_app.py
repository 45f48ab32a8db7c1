"""The acceptance pipeline, run by ``rivermark run pipeline_app.py:source``.

Input and output paths come from RIVERMARK_APP_INPUT / RIVERMARK_APP_OUTPUT.
RIVERMARK_APP_WORK (default 0) adds that many units of waiting (pacing.py) per record, which
does not change the output but makes the run long enough to be killed mid-data.
"""

from __future__ import annotations

import json
import os

from pacing import pace

from rivermark import Stream


def add(acc: int, x: int) -> int:
    return acc + x


def parse(line: str) -> dict[str, int]:
    pace.record()
    return json.loads(line)


def keep(record: dict[str, int]) -> bool:
    return record["v"] % 3 != 0


def value(record: dict[str, int]) -> int:
    return record["v"]


INPUT = os.environ.get("RIVERMARK_APP_INPUT")
OUTPUT = os.environ.get("RIVERMARK_APP_OUTPUT", os.devnull)
lines: list[str] = []
if INPUT:
    with open(INPUT) as f:
        lines = f.read().splitlines()

source = Stream.from_iterable(lines, name="lines")
(
    source.map(parse)
    .filter(keep)
    .map(value)
    .accumulate(add, start=0)
    .sliding_window(3, return_partial=False)
    .partition(2)
    .flatten()
    .sink_to_textfile(OUTPUT)
)
