"""The demo pipeline: running totals per user from a JSON-lines file.

Run it as a checkpointed job with the command line::

    rivermark run examples/demo_app.py:totals --checkpoint demo-output/ckpt --every 0.2s

``RIVERMARK_DEMO_INPUT`` and ``RIVERMARK_DEMO_OUTPUT`` choose the files
(defaults under ``demo-output/``).
"""

from __future__ import annotations

import json
import os

from rivermark import Stream
from rivermark.testing.crash import hold_point

INPUT = os.environ.get("RIVERMARK_DEMO_INPUT", "demo-output/events.jsonl")
OUTPUT = os.environ.get("RIVERMARK_DEMO_OUTPUT", "demo-output/totals.jsonl")


def add(totals: dict[str, int], record: dict[str, object]) -> tuple[dict[str, int], str]:
    """Fold one event into the running totals; emit that user's new total."""
    # the demo's kill points: a no-op unless examples/demo.py set RIVERMARK_HOLD_AT
    hold_point(int(record["id"]))  # type: ignore[call-overload]
    user = str(record["user"])
    new = dict(totals)
    new[user] = new.get(user, 0) + int(record["amount"])  # type: ignore[call-overload]
    return new, json.dumps({"id": record["id"], "user": user, "total": new[user]})


source = Stream.from_textfile(INPUT, stop_at_eof=True)
totals = (
    source.map(json.loads)
    .filter(lambda r: r["amount"] > 0)
    .accumulate(add, start={}, returns_state=True)
    .sliding_window(3, return_partial=False)
    .map(lambda window: window[-1])
)
totals.sink_to_textfile(OUTPUT)
