"""A pipeline to watch: ``rivermark run examples/observed_app.py:events --ui 8080``.

Events from a JSON-lines file are parsed, filtered, totalled per user and
written out; a second branch counts events in windows of 100, and a
deliberately fragile step skips the records it cannot handle.  It is slowed
down a little so that there is something to watch.

``python examples/observed_app.py write FILE [N]`` writes N events (default
200,000) to FILE.  ``OBSERVED_INPUT`` / ``OBSERVED_OUTPUT`` choose the files.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from rivermark import Stream

INPUT = os.environ.get("OBSERVED_INPUT", "demo-output/events.jsonl")
OUTPUT = os.environ.get("OBSERVED_OUTPUT", "demo-output/observed.jsonl")


def parse(line: str) -> dict[str, object]:
    time.sleep(0.0002)  # something to watch
    record: dict[str, object] = json.loads(line)
    return record


def add(totals: dict[str, int], record: dict[str, object]) -> tuple[dict[str, int], str]:
    user = str(record["user"])
    new = dict(totals)
    new[user] = new.get(user, 0) + int(str(record["amount"]))
    return new, json.dumps({"user": user, "total": new[user]})


def ratio(record: dict[str, object]) -> float:
    return 100 / int(str(record["amount"]))  # fails on amount 0: skipped and counted


def write_events(path: str, n: int) -> None:
    rng = random.Random(3)
    with open(path, "w") as f:
        for i in range(n):
            amount = rng.randint(-20, 100)
            user = f"user{rng.randrange(20):02d}"
            f.write(json.dumps({"id": i, "user": user, "amount": amount}) + "\n")


if __name__ == "__main__" and sys.argv[1:2] == ["write"]:
    write_events(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 200_000)
    sys.exit(0)

events = Stream.from_textfile(INPUT, stop_at_eof=True, name="events")
parsed = events.map(parse, name="parse")
positive = parsed.filter(lambda r: int(str(r["amount"])) > 0, name="positive")
totals = positive.accumulate(add, start={}, returns_state=True, name="totals")
totals.sink_to_textfile(OUTPUT, name="output")
parsed.map(ratio, name="ratio", on_error="skip").partition(100, name="hundreds").sink(
    lambda batch: None, name="discard"
)
