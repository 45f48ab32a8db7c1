"""What the metrics' record counting costs: every core pipeline with counting on and off.

Runs each variant of ``bench_pipelines.py`` with
:data:`rivermark.core.counting.ENABLED` true and false, interleaved round
by round in the same process, and prints the best time of each, their
ratio (counting on / off; 1.00 means free, the budget is 1.05) and the
median of the rounds' own ratios (each round times off and on back to
back, so a slow spell of the machine falls on both).  Times are the
thread's CPU time (``time.thread_time``), so that other processes on a
shared machine do not count.

    .venv/bin/python benchmarks/bench_counting.py            # 200,000 events, best of 15
    .venv/bin/python benchmarks/bench_counting.py -n 50000 --repeat 5
    .venv/bin/python benchmarks/bench_counting.py --path loop  # what a job's source runs

``--path emit`` (the default) drives each graph with ``source.emit(x)``
from a Python loop; ``--path loop`` runs the generated loop a source under
a ``Job`` runs over each chunk of records (``source.record_loop()``, here
over chunks of 1,024 items of a list), with the source counting what it
emits as it does in a job.

Not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipelines import VARIANTS  # noqa: E402
from harness import noop  # noqa: E402

import rivermark  # noqa: E402
from rivermark.core import counting  # noqa: E402
from rivermark.core.node import _bump  # noqa: E402

CHUNK = 1024


def once(build: object, n: int, enabled: bool, path: str) -> float:
    counting.ENABLED = enabled
    _bump()
    source = build(rivermark.Stream, noop)  # type: ignore[operator]
    if path == "loop":
        source.emitted = 0
        run = source.record_loop()
        run(iter([0]))  # generate the loop before timing
        chunks = [list(range(i, min(i + CHUNK, n))) for i in range(0, n, CHUNK)]
        gc.collect()
        t0 = time.thread_time()
        for chunk in chunks:
            run(iter(chunk))
            source.emitted += len(chunk)  # a source counts its chunk once
        took = time.thread_time() - t0
    else:
        emit = source.emit
        emit(0)  # build the push functions and the generated code before timing
        gc.collect()
        t0 = time.thread_time()
        for x in range(n):
            emit(x)
        took = time.thread_time() - t0
    source.destroy()
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200_000, help="events per timing")
    p.add_argument("--repeat", type=int, default=15, help="interleaved rounds (best is kept)")
    p.add_argument(
        "--path",
        choices=("emit", "loop"),
        default="emit",
        help="emit: source.emit(x) per record; loop: a source's generated loop over chunks",
    )
    args = p.parse_args()
    print(
        f"rivermark {rivermark.__version__ if hasattr(rivermark, '__version__') else ''} "
        f"Python {platform.python_version()}; path {args.path}; n={args.n:,}, "
        f"best of {args.repeat} interleaved rounds"
    )
    print(
        "| variant | counting off ns/event | counting on ns/event | on / off "
        "| median of the rounds' on / off |"
    )
    print("|---|---|---|---|---|")
    worst = 0.0
    for v in VARIANTS:
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeat):
            for enabled in (False, True):
                times[enabled].append(once(v.build, args.n, enabled, args.path))
        best = {k: min(t) for k, t in times.items()}
        ratio = best[True] / best[False]
        per_round = statistics.median(on / off for on, off in zip(times[True], times[False]))
        worst = max(worst, ratio)
        print(
            f"| ({v.key}) {v.title} | {best[False] / args.n * 1e9:.0f} | "
            f"{best[True] / args.n * 1e9:.0f} | {ratio:.3f} | {per_round:.3f} |"
        )
    counting.ENABLED = True
    _bump()
    print(f"worst ratio: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
