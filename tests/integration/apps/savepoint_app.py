"""A keyed count that takes a savepoint from another thread while it runs.

``python savepoint_app.py OUT CKPT REPORT``: counts ``(i * 13) % 211`` for
``i`` below 40,000 in a ``KeyedState`` (a key that reaches 9 is deleted),
writes the number of keys after each record to OUT, checkpoints every 2,000
records with ``keep=1`` and a base every 3 checkpoints, and asks for a
savepoint once record 4,000 went through.  REPORT gets the epoch the run
restored from and the savepoint's epoch as JSON.
"""

from __future__ import annotations

import json
import sys
import threading

from keyedcount import count

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job

N = 40_000


def main(out: str, ckpt: str, report: str) -> None:
    reached = threading.Event()

    def seen(i: int) -> int:
        if i >= 4000:
            reached.set()
        return (i * 13) % 211

    source = Stream.from_iterable(list(range(N)), name="numbers")
    acc = source.map(seen).accumulate(count, start=KeyedState(), name="counts")
    acc.map(len).sink_to_textfile(out)
    job = Job(source, checkpoint=ckpt, every=None, every_batches=2000, keep=1, compact_every=3)
    answer: dict[str, int | None] = {}

    def ask() -> None:
        reached.wait()
        answer["savepoint"] = job.savepoint()

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    job.run()
    asker.join(60)
    with open(report, "w") as f:
        json.dump({"restored": job.restored_epoch, **answer}, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
