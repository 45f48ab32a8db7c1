"""Scale-out benchmark: a CPU-bound map, local versus a LocalCluster of worker processes.

Run:  .venv/bin/python benchmarks/bench_dask.py [--batches 200] [--ms 20] [--workers 2]
                                               [--repeat 3] [--max-inflight 32]

1. A CPU-bound function (pure Python, holds the GIL) of about ``--ms``
   milliseconds per batch over ``--batches`` batches, three ways, each round in
   the same process:

   * local: ``Stream.from_iterable(batches).map(f)``;
   * rivermark on Dask: ``from_iterable(batches).scatter().map(f).gather()``
     with up to ``--max-inflight`` futures in flight, on ``--workers`` worker
     processes (one thread each) of a ``LocalCluster``;
   * plain Dask ``client.map(f, batches)`` over all the batches at once, then
     ``client.gather``: the baseline rivermark is held to (the same cluster and
     tasks, no window, no ordering work);
   * plain Dask, for reference: ``client.submit(f, batch)`` with the same
     window, results taken in order (what the pipeline does, without rivermark);
   * a ``concurrent.futures.ProcessPoolExecutor`` of as many processes, for
     reference: what the machine gives two processes with almost no per-task
     cost (the ceiling any cluster could reach here).

   Times run from starting the source to the last result in the sink.  The
   speed-up is local / Dask of the same round; "of client.map" is
   client.map's time / rivermark's time of the same round.
2. The overhead per element of the scatter/gather round trip: an identity
   function over ``--elements`` records, (Dask - local) / count, for rivermark
   and for plain Dask.
3. The scattered ``accumulate``: ``scatter().accumulate(add, start=0).gather()``
   over ``--elements`` integers, records per second.

It also prints the CPU seconds each process used during the Dask runs (the
LocalCluster's scheduler runs in this process, next to the client and the
pipeline) and the load average before and after, since on a small machine
every other busy process takes its share from the workers.  Not a test: it
prints tables and exits.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from distributed import Client, LocalCluster

from rivermark import Stream

logger = logging.getLogger(__name__)


def burn(batch: list[int], loops: int) -> int:
    """Pure-Python CPU work: ``loops`` multiply-adds per batch (no sleeping, holds the GIL)."""
    acc = 0
    for i in range(loops):
        acc = (acc * 31 + i + batch[0]) % 1_000_003
    return acc


def identity(x: Any) -> Any:
    return x


def add(a: int, b: int) -> int:
    return a + b


def calibrate(ms: float) -> int:
    """The loop count for which ``burn`` takes about ``ms`` milliseconds here (median of 5).

    The speed of a core varies from one second to the next on a shared VM,
    so the table also gives the per-batch time the local pipeline measured.
    """
    loops = 20_000
    while True:
        took = statistics.median(_time(burn, [0], loops) for _ in range(5))
        if took > 0.05:
            return max(1, int(loops * ms / 1000 / took))
        loops *= 2


def _time(f: Callable[..., Any], *args: Any) -> float:
    t0 = time.perf_counter()
    f(*args)
    return time.perf_counter() - t0


def run_pipeline(build: Callable[[Stream], Stream], items: list[Any]) -> tuple[float, list[Any]]:
    """Start ``from_iterable(items)`` through ``build``; seconds until the last result arrived."""
    source = Stream.from_iterable(items)
    out: list[Any] = []
    done = threading.Event()

    def collect(x: Any) -> None:
        out.append(x)
        if len(out) == len(items):
            done.set()

    build(source).sink(collect)
    t0 = time.perf_counter()
    source.start()
    if not done.wait(600):
        raise RuntimeError(f"only {len(out)} of {len(items)} results arrived in 600 s")
    return time.perf_counter() - t0, out


def run_plain_dask(
    client: Client, func: Callable[..., Any], items: list[Any], window: int, *args: Any
) -> tuple[float, list[Any]]:
    """``client.submit`` with at most ``window`` futures in flight, results in order."""
    out: list[Any] = []
    pending: deque[Any] = deque()
    t0 = time.perf_counter()
    for x in items:
        pending.append(client.submit(func, x, *args, pure=False))
        if len(pending) >= window:
            out.append(pending.popleft().result())
    out.extend(f.result() for f in pending)
    return time.perf_counter() - t0, out


def run_client_map(
    client: Client, func: Callable[..., Any], items: list[Any], *args: Any
) -> tuple[float, list[Any]]:
    """Plain Dask at its best: every task submitted at once, all results gathered at once."""
    t0 = time.perf_counter()
    futures = client.map(func, items, *[[a] * len(items) for a in args], pure=False)
    out = client.gather(futures)
    return time.perf_counter() - t0, list(out)


def run_process_pool(
    pool: ProcessPoolExecutor, batches: list[list[int]], loops: int
) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    out = list(pool.map(burn, batches, [loops] * len(batches)))
    return time.perf_counter() - t0, out


def worker_cpu(client: Client) -> float:
    return float(sum(client.run(time.process_time).values()))


def one_round(
    client: Client,
    pool: ProcessPoolExecutor,
    batches: list[list[int]],
    loops: int,
    window: int,
) -> dict[str, float]:
    t_local, out_local = run_pipeline(lambda s: s.map(burn, loops), batches)
    w0, m0 = worker_cpu(client), time.process_time()
    t_dask, out_dask = run_pipeline(
        lambda s: s.scatter(client=client).map(burn, loops).gather(max_inflight=window), batches
    )
    w1, m1 = worker_cpu(client), time.process_time()
    t_plain, out_plain = run_plain_dask(client, burn, batches, window, loops)
    t_map, out_map = run_client_map(client, burn, batches, loops)
    t_pool, out_pool = run_process_pool(pool, batches, loops)
    if not out_local == out_dask == out_plain == out_map == out_pool:
        raise RuntimeError("the Dask results differ from the local pipeline's")
    return {
        "local": t_local,
        "dask": t_dask,
        "plain": t_plain,
        "map": t_map,
        "pool": t_pool,
        "of_map": t_map / t_dask,
        "speedup_map": t_local / t_map,
        "speedup": t_local / t_dask,
        "speedup_plain": t_local / t_plain,
        "speedup_pool": t_local / t_pool,
        "cpu_here": m1 - m0,
        "cpu_workers": w1 - w0,
    }


def overhead(client: Client, n: int, window: int, acc_windows: list[int]) -> dict[str, float]:
    """Seconds per element: local, rivermark scatter/map/gather, plain Dask submit/result."""
    items = list(range(n))
    t_local, out_local = run_pipeline(lambda s: s.map(identity), items)
    t_dask, out_dask = run_pipeline(
        lambda s: s.scatter(client=client).map(identity).gather(max_inflight=window), items
    )
    t_plain, out_plain = run_plain_dask(client, identity, items, window)
    if not out_local == out_dask == out_plain == items:
        raise RuntimeError("the identity pipelines lost or reordered elements")
    res = {"local": t_local / n, "dask": t_dask / n, "plain": t_plain / n}
    for w in acc_windows:
        t_acc, out_acc = run_pipeline(
            lambda s, w=w: s.scatter(client=client).accumulate(add, start=0).gather(max_inflight=w),
            items,
        )
        if out_acc != list(itertools.accumulate(items, add)):
            raise RuntimeError("the scattered accumulate differs from itertools.accumulate")
        res[f"acc_rate_{w}"] = n / t_acc
    return res


def spread(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--ms", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--elements", type=int, default=2000)
    p.add_argument("--max-inflight", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--acc-windows",
        default="32,128",
        help="gather windows (max_inflight) at which the scattered accumulate is timed",
    )
    args = p.parse_args()
    acc_windows = [int(w) for w in args.acc_windows.split(",")]

    load_before = os.getloadavg()
    batches = [[i] * 100 for i in range(args.batches)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(
            n_workers=args.workers, processes=True, threads_per_worker=1, dashboard_address=None
        )
    client = Client(cluster)
    pool = ProcessPoolExecutor(args.workers)
    rounds: list[dict[str, float]] = []
    overheads: list[dict[str, float]] = []
    try:
        client.wait_for_workers(args.workers)
        loops = calibrate(args.ms)
        # warm up: ship the functions and imports to every worker once
        one_round(client, pool, batches[: 4 * args.workers], loops, args.max_inflight)
        overhead(client, 100, args.max_inflight, acc_windows)
        for _ in range(args.repeat):
            rounds.append(one_round(client, pool, batches, loops, args.max_inflight))
            overheads.append(overhead(client, args.elements, args.max_inflight, acc_windows))
    finally:
        pool.shutdown()
        client.close()
        cluster.close()
    load_after = os.getloadavg()

    def col(key: str) -> list[float]:
        return [r[key] for r in rounds]

    def ocol(key: str) -> list[float]:
        return [o[key] * 1e6 for o in overheads]

    print(
        f"\n{args.batches} batches x ~{args.ms:g} ms ({loops} loops), {args.workers} worker "
        f"processes x 1 thread, max_inflight={args.max_inflight}, {os.cpu_count()} cpus, "
        f"{args.repeat} rounds: median (min-max)"
    )
    print(
        "load average (1, 5, 15 min) before: "
        + ", ".join(f"{v:.2f}" for v in load_before)
        + "; after: "
        + ", ".join(f"{v:.2f}" for v in load_after)
    )
    rows = [
        ("local pipeline, s", spread(col("local"), ".2f")),
        (
            "local pipeline, ms per batch",
            spread([t / args.batches * 1e3 for t in col("local")], ".1f"),
        ),
        (f"rivermark on Dask ({args.workers} procs), s", spread(col("dask"), ".2f")),
        (f"plain Dask client.map ({args.workers} procs), s", spread(col("map"), ".2f")),
        (f"plain Dask submit/result ({args.workers} procs), s", spread(col("plain"), ".2f")),
        ("speed-up, rivermark on Dask", spread(col("speedup"), ".2f") + "x"),
        ("rivermark on Dask, of client.map's speed", spread(col("of_map"), ".2f")),
        ("speed-up, plain Dask client.map", spread(col("speedup_map"), ".2f") + "x"),
        ("speed-up, plain Dask submit/result", spread(col("speedup_plain"), ".2f") + "x"),
        (
            f"speed-up, process pool of {args.workers} (no Dask)",
            spread(col("speedup_pool"), ".2f") + "x",
        ),
        ("CPU s in this process during the Dask run", spread(col("cpu_here"), ".2f")),
        ("CPU s in the workers during the Dask run", spread(col("cpu_workers"), ".2f")),
        ("identity, local, us/element", spread(ocol("local"), ".1f")),
        ("identity, rivermark scatter/map/gather, us/element", spread(ocol("dask"), ".0f")),
        ("identity, plain Dask submit/result, us/element", spread(ocol("plain"), ".0f")),
        (
            "overhead per element, rivermark, us",
            spread([d - lo for d, lo in zip(ocol("dask"), ocol("local"))], ".0f"),
        ),
    ]
    rows += [
        (
            f"scattered accumulate, gather(max_inflight={w}), records/s",
            spread([o[f"acc_rate_{w}"] for o in overheads], ",.0f"),
        )
        for w in acc_windows
    ]
    w = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{w}}  {value}")
    print("\nper round:")
    for i, (r, o) in enumerate(zip(rounds, overheads)):
        print(
            f"  round {i}: local {r['local']:.2f} s, rivermark/Dask {r['dask']:.2f} s "
            f"({r['speedup']:.2f}x, {r['of_map']:.2f} of client.map), "
            f"client.map {r['map']:.2f} s ({r['speedup_map']:.2f}x), "
            f"plain Dask {r['plain']:.2f} s ({r['speedup_plain']:.2f}x), "
            f"process pool {r['pool']:.2f} s ({r['speedup_pool']:.2f}x); "
            f"identity {o['dask'] * 1e6:.0f} us/elem (plain {o['plain'] * 1e6:.0f}); "
            "accumulate "
            + ", ".join(f"{o[f'acc_rate_{w}']:,.0f}" for w in acc_windows)
            + " records/s"
        )


if __name__ == "__main__":
    main()
