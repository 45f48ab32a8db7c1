"""from_textfile under a Job against a plain read loop: many short lines, and one very long line.

Run:  .venv/bin/python benchmarks/bench_textfile.py                  # 1M lines, 40 MiB line
      .venv/bin/python benchmarks/bench_textfile.py --quick          # smoke run
      .venv/bin/python benchmarks/bench_textfile.py --baseline DIR   # also DIR/src, same run

Short lines: a file of ``--lines`` lines ``"line i\\n"``;
``Job(Stream.from_textfile(path, stop_at_eof=True).sink(noop))`` against
``for line in open(path): noop(line)``.  Long line: a file holding one line
of ``--long-mib`` MiB (and a short one after it), the same two ways.
Each figure is the median of ``--repeat`` rounds, the two ways interleaved;
each job runs in a child process of its own (as the baseline's do).

``--baseline DIR`` measures the short-line job and a long line of
``--baseline-long-mib`` MiB with the tree ``DIR/src`` too (each in a child
process of its own, interleaved with ours), e.g. a ``git worktree`` of
main: the ratio shows a change in throughput.  The default baseline line is
small because a reader that re-scans its buffer takes quadratic time on it.

Not a test: it prints figures and exits 0 (1 if an output check failed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import in_child, noop  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")


def write_short(path: str, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"line {i}\n" for i in range(n))


def write_long(path: str, mib: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("x" * (mib << 20) + "\nend\n")


def job_seconds(path: str, out: list[Any] | None = None) -> float:
    from rivermark import Job, Stream

    source = Stream.from_textfile(path, stop_at_eof=True)
    source.sink(out.append if out is not None else noop)
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(source, checkpoint=tmp, every="1s")
        gc.collect()
        t0 = time.perf_counter()
        job.run()
        took = time.perf_counter() - t0
    source.destroy()
    return took


def plain_seconds(path: str, out: list[Any] | None = None) -> float:
    sink = out.append if out is not None else noop
    gc.collect()
    t0 = time.perf_counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            sink(line)
    return time.perf_counter() - t0


def child(args: list[str]) -> int:
    """``--child PATH``: one job over PATH in this process's tree; prints the seconds."""
    print(json.dumps({"seconds": job_seconds(args[0])}))
    return 0


def check(tmp: str) -> bool:
    path = os.path.join(tmp, "check.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("a\n" + "y" * 300_000 + "\nb")
    got: list[Any] = []
    want: list[Any] = []
    job_seconds(path, got)
    plain_seconds(path, want)
    return got == want


def compare(path: str, repeat: int, baseline: str | None) -> dict[str, float]:
    ours, plain, base = [], [], []
    for _ in range(repeat):
        ours.append(in_child(__file__, SRC, [path])["seconds"])
        plain.append(plain_seconds(path))
        if baseline is not None:
            base.append(in_child(__file__, os.path.join(baseline, "src"), [path])["seconds"])
    out = {"job": statistics.median(ours), "plain": statistics.median(plain)}
    if base:
        out["baseline"] = statistics.median(base)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="100,000 lines, a 4 MiB line, one round")
    p.add_argument("--lines", type=int, default=1_000_000)
    p.add_argument("--long-mib", type=int, default=40)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--baseline", default=None, help="a checkout whose src/ is compared with ours")
    p.add_argument("--baseline-long-mib", type=int, default=4)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.quick:
        args.lines, args.long_mib, args.repeat = 100_000, 4, 1
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ok = check(tmp)
        short = os.path.join(tmp, "short.txt")
        write_short(short, args.lines)
        r = compare(short, args.repeat, args.baseline)
        print(
            f"short lines ({args.lines:,}): job {args.lines / r['job']:,.0f} lines/s, plain loop "
            f"{args.lines / r['plain']:,.0f} lines/s, job/plain time {r['job'] / r['plain']:.2f}"
        )
        if "baseline" in r:
            print(
                f"  baseline job {args.lines / r['baseline']:,.0f} lines/s; "
                f"ours/baseline time {r['job'] / r['baseline']:.3f}"
            )
        long = os.path.join(tmp, "long.txt")
        write_long(long, args.long_mib)
        r = compare(long, args.repeat, None)
        print(
            f"one {args.long_mib} MiB line: job {r['job']:.3f} s, plain loop {r['plain']:.3f} s, "
            f"{(args.long_mib << 20) / r['job'] / 1e6:,.0f} MB/s"
        )
        if args.baseline is not None:
            write_long(long, args.baseline_long_mib)
            r = compare(long, args.repeat, args.baseline)
            print(
                f"one {args.baseline_long_mib} MiB line: job {r['job']:.3f} s, "
                f"baseline job {r['baseline']:.3f} s"
            )
    print("output check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
