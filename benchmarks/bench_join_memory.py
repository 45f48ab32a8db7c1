"""Memory of the three joins over a run and one 10 times longer: it must stay flat.

Run:  .venv/bin/python benchmarks/bench_join_memory.py [--n 100000] [--join interval]
      [--every 1s] [--state memory]

One input made as the source reads it (never held in memory): ``n``
records a side, a side one record every millisecond of event time, the two
sides interleaved in time order, under a checkpointed ``Job`` (``--every``;
``none``: only at the end), keyed state in memory or RocksDB (``--state``).

* ``interval``: ``join_interval`` +-5 s over 10,000 random keys (what
  ``bench_interval_join.py`` runs);
* ``window``: ``join_window`` of tumbling 1 s windows over 10,000 keys;
* ``asof``: ``join_asof(how="left")`` against a table whose keys come and
  go: the right side sets key ``i // 2`` and deletes it at the next record,
  the left side asks for one of the last 100 keys.

Each run is made twice, with ``n`` and ``10 * n`` records a side, each in a
fresh process; the table gives the RSS (``/proc/self/statm``) at 30 %, 60 %
and 100 % of the input, Python's allocated blocks (``sys.getallocatedblocks``)
at the end, and the CPU seconds.  Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

PAGE = os.sysconf("SC_PAGE_SIZE")
Rec = tuple[str, float, int, int]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def records(n: int, join: str, samples: list[float]) -> Iterator[Rec]:
    rnd = random.Random(1)
    marks = {3 * n // 10, 6 * n // 10, n}
    for i in range(n):
        t = i * 0.001
        if join == "asof":
            yield ("L", t, max(0, i // 2 - rnd.randrange(100)), 0)
            yield ("R", t + 0.0005, i // 2, i % 2)
        else:
            yield ("L", t, rnd.randrange(10_000), 0)
            yield ("R", t + 0.0005, rnd.randrange(10_000), 0)
        if i + 1 in marks:
            gc.collect()
            samples.append(rss_mb())


def one(n: int, join: str, every: str | None, state: str) -> None:
    """A run in this process; prints one line: RSS samples, blocks, CPU seconds."""
    from rivermark import Job, Stream

    samples: list[float] = []
    source = Stream.from_iterable(records(n, join, samples), name="input")
    left = source.filter(lambda r: r[0] == "L", name="l").timestamps(lambda r: r[1], name="lt")
    right = source.filter(lambda r: r[0] == "R", name="r").timestamps(lambda r: r[1], name="rt")
    out: Any
    if join == "interval":
        out = left.join_interval(right, key=2, lower=-5, upper=5, name="join")
    elif join == "window":
        out = left.join_window(right, key=2, size=1, name="join")
    else:
        table = right.to_table(key=2, value=lambda r: None if r[3] else r[1], name="table")
        out = left.join_asof(table, key=2, how="left", name="join")
    out.sink(lambda _x: None, name="out")
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every=every, state=state)
        c0 = time.process_time()
        job.run()
        cpu = time.process_time() - c0
    print(" ".join(f"{x:.1f}" for x in samples), sys.getallocatedblocks(), f"{cpu:.1f}")


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--n", type=int, default=100_000, help="records a side in the short run")
    p.add_argument("--join", default="interval", choices=["interval", "window", "asof"])
    p.add_argument("--every", default="1s", help='checkpoint interval; "none": at the end')
    p.add_argument("--state", default="memory", choices=["memory", "rocksdb"])
    p.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    every = None if args.every == "none" else args.every
    if args.one:
        one(args.one, args.join, every, args.state)
        return 0
    print(f"join {args.join}, Job(every={every!r}, state={args.state!r}); load {os.getloadavg()}")
    print()
    print("| records a side | RSS MB at 30 % | 60 % | 100 % | blocks at the end | CPU s |")
    print("|---|---|---|---|---|---|")
    for n in (args.n, 10 * args.n):
        cmd = [sys.executable, __file__, "--one", str(n), "--join", args.join]
        cmd += ["--every", args.every, "--state", args.state]
        line = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
        *rss, blocks, cpu = line[-5:]
        print(f"| {n:,} | {' | '.join(rss)} | {int(blocks):,} | {cpu} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
