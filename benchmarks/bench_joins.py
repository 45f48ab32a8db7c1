"""Joins by event time: the as-of join under a Job, and the DataFrame as-of join.

Run:  .venv/bin/python benchmarks/bench_joins.py [--n 1000000] [--keys 100000]
      [--versions 10] [--repeat 1] [--batch 10000] [--cpu]

**Records.** A table of ``keys`` keys with ``versions`` versions each, at
times spread evenly over the run, and ``n`` left records at increasing
times with random keys; the changes and the left records are merged in
time order into one input (``from_iterable``, the source drives the graph).
rivermark: two ``filter`` nodes split it; the changes go through
``timestamps`` into ``to_table``, the left records through ``timestamps``
into ``join_asof(table, how="left")`` and a sink, run by a checkpointed
``Job`` (a checkpoint every second, in a temporary directory), timed from
``job.run()`` to its end.  The plain loop reads the same input: a change is
appended to its key's sorted list of ``(time, value)``, a left record finds
its version with ``bisect`` (no watermark, no late records, no checkpoints).
Both give the same joins (checked).

**DataFrames.** The same table as DataFrame batches of ``batch`` rows (all
of it first), then the left records as batches; rivermark:
``left.merge_asof(right, by="k")`` on ``timestamps("ts")`` DataFrames, fed
with ``emit``; pandas: ``pandas.merge_asof`` of each left batch (sorted by
time) against the table's rows sorted by time once, the batches one after
another.  Both give the same rows (checked).

The same join of two Kafka topics, against Quix Streams' ``join_asof``:
``bench_joins_kafka.py``.

Each figure is the best of ``repeat`` runs; the ratios are baseline seconds
/ rivermark seconds (1.0: as fast as the baseline).  ``--cpu`` times the
process's CPU time (every thread: the checkpoints' too) instead of the wall
clock (for a busy machine).  Not a test: it prints a
table and exits 0 (1 if a run joins differently).
"""

from __future__ import annotations

import argparse
import bisect
import gc
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

Rec = tuple[str, float, int, Any]

#: the clock the runs are timed by (``--cpu``: the process's CPU time)
clock: Callable[[], float] = time.perf_counter


