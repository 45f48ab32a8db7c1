"""Instructions per record of each execution path, against another tree: a figure load cannot move.

Run:  .venv/bin/python benchmarks/bench_instructions.py --baseline /path/to/other/checkout/src

The shapes and paths of ``bench_paths.py`` (``update``: node by node;
``emit``: the generated ``emit``; ``loop``: the generated loop a source
runs over chunks of 1,024 records), counted by valgrind's callgrind
(``valgrind --tool=callgrind``): the instructions the interpreter executes
for ``2n`` records less those for ``n`` records (start-up and graph
building cancel out), divided by ``n``.  The count is the same whatever
else the machine is doing, so two trees compare on a shared, loaded
machine where wall-clock ratios swing by 20 %; it is not a time (cache
misses and branch mispredictions are not in it), so ``bench_paths.py`` on
a quiet machine stays the final word.  Needs ``valgrind`` (Debian's
package); each figure takes two runs of about 15 s.

Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HERE_SRC = HERE.parent / "src"


def child(shape: str, path: str, n: int) -> None:
    """Build ``shape`` and push ``n`` records through it along ``path``."""
    sys.path.insert(0, str(HERE))
    import bench_paths

    if path == "update":
        bench_paths._generated_code_off()
    source = bench_paths._build(shape)
    if path == "loop":
        run = source.record_loop()
        for i in range(0, n, 1024):
            run(iter(range(i, min(i + 1024, n))))
        return
    emit = source.emit
    for x in range(n):
        emit(x)


def instructions(src: str, shape: str, path: str, n: int) -> int:
    """Instructions callgrind counts for one child run of ``n`` records."""
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        shape,
        "--path",
        path,
        "--n",
        str(n),
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:  # pragma: no cover - valgrind said something else
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out}")
    return int(found.group(1))


def per_record(src: str, shape: str, path: str, n: int) -> float:
    return (instructions(src, shape, path, 2 * n) - instructions(src, shape, path, n)) / n


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from bench_paths import SHAPES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="the src directory of the tree to compare with")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--paths", default="update,emit,loop")
    p.add_argument("--shapes", default="a,b,c,d,e,f," + ",".join(SHAPES))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--path", default="loop", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.path, args.n)
        return 0
    if not args.baseline:
        p.error("--baseline SRC is required (the src directory of another checkout)")
    if shutil.which("valgrind") is None:
        p.error("valgrind is not installed (apt-get install valgrind)")
    print(f"instructions per record (callgrind), {args.n:,} records; load {os.getloadavg()}")
    print()
    print("| shape | path | baseline | this tree | ratio |")
    print("|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        for path in args.paths.split(","):
            old = per_record(args.baseline, shape, path, args.n)
            new = per_record(str(HERE_SRC), shape, path, args.n)
            print(f"| {shape} | {path} | {old:.0f} | {new:.0f} | {new / old:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
