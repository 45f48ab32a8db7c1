"""Per-record cost of each execution path of the common operators, against another tree.

Run:  .venv/bin/python benchmarks/bench_paths.py --baseline /path/to/other/checkout/src

Three paths per graph shape: ``update`` (node by node: the generated code
turned off, ``graphcode.ENABLED = False``, so every record goes through each
node's ``update``), ``emit`` (the generated ``emit`` of a synchronous
graph) and ``loop`` (the generated loop a source runs over a chunk of
1,024 records).  The shapes are the six of ``bench_pipelines.py`` and one
graph per remaining written-out operator (starmap, remove, pluck of one
key and of a list, accumulate with ``returns_state``/``with_state``,
union, sink_to_list).  Each measurement is a fresh interpreter with
``PYTHONPATH`` set to the tree measured; it reports its fastest of ten
slices (ns per record); the two trees are interleaved ``--repeat`` times
and the best of each is kept.  The ratio is this tree over the baseline
(1.00: the same).

Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import in_child  # noqa: E402

HERE = Path(__file__).resolve().parent
HERE_SRC = HERE.parent / "src"


def noop(x: Any) -> None:
    """The benchmark sink."""


def inc(x: int) -> int:
    return x + 1


def even(x: int) -> bool:
    return x % 2 == 0


def add_pair(a: int, b: int) -> int:
    return a + b


def count(state: int, x: int) -> tuple[int, int]:
    return state + 1, x


def pair(x: int) -> tuple[int, int]:
    return (x, x)


SHAPES: dict[str, Any] = {
    "starmap": lambda s: s.map(pair).starmap(add_pair).sink(noop),
    "remove": lambda s: s.remove(even).sink(noop),
    "pluck": lambda s: s.map(pair).pluck(0).sink(noop),
    "pluck[list]": lambda s: s.map(pair).pluck([1, 0]).sink(noop),
    "accumulate(state)": lambda s: s.accumulate(
        count, start=0, returns_state=True, with_state=True
    ).sink(noop),
    "union": lambda s: s.map(inc).union(s.map(inc)).sink(noop),
    "sink_to_list": lambda s: s.map(inc).sink_to_list(),
}


def _build(shape: str) -> Any:
    from rivermark import Stream

    if shape in SHAPES:
        source = Stream()
        SHAPES[shape](source)
        return source
    sys.path.insert(0, str(HERE))
    import bench_pipelines

    return getattr(bench_pipelines, f"build_{shape}")(Stream, noop)


def _generated_code_off() -> None:
    """Leave every graph on its node-by-node path (this tree, or an older one measured against)."""
    try:
        from rivermark.execution import graphcode
    except ImportError:  # a tree from before the execution package
        from rivermark.fastpath import codegen as graphcode  # type: ignore[no-redef]
    graphcode.ENABLED = False


def child(shape: str, path: str, n: int, slices: int = 10) -> float:
    """Seconds per record over the fastest of ``slices`` slices of ``n // slices`` records."""
    if path == "update":
        _generated_code_off()
    source = _build(shape)
    size = n // slices
    best = float("inf")
    if path == "loop":
        run = source.record_loop()
        for _ in range(slices):
            chunks = [list(range(i, min(i + 1024, size))) for i in range(0, size, 1024)]
            t0 = time.perf_counter()
            for chunk in chunks:
                run(iter(chunk))
            best = min(best, (time.perf_counter() - t0) / size)
        return best
    emit = source.emit
    for c in range(slices):
        t0 = time.perf_counter()
        for x in range(c * size, (c + 1) * size):
            emit(x)
        best = min(best, (time.perf_counter() - t0) / size)
    return best


def measure(src: str, shape: str, path: str, n: int) -> float:
    return float(in_child(__file__, src, [shape, "--path", path, "--n", str(n)])["seconds"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="the src directory of the tree to compare with")
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--paths", default="update,emit,loop")
    p.add_argument("--shapes", default="a,b,c,d,e,f," + ",".join(SHAPES))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--path", default="update", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps({"seconds": child(args.child, args.path, args.n)}))
        return 0
    if not args.baseline:
        p.error("--baseline SRC is required (the src directory of another checkout)")
    print(f"{args.n:,} records per run, best of {args.repeat}, interleaved; load {os.getloadavg()}")
    print()
    print("| shape | path | baseline ns/record | this tree ns/record | ratio |")
    print("|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        for path in args.paths.split(","):
            old, new = [], []
            for _ in range(args.repeat):
                old.append(measure(args.baseline, shape, path, args.n))
                new.append(measure(str(HERE_SRC), shape, path, args.n))
            o, w = min(old) * 1e9, min(new) * 1e9
            print(f"| {shape} | {path} | {o:.0f} | {w:.0f} | {w / o:.2f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
