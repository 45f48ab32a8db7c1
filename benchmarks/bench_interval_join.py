"""Interval join of two streams by event time: throughput, and memory that stays flat.

Run:  .venv/bin/python benchmarks/bench_interval_join.py [--n 1000000] [--keys 10000]
      [--bound 5] [--long] [--no-plain] [--trim]

**Records.** ``n`` records per side, each side one record every millisecond
of event time (the right side half a millisecond after the left), with
random keys out of ``keys``; the two sides interleaved in time order in one
input, made by a generator as the source reads it (the input is never held
in memory, so the process's memory is the join's and the graph's).
rivermark: ``from_iterable`` -> two ``filter`` nodes -> ``timestamps`` on
each side -> ``left.join_interval(right, key, lower=-bound, upper=bound)``
(inner) -> a sink that counts the pairs, under a checkpointed ``Job`` (a
checkpoint every second, in a temporary directory), timed from
``job.run()`` to its end.  With the defaults each record meets about one
record of the other side (10,000 records of a side in a 10 s interval over
10,000 keys).

**Memory.** The resident set size (``/proc/self/statm``) is read as the
source hands out each tenth of the input, and the peak (``ru_maxrss``)
after the run.  The join holds a record only until the other side's
watermark is past its interval, so the figures should stay flat however
long the run: ``--long`` makes it 10 times longer (``n`` x 10 per side) to
show it.  Each tenth also notes Python's live allocations
(``sys.getallocatedblocks()``); ``--trim`` first hands the C allocator's
free memory back to the system (glibc's ``malloc_trim(0)``, through
``ctypes``), so that the RSS read is what is in use, not what the allocator
keeps of earlier buffers.

**Check.** A plain loop over the same input (per key, a deque of each
side's recent times; a record pairs with the other side's records within
the bound and evicts those older than the bound) counts the pairs; the
join must give as many.  ``--no-plain`` leaves it out (a long run).

Records/s counts the records of both sides; CPU seconds are the process's
(every thread), steadier than the wall clock on a shared machine.  Not a
test: it prints a table and exits 0 (1 if the pair counts differ).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import os
import random
import resource
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

Rec = tuple[str, float, int]
STEP = 0.001  # seconds of event time between two records of a side
PAGE = os.sysconf("SC_PAGE_SIZE")


def load() -> str:
    """The load average (1, 5, 15 minutes): the machine is shared."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # KiB on Linux


#: ``--trim``: glibc's ``malloc_trim`` (None: not asked for, or not glibc)
trim: Any = None


def trimmer() -> Any:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    # optional: malloc_trim is glibc's own (musl and macOS have none)
    return getattr(libc, "malloc_trim", None)


Sample = tuple[int, float, int]


