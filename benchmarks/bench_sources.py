"""The source-driven path: the six core shapes fed by a source under a Job.

Run:  .venv/bin/python benchmarks/bench_sources.py            # n=1,000,000, median of 3
      .venv/bin/python benchmarks/bench_sources.py --quick    # smoke run (about 20 s)
      .venv/bin/python benchmarks/bench_sources.py --cpu      # CPU time: steadier when loaded

Part 1: each shape of ``bench_pipelines.py`` (the same builders) fed by
``Stream.from_iterable(range(n))`` and run to the end by
``Job(source, checkpoint=tmp, every="1s")``, against the shape's plain loop,
interleaved in the same run.  The time of a job runs from ``job.run()`` to its
return, so it includes the checkpoint written at start, the interval
checkpoints and the final one.

Part 2: ``Stream.from_textfile(path, stop_at_eof=True).map(json.loads)
.accumulate(add_amount, start=0).sink(noop)`` over a file of ``n`` JSON lines,
under the same Job, against ``for line in f: acc = add_amount(acc,
json.loads(line)); noop(acc)``.

Memory: peak bytes traced by ``tracemalloc`` while a job runs shape (a) over
n/10 and n items (smaller n than the timing: tracing is slow); equal figures
mean memory is flat in n.

Not a test: it prints figures and exits 0 (1 if an output check failed).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipelines import VARIANTS  # noqa: E402
from harness import Variant, noop  # noqa: E402

logger = logging.getLogger(__name__)


#: the clock: wall time, or the process's CPU time with ``--cpu`` (steadier on a loaded machine)
CLOCK: Callable[[], float] = time.perf_counter


def _job_seconds(source: Any, tmp: str) -> tuple[float, int]:
    from rivermark import Job

    job = Job(source, checkpoint=tmp, every="1s")
    gc.collect()
    t0 = CLOCK()
    job.run()
    return CLOCK() - t0, job.epoch


def time_source_shape(variant: Variant, n: int, sink: Callable[[Any], Any] = noop) -> float:
    """Seconds for a Job to run ``variant`` fed by ``from_iterable(range(n))``."""
    from rivermark import Stream

    source = variant.build(lambda: Stream.from_iterable(range(n)), sink)
    with tempfile.TemporaryDirectory() as tmp:
        took, _ = _job_seconds(source, tmp)
    source.destroy()
    return took


def time_plain(variant: Variant, n: int) -> float:
    gc.collect()
    t0 = CLOCK()
    variant.plain(n, noop)
    return CLOCK() - t0


def check_shape(variant: Variant, n: int = 1000) -> str:
    from rivermark import Stream

    expected: list[Any] = []
    variant.plain(n, expected.append)
    got: list[Any] = []
    source = variant.build(lambda: Stream.from_iterable(range(n)), got.append)
    with tempfile.TemporaryDirectory() as tmp:
        _job_seconds(source, tmp)
    return "ok" if got == expected else f"differs (first: {got[:3]!r} vs {expected[:3]!r})"


def add_amount(acc: int, rec: dict[str, Any]) -> int:
    return acc + rec["amount"]


def write_json_lines(path: str, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "name": f"key-{i % 50:03d}", "amount": i % 97}) + "\n")


def time_textfile(path: str, out: list[Any] | None = None) -> float:
    from rivermark import Stream

    source = Stream.from_textfile(path, stop_at_eof=True)
    sink = out.append if out is not None else noop
    source.map(json.loads).accumulate(add_amount, start=0).sink(sink)
    with tempfile.TemporaryDirectory() as tmp:
        took, _ = _job_seconds(source, tmp)
    source.destroy()
    return took


def plain_textfile(path: str, out: list[Any] | None = None) -> float:
    sink = out.append if out is not None else noop
    gc.collect()
    t0 = CLOCK()
    acc = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            acc = add_amount(acc, json.loads(line))
            sink(acc)
    return CLOCK() - t0


def peak_job_memory(n: int) -> int:
    from rivermark import Stream

    variant = VARIANTS[0]
    source = variant.build(lambda: Stream.from_iterable(range(n)), noop)
    with tempfile.TemporaryDirectory() as tmp:
        from rivermark import Job

        job = Job(source, checkpoint=tmp, every="1s")
        gc.collect()
        tracemalloc.start()
        try:
            base, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            job.run()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    source.destroy()
    return peak - base


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100,000 items, one round")
    p.add_argument("-n", type=int, default=None, help="items per shape (default 1,000,000)")
    p.add_argument("--lines", type=int, default=None, help="lines of the file (default 1,000,000)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the median is reported")
    p.add_argument("--only", default="", help="comma-separated shape keys, e.g. a,d")
    p.add_argument("--no-textfile", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--cpu", action="store_true", help="time CPU seconds of the process, not wall")
    args = p.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter
    n = args.n or (100_000 if args.quick else 1_000_000)
    lines = args.lines or (100_000 if args.quick else 1_000_000)
    repeat = 1 if args.quick else args.repeat
    logging.basicConfig(level=logging.WARNING)
    import rivermark

    keys = {k for k in args.only.split(",") if k}
    variants = [v for v in VARIANTS if not keys or v.key in keys]
    print(
        f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus; n={n:,}, median of {repeat}; "
        f"{'CPU' if args.cpu else 'wall'} time; "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    failed = False
    print()
    print("| shape | Job ev/s | plain ev/s | vs plain (median) | range | check |")
    print("|---|---|---|---|---|---|")
    for v in variants:
        ours: list[float] = []
        plain: list[float] = []
        for _ in range(repeat):
            ours.append(time_source_shape(v, n))
            plain.append(time_plain(v, n))
        ratios = sorted(p_ / o for o, p_ in zip(ours, plain))
        chk = check_shape(v)
        failed |= chk != "ok"
        print(
            f"| ({v.key}) {v.title} | {n / statistics.median(ours):,.0f} | "
            f"{n / statistics.median(plain):,.0f} | {statistics.median(ratios):.3f} | "
            f"{ratios[0]:.2f}-{ratios[-1]:.2f} | {chk} |"
        )
    if not args.no_textfile:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "in.jsonl")
            write_json_lines(path, lines)
            small = os.path.join(d, "check.jsonl")
            write_json_lines(small, 1000)
            got: list[Any] = []
            want: list[Any] = []
            time_textfile(small, got)
            plain_textfile(small, want)
            ours, plain = [], []
            for _ in range(repeat):
                ours.append(time_textfile(path))
                plain.append(plain_textfile(path))
            ratios = sorted(p_ / o for o, p_ in zip(ours, plain))
            chk = "ok" if got == want else "differs"
            failed |= chk != "ok"
            print(
                f"| from_textfile, {lines:,} JSON lines, map(json.loads).accumulate | "
                f"{lines / statistics.median(ours):,.0f} | "
                f"{lines / statistics.median(plain):,.0f} | {statistics.median(ratios):.3f} | "
                f"{ratios[0]:.2f}-{ratios[-1]:.2f} | {chk} |"
            )
    if not args.no_memory:
        small, large = max(n // 100, 1000), max(n // 10, 10_000)
        print()
        print(
            f"peak traced KiB while a Job runs shape (a) over {small:,} / {large:,} items: "
            f"{peak_job_memory(small) / 1024:.1f} / {peak_job_memory(large) / 1024:.1f}"
        )
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