def load() -> str:
    """The load average (1, 5, 15 minutes): the machine is shared."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def inputs(n: int, keys: int, versions: int) -> list[Rec]:
    """Changes ("T", time, key, value) and left records ("L", time, key, None) in time order."""
    rnd = random.Random(1)
    span = float(n)
    changes = [
        ("T", (j + rnd.random()) * span / versions, k, k * versions + j)
        for k in range(keys)
        for j in range(versions)
    ]
    lefts = [("L", i + 0.5, rnd.randrange(keys), None) for i in range(n)]
    return sorted(changes + lefts, key=lambda r: r[1])  # type: ignore[arg-type, return-value]


def run_plain(data: list[Rec]) -> tuple[float, list[Any]]:
    t0 = clock()
    table: dict[int, tuple[list[float], list[Any]]] = {}
    out: list[Any] = []
    append = out.append
    right = bisect.bisect_right
    for r in data:
        if r[0] == "T":
            found = table.get(r[2])
            if found is None:
                table[r[2]] = ([r[1]], [r[3]])
            else:
                found[0].append(r[1])
                found[1].append(r[3])
        else:
            found = table.get(r[2])
            i = right(found[0], r[1]) if found else 0
            append((r, found[1][i - 1] if i else None))
    return clock() - t0, out


def _time(r: Rec) -> float:
    return r[1]


def _key(r: Rec) -> int:
    return r[2]


def _value(r: Rec) -> Any:
    return r[3]


def run_rivermark(data: list[Rec]) -> tuple[float, list[Any]]:
    from rivermark import Job, Stream

    out: list[Any] = []
    source = Stream.from_iterable(data, name="input")
    table = (
        source.filter(lambda r: r[0] == "T", name="changes")
        .timestamps(_time, name="table_times")
        .to_table(key=_key, value=_value, name="table")
    )
    (
        source.filter(lambda r: r[0] == "L", name="lefts")
        .timestamps(_time, name="left_times")
        .join_asof(table, key=_key, how="left", name="join")
        .sink(out.append, name="out")
    )
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every="1s")
        t0 = clock()
        job.run()
        took = clock() - t0
    return took, out


def frames(data: list[Rec], batch: int) -> tuple[list[Any], list[Any]]:
    import pandas as pd

    def cut(rows: list[Rec]) -> list[Any]:
        out = []
        for i in range(0, len(rows), batch):
            part = rows[i : i + batch]
            out.append(
                pd.DataFrame(
                    {
                        "ts": [r[1] for r in part],
                        "k": [r[2] for r in part],
                        "v": [r[3] if r[3] is not None else i for r in part],
                    }
                )
            )
        return out

    return cut([r for r in data if r[0] == "T"]), cut([r for r in data if r[0] == "L"])


def run_pandas(rights: list[Any], lefts: list[Any]) -> tuple[float, list[Any]]:
    import pandas as pd

    t0 = clock()
    table = pd.concat(rights).sort_values("ts", kind="mergesort")
    out = [
        pd.merge_asof(b.sort_values("ts", kind="mergesort"), table, on="ts", by="k") for b in lefts
    ]
    return clock() - t0, out


def run_frames(rights: list[Any], lefts: list[Any]) -> tuple[float, list[Any]]:
    from rivermark import Stream
    from rivermark.dataframe import DataFrame

    rs, ls = Stream(), Stream()
    right = DataFrame(rs, example=rights[0].iloc[:0]).timestamps("ts")
    left = DataFrame(ls, example=lefts[0].iloc[:0]).timestamps("ts")
    out = left.merge_asof(right, by="k").stream.sink_to_list()
    t0 = clock()
    for b in rights:
        rs.emit(b)
    for b in lefts:
        ls.emit(b)
    right.end_of_input()
    left.end_of_input()
    return clock() - t0, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--versions", type=int, default=10)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--cpu", action="store_true", help="time CPU seconds, not wall seconds")
    args = p.parse_args()
    if args.cpu:
        global clock
        clock = time.process_time
    start = load()
    data = inputs(args.n, args.keys, args.versions)
    best: dict[str, float] = {}
    outs: dict[str, Any] = {}
    for _ in range(args.repeat):
        for name, run in (("plain", run_plain), ("rivermark", run_rivermark)):
            gc.collect()
            t, outs[name] = run(data)
            best[name] = min(best.get(name, t), t)
    got = sorted((r[1], v) for r, v in outs["rivermark"])
    if got != sorted((r[1], v) for r, v in outs["plain"]):
        print("rivermark joined other versions than the plain loop", file=sys.stderr)
        return 1
    rights, lefts = frames(data, args.batch)
    del data
    outs = {}
    for _ in range(args.repeat):
        for name, frun in (("pandas", run_pandas), ("frames", run_frames)):
            gc.collect()
            t, outs_f = frun(rights, lefts)
            best[name] = min(best.get(name, t), t)
            outs[name] = outs_f
    import pandas as pd

    a = pd.concat(outs["pandas"]).sort_values(["ts", "k"]).reset_index(drop=True)
    b = pd.concat(outs["frames"]).sort_values(["ts", "k"]).reset_index(drop=True)
    if not a[["ts", "k", "v_y"]].fillna(-1).equals(b[["ts", "k", "v_y"]].fillna(-1)):
        print("merge_asof joined other rows than pandas", file=sys.stderr)
        return 1
    n = args.n
    print(
        f"{n:,} left records, {args.keys:,} keys x {args.versions} versions; best of "
        f"{args.repeat}; {'CPU' if args.cpu else 'wall'} seconds; load {start} at the start, "
        f"{load()} at the end"
    )
    print()
    print("| run | seconds | left records/s | baseline / this |")
    print("|---|---|---|---|")
    rows = [
        ("plain dict of sorted lists + bisect", "plain", "plain"),
        ('rivermark Job(every="1s"), to_table + join_asof', "rivermark", "plain"),
        (f"pandas.merge_asof per batch of {args.batch:,}", "pandas", "pandas"),
        ("rivermark DataFrame merge_asof", "frames", "pandas"),
    ]
    for title, name, base in rows:
        s = best[name]
        print(f"| {title} | {s:.2f} | {n / s:,.0f} | {best[base] / s:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