def records(n: int, keys: int, samples: list[Sample] | None = None) -> Iterator[Rec]:
    """Left and right records in time order; ``samples`` gets (records so far, RSS, live
    allocated blocks) each tenth."""
    rnd = random.Random(1)
    tenth = max(1, 2 * n // 10)
    for i in range(n):
        t = i * STEP
        yield ("L", t, rnd.randrange(keys))
        yield ("R", t + STEP / 2, rnd.randrange(keys))
        if samples is not None and (2 * i + 2) % tenth == 0:
            if trim is not None:
                trim(0)
            samples.append((2 * i + 2, rss_mb(), sys.getallocatedblocks()))


def run_plain(n: int, keys: int, bound: float) -> tuple[float, float, int]:
    """Seconds, CPU seconds and the number of pairs of the plain loop."""
    t0, c0 = time.perf_counter(), time.process_time()
    sides: dict[str, dict[int, deque[float]]] = {"L": {}, "R": {}}
    pairs = 0
    for side, t, k in records(n, keys):
        other = sides["R" if side == "L" else "L"].get(k)
        if other:
            while other and other[0] < t - bound:
                other.popleft()
            pairs += len(other)  # in time order: every one left is within [t - bound, t]
        mine = sides[side].get(k)
        if mine is None:
            sides[side][k] = deque([t])
        else:
            mine.append(t)
    return time.perf_counter() - t0, time.process_time() - c0, pairs


def _time(r: Rec) -> float:
    return r[1]


def _key(r: Rec) -> int:
    return r[2]


def run_rivermark(
    n: int, keys: int, bound: float, every: str | None, samples: list[Sample]
) -> tuple[float, float, int, int]:
    """Seconds, CPU seconds, pairs, and the most records the join held at a sample."""
    from rivermark import Job, Stream

    count = [0]
    held: list[int] = []

    def counted(_pair: Any) -> None:
        count[0] += 1

    source = Stream.from_iterable(records(n, keys, samples), name="input")
    left = source.filter(lambda r: r[0] == "L", name="lefts").timestamps(_time, name="left_times")
    right = source.filter(lambda r: r[0] == "R", name="rights").timestamps(
        _time, name="right_times"
    )
    join = left.join_interval(right, key=_key, lower=-bound, upper=bound, name="join")
    join.sink(counted, name="out")
    seen = len(samples)

    def watch(_r: Rec) -> bool:
        nonlocal seen
        if len(samples) != seen:  # a tenth of the input went by: note what the join holds
            seen = len(samples)
            held.append(join.waiting)
        return True

    source.filter(watch, name="watch").sink(lambda _r: None, name="drop")
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every=every)
        t0, c0 = time.perf_counter(), time.process_time()
        job.run()
        took = time.perf_counter() - t0, time.process_time() - c0
    return took[0], took[1], count[0], max(held, default=0)


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="records per side")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--bound", type=float, default=5.0, help="seconds either way")
    p.add_argument("--long", action="store_true", help="a run 10 times longer")
    p.add_argument("--every", default="1s", help='checkpoint interval; "none": only at the end')
    p.add_argument("--no-plain", action="store_true", help="leave out the plain loop's check")
    p.add_argument(
        "--trim", action="store_true", help="malloc_trim(0) before each tenth's RSS (glibc)"
    )
    args = p.parse_args()
    if args.trim:
        global trim
        trim = trimmer()
        if trim is None:
            print("--trim: this C library has no malloc_trim (glibc's)", file=sys.stderr)
            return 2
    n = args.n * (10 if args.long else 1)
    start = load()
    gc.collect()
    before = rss_mb()
    samples: list[Sample] = []
    every = None if args.every == "none" else args.every
    secs, cpu, pairs, held = run_rivermark(n, args.keys, args.bound, every, samples)
    peak = peak_mb()
    total = 2 * n
    print(
        f"{n:,} records per side ({total:,} in all), {args.keys:,} keys, "
        f"+-{args.bound:g} s; load {start} at the start, {load()} at the end"
    )
    print()
    print("| run | seconds | CPU seconds | records/s (wall) | records/s (CPU) | pairs |")
    print("|---|---|---|---|---|---|")
    print(
        f"| rivermark Job(every={every!r}), join_interval |"
        f" {secs:.1f} | {cpu:.1f} | "
        f"{total / secs:,.0f} | {total / cpu:,.0f} | {pairs:,} |"
    )
    status = 0
    if not args.no_plain:
        gc.collect()
        psecs, pcpu, ppairs = run_plain(n, args.keys, args.bound)
        print(
            f"| plain loop: per-key deques | {psecs:.1f} | {pcpu:.1f} | "
            f"{total / psecs:,.0f} | {total / pcpu:,.0f} | {ppairs:,} |"
        )
        if ppairs != pairs:
            print(f"the join gave {pairs:,} pairs, the plain loop {ppairs:,}", file=sys.stderr)
            status = 1
    print()
    print(f"RSS before the run {before:.0f} MB; peak (ru_maxrss) {peak:.0f} MB")
    print(f"most records held by the join at a tenth: {held:,}")
    print(f"| input read | RSS MB{' (after malloc_trim)' if trim else ''} | live blocks |")
    print("|---|---|---|")
    for done, mb, blocks in samples:
        print(f"| {done / total:.0%} ({done:,}) | {mb:.1f} | {blocks:,} |")
    return status


if __name__ == "__main__":
    sys.exit(main())
