"""Keyed tumbling-window count by event time under a Job, against a plain dict loop.

Run:  .venv/bin/python benchmarks/bench_eventtime.py [--n 1000000] [--keys 1000] [--repeat 3]

The input is ``n`` records ``(time, key)``: times increase by 1 ms with up
to 2 s of disorder, ``keys`` keys.  rivermark: ``from_iterable`` (the
source drives the graph) -> ``timestamps(max_delay="2s")`` ->
``tumbling_window(10, key=..., agg="count")`` -> ``sink``, run by a
checkpointed ``Job`` (a checkpoint every second, in a temporary directory),
timed from ``job.run()`` to its end (the final checkpoint included).  The
plain loop does the same bucketing in a dict (``(key, window start) ->
count``) and hands out every window at the end, with no watermark, no late
records and no checkpoints.  Both count the same windows (checked).  Each
is the best of ``repeat`` runs.  The ratio is plain seconds / rivermark
seconds (>= 0.5: rivermark takes at most twice the plain loop's time).

Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

SIZE = 10.0


def records(n: int, keys: int) -> list[tuple[float, int]]:
    rnd = random.Random(1)
    return [(i / 1000 + rnd.random() * 2.0, rnd.randrange(keys)) for i in range(n)]


def event_time(r: tuple[float, int]) -> float:
    return r[0]


def key(r: tuple[float, int]) -> int:
    return r[1]


def run_rivermark(data: list[tuple[float, int]]) -> tuple[float, dict[tuple[Any, float], int]]:
    from rivermark import Job, Stream

    out: dict[tuple[Any, float], int] = {}

    def keep(w: Any) -> None:
        out[(w.key, w.start)] = w.value

    source = Stream.from_iterable(data, name="records")
    (
        source.timestamps(event_time, max_delay="2s", name="times")
        .tumbling_window(SIZE, key=key, agg="count", name="counts")
        .sink(keep)
    )
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every="1s")
        t0 = time.perf_counter()
        job.run()
        took = time.perf_counter() - t0
    return took, out


def run_plain(data: list[tuple[float, int]]) -> tuple[float, dict[tuple[Any, float], int]]:
    t0 = time.perf_counter()
    counts: dict[tuple[Any, float], int] = {}
    get = counts.get
    for ts, k in data:
        w = (k, ts - ts % SIZE)
        counts[w] = get(w, 0) + 1
    out = dict(counts)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    data = records(args.n, args.keys)
    plain, river = [], []
    expected: dict[tuple[Any, float], int] = {}
    got: dict[tuple[Any, float], int] = {}
    for _ in range(args.repeat):
        t, expected = run_plain(data)
        plain.append(t)
        t, got = run_rivermark(data)
        river.append(t)
    if got != expected:
        print("the two counts differ: the benchmark is wrong", file=sys.stderr)
        return 1
    best_plain, best_river = min(plain), min(river)
    print(f"{args.n:,} records, {args.keys:,} keys, {len(expected):,} windows; best of "
          f"{args.repeat}; load {os.getloadavg()}")  # fmt: skip
    print()
    print("| run | seconds | records/s | plain / this |")
    print("|---|---|---|---|")
    print(f"| plain dict loop | {best_plain:.3f} | {args.n / best_plain:,.0f} | 1.00 |")
    print(
        f"| rivermark Job, tumbling_window count | {best_river:.3f} | "
        f"{args.n / best_river:,.0f} | {best_plain / best_river:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
