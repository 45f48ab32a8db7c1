"""Streaming DataFrame throughput: running and windowed groupby sums.

Run:  .venv/bin/python benchmarks/bench_dataframe.py            # 2,000 batches x 1,000 rows
      .venv/bin/python benchmarks/bench_dataframe.py --quick    # 200 batches, a smoke run
      .venv/bin/python benchmarks/bench_dataframe.py --cpu      # CPU time: for a busy machine
      .venv/bin/python benchmarks/bench_dataframe.py --batches 200 --cpu --pairs 15  # ratios only

Input: 2,000 pandas batches of 1,000 rows (``name``: 50 keys, ``amount``: ints),
built before timing.  Two pipelines, each against a plain pandas loop keeping
the same running result and against ``streamz.dataframe`` (benchmark-only
dependency), all in the same process:

- ``sdf.groupby("name").amount.sum()``: plain loop = per-batch
  ``groupby().sum()`` added to the running total;
- ``sdf.window(n=10000).groupby("name").amount.sum()``: plain loop = the same,
  minus the per-batch sums of batches that left the last 10,000 rows.

Each pipeline runs with two examples: ``typed`` (``batches[0].iloc[:0]``: the
int column's own dtype) and ``untyped`` (``pd.DataFrame({"name": [],
"amount": []})``, the seed pipeline's: float64 columns, so the sums are
float64 as ``pd.concat([example, batch])`` makes them); ``--example`` picks one.
``--job`` feeds rivermark from ``Stream.from_iterable(batches)`` run to the end
by ``Job(source, checkpoint=tmp, every="1s")`` (checkpoints included) instead
of ``source.emit(batch)``; the pandas loop and streamz are the same either way.

Rows/s counts input rows; best of ``--repeat`` interleaved runs.  The final
results of the three are compared (``check``).  Peak memory: rivermark's peak
traced memory (``tracemalloc``) while each pipeline takes n/10 and n batches
built on the fly (it must not grow with n: the window holds 10 batches, the
running sum 50 keys), next to the plain pandas loop's.

Not a test: it prints figures and exits 0 (1 if a check failed).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import tempfile
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

ROWS = 1_000
KEYS = 50
WINDOW = 10_000


def make_batches(n: int, seed: int = 0) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    names = np.array([f"n{i:02d}" for i in range(KEYS)], dtype=object)
    return [
        pd.DataFrame(
            {
                "name": names[rng.integers(0, KEYS, ROWS)],
                "amount": rng.integers(0, 100, ROWS),
            }
        )
        for _ in range(n)
    ]


def plain_running(batches: list[pd.DataFrame]) -> pd.Series:
    total: pd.Series | None = None
    for b in batches:
        part = b.groupby("name")["amount"].sum()
        total = part if total is None else total.add(part, fill_value=0)
    assert total is not None
    return total


def plain_windowed(batches: list[pd.DataFrame]) -> pd.Series:
    total: pd.Series | None = None
    parts: deque[tuple[int, pd.Series]] = deque()
    rows = 0
    for b in batches:
        part = b.groupby("name")["amount"].sum()
        parts.append((len(b), part))
        rows += len(b)
        total = part if total is None else total.add(part, fill_value=0)
        while rows - parts[0][0] >= WINDOW:
            n_old, old = parts.popleft()
            rows -= n_old
            total = total.sub(old, fill_value=0)
    assert total is not None
    return total


#: the examples a pipeline runs with: the batches' own dtypes, or the seed's untyped one
EXAMPLES: dict[str, Callable[[list[pd.DataFrame]], pd.DataFrame]] = {
    "typed": lambda batches: batches[0].iloc[:0],
    "untyped": lambda batches: pd.DataFrame({"name": [], "amount": []}),
}


def build(
    module: Any, windowed: bool, example: pd.DataFrame, source: Any = None
) -> tuple[Any, list[Any]]:
    """``(source, last)``: the pipeline on ``module`` (rivermark or streamz) and its output."""
    if module == "rivermark":
        from rivermark import Stream
        from rivermark.dataframe import DataFrame
    else:
        from streamz import Stream
        from streamz.dataframe import DataFrame
    source = Stream() if source is None else source
    sdf = DataFrame(source, example=example)
    base = sdf.window(n=WINDOW) if windowed else sdf
    out = base.groupby("name").amount.sum()
    last: list[Any] = [None]

    def keep(x: Any) -> None:
        last[0] = x

    out.stream.sink(keep)
    return source, last


def streamed(
    module: str, windowed: bool, example: str = "typed", job: bool = False
) -> Callable[[list[pd.DataFrame]], Any]:
    def run(batches: list[pd.DataFrame]) -> Any:
        ex = EXAMPLES[example](batches)
        if job and module == "rivermark":
            return run_job(windowed, ex, batches)
        source, last = build(module, windowed, ex)
        emit = source.emit
        for b in batches:
            emit(b)
        return last[0]

    return run


def run_job(windowed: bool, example: pd.DataFrame, batches: list[pd.DataFrame]) -> Any:
    """The rivermark pipeline fed by ``from_iterable(batches)`` under a checkpointing Job."""
    from rivermark import Job, Stream

    with tempfile.TemporaryDirectory() as tmp:
        source, last = build("rivermark", windowed, example, Stream.from_iterable(batches))
        Job(source, checkpoint=tmp, every="1s").run()
    return last[0]


#: the clock of the timings: wall time, or the process's CPU time (``--cpu``), which a
#: machine shared with other work disturbs much less
CLOCK: Callable[[], float] = time.perf_counter


def timed(func: Callable[[list[pd.DataFrame]], Any], batches: list[pd.DataFrame]) -> float:
    gc.collect()
    t0 = CLOCK()
    func(batches)
    return CLOCK() - t0


def same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    a = pd.Series(a).sort_index().astype("int64")
    b = pd.Series(b).sort_index().astype("int64")
    a = a[a != 0]
    b = b[b != 0]
    return list(a.index) == list(b.index) and list(a.values) == list(b.values)


def fresh_batches(n: int, seed: int = 1) -> Iterator[pd.DataFrame]:
    """Batches built one at a time and dropped after use (for the memory figures).

    Pre-built batches are not used there: pandas' copy-on-write records a
    reference on a batch's index for every view taken of it, so a list of
    batches that outlives the run grows by about 2 KiB per batch whoever
    processes it (the plain pandas loop too).
    """
    rng = np.random.default_rng(seed)
    names = np.array([f"n{i:02d}" for i in range(KEYS)], dtype=object)
    for _ in range(n):
        yield pd.DataFrame(
            {"name": names[rng.integers(0, KEYS, ROWS)], "amount": rng.integers(0, 100, ROWS)}
        )


def peak(contender: str, windowed: bool, n: int) -> int:
    """Peak traced bytes while ``contender`` (``rivermark``/``plain``) takes ``n`` fresh batches."""
    example = make_batches(1)[0].iloc[:0]
    if contender == "rivermark":
        source, _ = build("rivermark", windowed, example)
        push: Callable[[pd.DataFrame], Any] = source.emit
    else:
        state: dict[str, Any] = {"total": None, "parts": deque(), "rows": 0}

        def push(b: pd.DataFrame) -> None:
            part = b.groupby("name")["amount"].sum()
            total = state["total"]
            total = part if total is None else total.add(part, fill_value=0)
            if windowed:
                state["parts"].append((len(b), part))
                state["rows"] += len(b)
                while state["rows"] - state["parts"][0][0] >= WINDOW:
                    n_old, old = state["parts"].popleft()
                    state["rows"] -= n_old
                    total = total.sub(old, fill_value=0)
            state["total"] = total

    for b in fresh_batches(20, seed=2):  # warm up (caches, first allocations)
        push(b)
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for b in fresh_batches(n):
            push(b)
        _, top = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return top - base


def print_pair_ratios(
    batches: list[pd.DataFrame], pairs: int, examples: list[str], job: bool
) -> int:
    """Print, per pipeline, the median over ``pairs`` adjacent runs of pandas time / rivermark time."""
    import statistics

    out = []
    for example in examples:
        for windowed, plain in ((False, plain_running), (True, plain_windowed)):
            riv = streamed("rivermark", windowed, example, job)
            ratios = [timed(plain, batches) / timed(riv, batches) for _ in range(pairs)]
            name = f"{example}-{'window' if windowed else 'running'}"
            out.append(f"{name}={statistics.median(ratios):.3f}")
    print(" ".join(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--batches", type=int, default=None, help="default 2,000")
    p.add_argument("--repeat", type=int, default=None, help="best of R (default 3)")
    p.add_argument("--no-streamz", action="store_true")
    p.add_argument(
        "--cpu", action="store_true", help="time with process CPU time (for a busy machine)"
    )
    p.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="only the ratios: the median over P pairs of (pandas loop time / rivermark time)",
    )
    p.add_argument(
        "--example", choices=("typed", "untyped", "both"), default="both", help="default both"
    )
    p.add_argument(
        "--job", action="store_true", help="rivermark's source under a Job (from_iterable)"
    )
    args = p.parse_args(argv)
    examples = ["typed", "untyped"] if args.example == "both" else [args.example]
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter
    n = args.batches or (200 if args.quick else 2_000)
    repeat = args.repeat or (2 if args.quick else 3)
    batches = make_batches(n)
    rows = n * ROWS
    if args.pairs:
        return print_pair_ratios(batches, args.pairs, examples, args.job)

    import rivermark

    sz_version = "skipped"
    if not args.no_streamz:
        import streamz

        sz_version = streamz.__version__
    print(
        f"rivermark {rivermark.__version__}, streamz {sz_version}, pandas {pd.__version__}, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cpus; {n:,} batches x {ROWS:,} rows, "
        f"{KEYS} keys, best of {repeat}{', CPU time' if args.cpu else ''}; rivermark "
        f"{'from_iterable under Job(every=1s)' if args.job else 'source.emit'}"
    )
    print()
    print(
        "| pipeline | example | rivermark rows/s | pandas loop rows/s | streamz rows/s "
        "| vs pandas | vs streamz | check |"
    )
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for windowed, title, plain, example in (
        (w, t, f, e)
        for w, t, f in (
            (False, 'groupby("name").amount.sum()', plain_running),
            (True, 'window(n=10000).groupby("name").amount.sum()', plain_windowed),
        )
        for e in examples
    ):
        contenders: dict[str, Callable[[list[pd.DataFrame]], Any]] = {
            "plain": plain,
            "rivermark": streamed("rivermark", windowed, example, args.job),
        }
        if not args.no_streamz:
            contenders["streamz"] = streamed("streamz", windowed, example)
        best = {k: float("inf") for k in contenders}
        for _ in range(repeat):  # interleaved
            for k, f in contenders.items():
                best[k] = min(best[k], timed(f, batches))
        expected = plain(batches)
        checks = []
        for k in contenders:
            if k != "plain" and not same(contenders[k](batches), expected):
                checks.append(f"{k}!=pandas")
        ok = ok and not checks
        rate = {k: rows / v for k, v in best.items()}
        sz = rate.get("streamz")
        sz_rate = "n/a" if sz is None else f"{sz:,.0f}"
        sz_ratio = "n/a" if sz is None else f"{rate['rivermark'] / sz:.2f}"
        print(
            f"| {title} | {example} | {rate['rivermark']:,.0f} | {rate['plain']:,.0f} | {sz_rate} | "
            f"{rate['rivermark'] / rate['plain']:.2f} | {sz_ratio} | "
            f"{'; '.join(checks) or 'ok'} |"
        )
    small = max(50, n // 10)
    print()
    print(f"peak traced KiB while taking {small:,} / {n:,} batches (built on the fly):")
    print()
    print("| pipeline | rivermark | pandas loop |")
    print("|---|---|---|")
    for windowed, title in ((False, "running groupby sum"), (True, "window(n=10000) groupby sum")):
        figs = [peak(c, windowed, k) / 1024 for c in ("rivermark", "plain") for k in (small, n)]
        print(f"| {title} | {figs[0]:,.0f} / {figs[1]:,.0f} | {figs[2]:,.0f} / {figs[3]:,.0f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
