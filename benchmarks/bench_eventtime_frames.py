"""Event-time windows over streaming DataFrame batches against a per-batch pandas loop.

Run:  .venv/bin/python benchmarks/bench_eventtime_frames.py [--rows 1000000] [--batch 10000]
          [--keys 1000] [--repeat 3] [--window tumbling|hopping|session]

The input is ``rows`` rows ``(ts, key)`` in batches of ``batch`` rows, built
before timing: times increase by 1 ms with up to 2 s of disorder, ``keys``
keys.  rivermark: ``sdf.timestamps("ts", max_delay="2s")`` then
``tumbling_window(10)`` (``hopping_window(10, 5)``; ``session_window(1)``)
``.groupby("key").ts.count()``, each batch given by ``source.emit(batch)``,
timed up to ``end_of_input`` (every window emitted).  The plain loop, per
batch: floor the times to their windows (every window of a row for hopping),
``groupby([key, start]).size()`` and add into a running Series; it has no
watermark and no late rows (none are late with this input) and hands out
every window at the end.  Sessions have no plain loop (a session joins
across batches): their figure is rows/s alone.  Every rivermark run counts
the windows the plain loop counts (checked).  Each figure is the best of
``repeat`` runs, interleaved; the ratio is plain seconds / rivermark seconds.
``--cpu`` times the process's CPU time instead of the wall clock (for a busy
machine).

Not a test: it prints a table and exits 0 (1 if the counts differ).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

#: the clock the runs are timed by (``--cpu``: the process's CPU time)
clock: Callable[[], float] = time.perf_counter
SIZE = 10.0
STEP = 5.0
GAP = 1.0


def batches(rows: int, batch: int, keys: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(0)
    ts = np.arange(rows) * 0.001 + rng.uniform(0.0, 2.0, rows)
    key = rng.integers(0, keys, rows)
    return [
        pd.DataFrame({"ts": ts[i : i + batch], "key": key[i : i + batch]})
        for i in range(0, rows, batch)
    ]


def run_rivermark(data: list[pd.DataFrame], window: str) -> tuple[float, pd.Series]:
    from rivermark import Stream
    from rivermark.dataframe import DataFrame

    source = Stream()
    timed = DataFrame(source, example=data[0].iloc[:0]).timestamps("ts", max_delay="2s")
    if window == "tumbling":
        win = timed.tumbling_window(SIZE)
    elif window == "hopping":
        win = timed.hopping_window(SIZE, STEP)
    else:
        win = timed.session_window(GAP)
    out: list[pd.DataFrame] = []
    win.groupby("key").ts.count().stream.sink(out.append)
    emit = source.emit
    t0 = clock()
    for b in data:
        emit(b)
    timed.stream.end_of_input()
    took = clock() - t0
    frame = pd.concat(out)
    counts = frame.set_index(["key", "start"])["ts"].sort_index()
    return took, counts.astype("int64")


def run_plain(data: list[pd.DataFrame], window: str) -> tuple[float, pd.Series]:
    t0 = clock()
    total: pd.Series | None = None
    for b in data:
        ts = b["ts"].to_numpy()
        if window == "tumbling":
            frame = pd.DataFrame({"key": b["key"].to_numpy(), "start": np.floor(ts / SIZE) * SIZE})
        else:
            last = np.floor(ts / STEP)
            per = int(SIZE // STEP)
            frame = pd.DataFrame(
                {
                    "key": np.repeat(b["key"].to_numpy(), per),
                    "start": (np.repeat(last, per) - np.tile(np.arange(per), len(ts))) * STEP,
                }
            )
        sizes = frame.groupby(["key", "start"]).size()
        total = sizes if total is None else total.add(sizes, fill_value=0)
    took = clock() - t0
    assert total is not None
    return took, total.astype("int64").sort_index()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--window", default="tumbling", choices=["tumbling", "hopping", "session"])
    p.add_argument("--cpu", action="store_true", help="time CPU seconds, not wall seconds")
    args = p.parse_args(argv)
    if args.cpu:
        global clock
        clock = time.process_time
    data = batches(args.rows, args.batch, args.keys)
    best: dict[str, float] = {}
    ok = True
    for _ in range(args.repeat):
        runs: dict[str, Any] = {"rivermark": run_rivermark}
        if args.window != "session":
            runs["plain"] = run_plain
        results = {}
        for name, run in runs.items():
            gc.collect()
            took, counts = run(data, args.window)
            best[name] = min(best.get(name, float("inf")), took)
            results[name] = counts
        if "plain" in results:
            a, b = results["rivermark"], results["plain"]
            if not (a.index.equals(b.index) and (a.to_numpy() == b.to_numpy()).all()):
                print("rivermark's windows differ from the plain loop's", file=sys.stderr)
                ok = False
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{args.window}: {args.rows:,} rows, batches of {args.batch:,}, load {load}")
    for name, took in best.items():
        ratio = f"{best['plain'] / took:.2f}" if "plain" in best else "-"
        print(f"  {name:10s} {took:7.3f} s  {args.rows / took:12,.0f} rows/s  ratio {ratio}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
