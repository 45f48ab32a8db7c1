"""Per-record cost of the operators that keep keyed state, against another rivermark tree.

Run:  .venv/bin/python benchmarks/bench_keyed_ops.py --baseline /path/to/other/checkout/src

``unique``, ``frequencies`` and ``partition(key=...)`` keep their mappings in
a ``rivermark.KeyedState`` (a Python-level ``__setitem__`` that records the
key).  This times each of them, and ``partition(n)`` without a key (the
fast path's inlined kernel, unchanged), on this tree and on the
``--baseline`` tree (e.g. a checkout from before the change): each
measurement is a fresh interpreter that emits ``--n`` records into a freshly
built graph and reports its fastest tenth (per record), the two trees
interleaved ``--repeat`` times; best of all for each tree.
The ratio is this tree's ns per record over the baseline's (1.00: the same).

Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import in_child  # noqa: E402

logger = logging.getLogger(__name__)

HERE_SRC = Path(__file__).resolve().parent.parent / "src"


def noop(x: Any) -> None:
    """The benchmark sink."""


def square_key(x: int) -> int:
    return x * x % 1_000_003


def key100(x: int) -> int:
    return x % 100


def build(source: Any, shape: str) -> None:
    if shape == "unique":  # about half the records repeat a key
        source.map(square_key).unique().sink(noop)
    elif shape == "frequencies":  # 100 keys: each record emits a copy of the counts
        source.map(key100).frequencies().sink(noop)
    elif shape == "partition-key":
        source.partition(10, key=key100).sink(noop)
    elif shape == "partition":
        source.partition(100).sink(noop)
    else:
        raise SystemExit(f"unknown shape {shape!r}")


SHAPES = ["unique", "frequencies", "partition-key", "partition"]


def child(shape: str, n: int, chunks: int = 10) -> float:
    """Seconds per record to emit ``range(n)`` into the shape's graph (in this interpreter).

    The fastest of ``chunks`` consecutive slices: on a shared machine a slice
    that another process preempted is discarded.
    """
    from rivermark import Stream

    source = Stream()
    build(source, shape)
    emit = source.emit
    size = n // chunks
    best = float("inf")
    for c in range(chunks):
        t0 = time.perf_counter()
        for x in range(c * size, (c + 1) * size):
            emit(x)
        best = min(best, (time.perf_counter() - t0) / size)
    return best


def measure(src: str, shape: str, n: int) -> float:
    return float(in_child(__file__, src, [shape, "--n", str(n)])["seconds"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="the src directory of the tree to compare with")
    p.add_argument("--n", type=int, default=300_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps({"seconds": child(args.child, args.n)}))
        return 0
    if not args.baseline:
        p.error("--baseline SRC is required (the src directory of another checkout)")
    print(f"{args.n:,} records per run, best of {args.repeat}, interleaved; load {os.getloadavg()}")
    print()
    print("| operator | baseline ns/record | this tree ns/record | ratio |")
    print("|---|---|---|---|")
    for shape in SHAPES:
        old, new = [], []
        for _ in range(args.repeat):
            old.append(measure(args.baseline, shape, args.n))
            new.append(measure(str(HERE_SRC), shape, args.n))
        o, w = min(old) * 1e9, min(new) * 1e9
        print(f"| {shape} | {o:.0f} | {w:.0f} | {w / o:.2f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
