"""A running groupby-sum with many keys, against another rivermark tree: per batch and per checkpoint.

Run:  .venv/bin/python benchmarks/bench_keyed_groupby.py --baseline /path/to/other/checkout/src

``sdf.groupby("k").v.sum()`` over ``--keys`` keys: a first batch holds every
key, then ``--batches`` batches of ``--rows`` rows over random keys.  Two
measurements, each in a fresh interpreter, the two trees interleaved
``--repeat`` times; best of all for each tree:

* *per batch*: the batches emitted into the graph without a job (fastest
  tenth), i.e. what a running groupby costs per batch when nothing asks
  for its state;
* *job*: the same input under a ``Job`` checkpointing every ``--every``
  batches into a local directory (``keep`` large enough to keep them all):
  the run's wall time, the bytes of the aggregation's state files per
  checkpoint (mean over the checkpoints after the first batch), and the
  pause of the sources at a checkpoint (median, over the same checkpoints;
  ``CheckpointInfo.pause``).

The ratio is this tree's figure over the baseline's (1.00: the same).
Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import in_child  # noqa: E402

logger = logging.getLogger(__name__)

HERE_SRC = Path(__file__).resolve().parent.parent / "src"


def make_batches(keys: int, batches: int, rows: int) -> list[Any]:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    out = [pd.DataFrame({"k": np.arange(keys), "v": rng.integers(0, 100, keys)})]
    for _ in range(batches):
        out.append(
            pd.DataFrame({"k": rng.integers(0, keys, rows), "v": rng.integers(0, 100, rows)})
        )
    return out


def build(source: Any, example: Any) -> Any:
    from rivermark.dataframe import DataFrame

    return DataFrame(source, example=example).groupby("k").v.sum().stream.sink(len)


def per_batch(data: list[Any], chunks: int = 10) -> float:
    """Seconds per batch (the fastest of ``chunks`` slices of the batches after the first)."""
    from rivermark import Stream

    source = Stream()
    build(source, data[0].iloc[:0])
    source.emit(data[0])
    rest = data[1:]
    size = len(rest) // chunks
    best = float("inf")
    for c in range(chunks):
        t0 = time.perf_counter()
        for b in rest[c * size : (c + 1) * size]:
            source.emit(b)
        best = min(best, (time.perf_counter() - t0) / size)
    return best


def job(data: list[Any], every: int) -> dict[str, float]:
    """Wall seconds of a checkpointed run, the state bytes and pause per checkpoint."""
    from rivermark import Stream
    from rivermark.checkpoint import Job, LocalDirectoryStore

    with tempfile.TemporaryDirectory() as d:
        source = Stream.from_iterable(data)  # type: ignore[attr-defined]
        build(source, data[0].iloc[:0])
        t0 = time.perf_counter()
        run = Job(source, checkpoint=Path(d) / "c", every_batches=every, keep=10_000)
        run.run()
        wall = time.perf_counter() - t0
        pauses = sorted(c.pause for c in list(run.checkpoints)[2:])
        store = LocalDirectoryStore(Path(d) / "c")
        sizes = []
        for e in store.list_epochs()[2:]:  # after the start checkpoint and the first batch
            state = store.read_manifest(e).state
            sizes.append(sum(v["size"] for k, v in state.items() if k.startswith("aggregate")))
    pause = pauses[len(pauses) // 2] if pauses else 0.0
    return {"wall": wall, "bytes": sum(sizes) / max(len(sizes), 1), "pause": pause}


def measure(src: str, what: str, args: argparse.Namespace) -> dict[str, float]:
    sizes = ["--keys", str(args.keys), "--batches", str(args.batches), "--rows", str(args.rows)]
    return in_child(__file__, src, [what, *sizes, "--every", str(args.every)])


def child(args: argparse.Namespace) -> dict[str, float]:
    data = make_batches(args.keys, args.batches, args.rows)
    if args.child == "batch":
        return {"seconds": per_batch(data)}
    return job(data, args.every)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="the src directory of the tree to compare with")
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--rows", type=int, default=2_000)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    if not args.baseline:
        p.error("--baseline SRC is required (the src directory of another checkout)")
    print(
        f"{args.keys:,} keys, {args.batches} batches of {args.rows:,} rows, a checkpoint "
        f"every {args.every} batches; best of {args.repeat}, interleaved; "
        f"load {os.getloadavg()}\n"
    )
    rows = [
        ("per batch (ms)", "batch", "seconds", 1e3, ".3f"),
        ("job wall (s)", "job", "wall", 1.0, ".2f"),
    ]
    rows.append(("state bytes per checkpoint", "job", "bytes", 1.0, ",.0f"))
    rows.append(("pause per checkpoint (ms)", "job", "pause", 1e3, ".1f"))
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for what in ("batch", "job"):
            for tree, src in (("old", args.baseline), ("new", str(HERE_SRC))):
                results.setdefault((tree, what), []).append(measure(src, what, args))
    print("| measure | baseline | this tree | ratio |")
    print("|---|---|---|---|")
    for label, what, key, scale, fmt in rows:
        o = min(r[key] for r in results[("old", what)]) * scale
        w = min(r[key] for r in results[("new", what)]) * scale
        print(f"| {label} | {o:{fmt}} | {w:{fmt}} | {w / o:.3f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
