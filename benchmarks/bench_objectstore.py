"""Checkpoints in S3 against a local directory, in the same run.

Run:  .venv/bin/python benchmarks/bench_objectstore.py            # 10k, 100k, 1M entries
      .venv/bin/python benchmarks/bench_objectstore.py --quick    # 10k, 100k

An ``accumulate`` holds a dict of K entries (K = 10k, 100k, 1M) and is fed by
an endless ``from_iterable``; ``job.checkpoint()`` is called from another
thread ``--rounds`` times (default 9).  The same graph runs once with
``checkpoint=<temporary directory>`` (LocalDirectoryStore, fsync'ed files) and
once with ``checkpoint="s3://<bucket>/bench"`` (ObjectStore over s3fs) against
moto's S3 server on loopback, started by this script.  Reported per K and
store: the median (max) wall time of ``job.checkpoint()`` and the checkpoint's
size (state objects plus manifest, from the manifest), and the ratio
S3 / directory of the medians.

moto keeps objects in memory in a Python process on the same machine: the S3
figures are the cost of the protocol, the HTTP round trips and the client,
not the latency or bandwidth of a real S3 region.

Not a test: it prints figures and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)


def noop(x: Any) -> None:
    """The benchmark sink."""


def checkpoint_figures(k: int, rounds: int, checkpoint: str) -> dict[str, float]:
    """Median/max seconds of ``job.checkpoint()`` and median bytes, dict state of ``k``."""
    from rivermark import Job, Stream

    def put(acc: dict[int, int], x: int) -> dict[int, int]:
        acc[x % k] = x
        return acc

    source = Stream.from_iterable(range(10**12))
    source.accumulate(put, start={i: i for i in range(k)}).sink(noop)
    job = Job(source, checkpoint=checkpoint, every=None, keep=2)
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while job.epoch < 1 and time.monotonic() < deadline:  # the start checkpoint
        time.sleep(0.01)
    durations, sizes = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        epoch = job.checkpoint()
        durations.append(time.perf_counter() - t0)
        m = job.store.read_manifest(epoch)
        sizes.append(m.total_size + len(m.to_json().encode()))
    job.stop()
    runner.join(120)
    return {
        "duration": statistics.median(durations),
        "duration_max": max(durations),
        "size": statistics.median(sizes),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=9, help="checkpoints per dict size and store")
    args = p.parse_args(argv)
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    logging.basicConfig(level=logging.WARNING)

    import rivermark
    from rivermark.testing.s3_server import start_s3_server

    print(
        f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} cpus"
    )
    server = start_s3_server()
    try:
        os.environ.update(server.env({}))
        bucket = server.new_bucket("bench")
        print()
        print(f"dict state, median of {args.rounds} checkpoints (max); moto S3 on loopback")
        print()
        print("| dict entries | store | checkpoint() ms | size | S3 / directory |")
        print("|---|---|---|---|---|")
        for k in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                local = checkpoint_figures(k, args.rounds, tmp)
            s3 = checkpoint_figures(k, args.rounds, f"s3://{bucket}/bench-{k}")
            for name, r in (("directory", local), ("S3 (moto)", s3)):
                ratio = s3["duration"] / local["duration"] if name != "directory" else 1.0
                print(
                    f"| {k:,} | {name} | {r['duration'] * 1e3:.1f} ({r['duration_max'] * 1e3:.1f}) "
                    f"| {r['size'] / 1024:,.0f} KiB | {ratio:.2f} |"
                )
    finally:
        server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
