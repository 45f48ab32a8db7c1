"""Scale-out benchmark: a CPU-bound map, local versus a LocalCluster of worker processes.

Run:  .venv/bin/python benchmarks/bench_dask.py [--batches 200] [--ms 20] [--workers 2]

1. A CPU-bound function of about ``--ms`` milliseconds per batch over ``--batches``
   batches, through ``Stream().map(f)`` locally and through
   ``scatter().map(f).gather()`` on ``--workers`` worker processes; the speed-up is
   the ratio of the two wall-clock times measured in the same run.
2. The overhead per element of the scatter/gather round trip: a trivial function
   over ``--elements`` records, Dask minus local, divided by the count.

Not a test: it prints a table and exits.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from typing import Any

from distributed import Client, LocalCluster

from rivermark import Stream
from rivermark.dask import DaskGather

logger = logging.getLogger(__name__)


def burn(batch: list[int], loops: int) -> int:
    """Pure-Python CPU work: ``loops`` multiply-adds per batch (no sleeping, holds the GIL)."""
    acc = 0
    for i in range(loops):
        acc = (acc * 31 + i + batch[0]) % 1_000_003
    return acc


def calibrate(ms: float) -> int:
    """The loop count for which ``burn`` takes about ``ms`` milliseconds here."""
    loops = 20_000
    while True:
        t0 = time.perf_counter()
        burn([0], loops)
        took = time.perf_counter() - t0
        if took > 0.05:
            return max(1, int(loops * ms / 1000 / took))
        loops *= 2


def run_local(batches: list[list[int]], loops: int) -> tuple[float, list[Any]]:
    source = Stream()
    out = source.map(burn, loops).sink_to_list()
    t0 = time.perf_counter()
    for b in batches:
        source.emit(b)
    return time.perf_counter() - t0, out


def run_dask(
    client: Client, batches: list[list[int]], loops: int, max_inflight: int
) -> tuple[float, list[Any]]:
    source = Stream()
    g: DaskGather = source.scatter(client=client).map(burn, loops).gather(max_inflight=max_inflight)
    out = g.sink_to_list()
    t0 = time.perf_counter()
    for b in batches:
        source.emit(b)
    g.flush()
    return time.perf_counter() - t0, out


def identity(x: Any) -> Any:
    return x


def overhead(client: Client, n: int, max_inflight: int) -> tuple[float, float]:
    """Seconds per element locally and through scatter/map/gather."""
    items = list(range(n))
    source = Stream()
    source.map(identity).sink_to_list()
    t0 = time.perf_counter()
    for x in items:
        source.emit(x)
    local = (time.perf_counter() - t0) / n

    source = Stream()
    g = source.scatter(client=client).map(identity).gather(max_inflight=max_inflight)
    out = g.sink_to_list()
    t0 = time.perf_counter()
    for x in items:
        source.emit(x)
    g.flush()
    remote = (time.perf_counter() - t0) / n
    assert out == items
    return local, remote


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--ms", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--elements", type=int, default=2000)
    p.add_argument("--max-inflight", type=int, default=8)
    args = p.parse_args()

    loops = calibrate(args.ms)
    batches = [[i] * 100 for i in range(args.batches)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(
            n_workers=args.workers, processes=True, threads_per_worker=1, dashboard_address=":0"
        )
    client = Client(cluster)
    try:
        client.wait_for_workers(args.workers)
        # warm up: ship the function and imports to every worker once
        run_dask(client, batches[: 4 * args.workers], loops, args.max_inflight)

        t_local, out_local = run_local(batches, loops)
        t_dask, out_dask = run_dask(client, batches, loops, args.max_inflight)
        assert out_local == out_dask, "Dask output differs from the local pipeline"
        per_local, per_dask = overhead(client, args.elements, args.max_inflight)
    finally:
        client.close()
        cluster.close()

    rows = [
        ("CPU-bound map, local", f"{t_local:.2f} s", f"{t_local / args.batches * 1e3:.1f} ms"),
        (
            f"CPU-bound map, Dask {args.workers} procs",
            f"{t_dask:.2f} s",
            f"{t_dask / args.batches * 1e3:.1f} ms",
        ),
        ("speed-up (local / Dask)", f"{t_local / t_dask:.2f}x", ""),
        ("trivial map, local", f"{per_local * 1e6:.1f} us/elem", ""),
        ("trivial map, scatter/map/gather", f"{per_dask * 1e6:.1f} us/elem", ""),
        ("overhead per element", f"{(per_dask - per_local) * 1e6:.1f} us", ""),
    ]
    print(
        f"\n{args.batches} batches x ~{args.ms:g} ms ({loops} loops), "
        f"{args.workers} worker processes x 1 thread, max_inflight={args.max_inflight}"
    )
    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'total':>16}  {'per batch':>10}")
    for name, total, per in rows:
        print(f"{name:<{w}}  {total:>16}  {per:>10}")


if __name__ == "__main__":
    main()
