"""Run every throughput benchmark module and print one table.

Run:  .venv/bin/python benchmarks/run.py            # one million events per variant
      .venv/bin/python benchmarks/run.py --quick    # 20,000 events, a smoke run

Every module in ``benchmarks/`` that defines a top-level ``VARIANTS`` list is
run (modules without it, such as ``bench_dask.py``, are stand-alone scripts).
For each variant, in the same process: rivermark, the plain Python loop
calling the same functions, and streamz (installed in the benchmark
environment only; rivermark never imports it).  Columns are events per second
(source events; best of ``--repeat`` runs, rivermark and plain interleaved) and the ratios rivermark/plain and
rivermark/streamz.  streamz is timed on fewer events when it is slow (about
``--streamz-seconds`` per variant, reported as ``streamz n``).  ``peak KiB`` is
rivermark's peak traced memory while emitting n/10 and n events: it must not
grow with n.  ``check`` compares the three outputs on 1,000 events.

Not a test: it prints a table and exits 0 (1 if an output check failed).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import harness
from harness import Result, Variant

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent


def discover() -> list[str]:
    """Names of the modules in ``benchmarks/`` that define ``VARIANTS`` (without importing)."""
    found = []
    for path in sorted(HERE.glob("*.py")):
        if path.name in ("run.py", "harness.py"):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id == "VARIANTS" for t in targets):
                found.append(path.stem)
                break
    return found


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def load_streamz() -> Any | None:
    try:
        import streamz
    except ImportError:
        return None
    return streamz.Stream


def streamz_events(stream_cls: Any, variant: Variant, n: int, seconds: float) -> int:
    """How many events streamz can take in about ``seconds`` (at most ``n``)."""
    probe = min(n, 5_000)
    took = harness.time_rivermark_like(stream_cls, variant.build, probe, 1)
    rate = probe / max(took, 1e-9)
    return int(max(probe, min(n, rate * seconds)))


def run_variant(
    variant: Variant,
    n: int,
    repeat: int,
    rivermark_cls: Any,
    streamz_cls: Any | None,
    streamz_seconds: float,
    memory: bool,
) -> Result:
    res = Result(variant, n)
    missing = [a for a in variant.requires if not hasattr(rivermark_cls, a)]
    if missing:
        res.notes.append(f"rivermark lacks {', '.join(missing)}")
        res.plain = n / harness.time_plain(variant.plain, n, repeat)
    else:
        res.check = harness.check(variant, rivermark_cls, streamz_cls)
        # interleaved, so that a slow spell of the machine hits both alike
        t_plain = t_river = float("inf")
        for _ in range(repeat):
            t_plain = min(t_plain, harness.time_plain(variant.plain, n, 1))
            t_river = min(t_river, harness.time_rivermark_like(rivermark_cls, variant.build, n, 1))
        res.plain = n / t_plain
        res.rivermark = n / t_river
    if streamz_cls is not None:
        sn = streamz_events(streamz_cls, variant, n, streamz_seconds)
        res.streamz_n = sn
        res.streamz = sn / harness.time_rivermark_like(streamz_cls, variant.build, sn, 1)
    if memory and not missing:
        small = max(1000, n // 10)
        res.mem_ns = (small, n)
        res.mem_small = harness.peak_memory(rivermark_cls, variant.build, small)
        res.mem_large = harness.peak_memory(rivermark_cls, variant.build, n)
    return res


def fmt_rate(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a"
    return f"{a / b:.3f}" if a / b < 10 else f"{a / b:.1f}"


def fmt_mem(r: Result) -> str:
    if r.mem_small is None or r.mem_large is None:
        return "n/a"
    return f"{r.mem_small / 1024:.1f} / {r.mem_large / 1024:.1f}"


def table(results: list[Result]) -> str:
    head = [
        "variant",
        "rivermark ev/s",
        "plain ev/s",
        "streamz ev/s",
        "vs plain",
        "vs streamz",
        "streamz n",
        "peak KiB n/10 / n",
        "check",
    ]
    rows = [head]
    for r in results:
        check = r.check if not r.notes else "; ".join(r.notes)
        rows.append(
            [
                f"({r.variant.key}) {r.variant.title}",
                fmt_rate(r.rivermark),
                fmt_rate(r.plain),
                fmt_rate(r.streamz),
                fmt_ratio(r.rivermark, r.plain),
                fmt_ratio(r.rivermark, r.streamz),
                f"{r.streamz_n:,}" if r.streamz_n else "n/a",
                fmt_mem(r),
                check,
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = []
    for j, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if j == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20,000 events, best of 3: a smoke run")
    p.add_argument("-n", type=int, default=None, help="events per variant (default 1,000,000)")
    p.add_argument(
        "--repeat", type=int, default=None, help="best of R interleaved timings (default 5)"
    )
    p.add_argument("--only", default="", help="comma-separated variant keys, e.g. a,b")
    p.add_argument("--streamz-seconds", type=float, default=3.0)
    p.add_argument("--no-streamz", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    args = p.parse_args(argv)
    n = args.n or (20_000 if args.quick else 1_000_000)
    repeat = args.repeat or (3 if args.quick else 5)
    only = {k.strip() for k in args.only.split(",") if k.strip()}

    from rivermark import Stream

    if "streamz" in sys.modules:
        print("error: importing rivermark imported streamz", file=sys.stderr)
        return 2
    streamz_cls = None if args.no_streamz else load_streamz()

    results = []
    t0 = time.perf_counter()
    for modname in discover():
        module = importlib.import_module(modname)
        for variant in module.VARIANTS:
            if only and variant.key not in only:
                continue
            r = run_variant(
                variant,
                n,
                repeat,
                Stream,
                streamz_cls,
                args.streamz_seconds,
                not args.no_memory,
            )
            results.append(r)
            print(f"  done ({r.variant.key}) {r.variant.title}", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - t0
    import rivermark

    sz = getattr(sys.modules.get("streamz"), "__version__", "not installed")
    print(
        f"rivermark {rivermark.__version__}, streamz {sz}, Python {platform.python_version()} "
        f"on {platform.machine()} ({cpu_name()}, {os.cpu_count()} cpus); n={n:,}, "
        f"best of {repeat}; {elapsed:.0f} s"
    )
    print()
    print(table(results))
    return 0 if all(r.check in ("ok", "-") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
