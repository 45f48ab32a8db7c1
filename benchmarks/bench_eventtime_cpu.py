"""CPU seconds that checkpoints of 1M open event-time windows cost, apart from the machine's load.

Run:  .venv/bin/python benchmarks/bench_eventtime_cpu.py [--shape keys] [--records 3000000]

The ``keys`` or ``windows`` shape of ``bench_eventtime_pause.py`` (1M open
windows), over a fixed number of records, run twice in this process's
children: with a checkpoint every ``--every`` records
(``Job(every_batches=...)``, background writes) and without
(``every=None``).  Printed per run: the process's CPU time (every thread),
the wall time, the checkpoints taken, the final checkpoint's pause, and the
full (generation-2) collections: how many and the longest in CPU time.  The
ratio of CPU times (without / with) is what the rate with checkpoints would
be, as a share of the rate without, if the process had its cores to itself
and every thread held the GIL while it ran; the wall times on a shared
machine are not comparable between runs.

Not a test: it prints two lines and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from bench_eventtime import SIZE, event_time, key, load  # noqa: E402
from bench_eventtime_pause import keys_records, noop, windows_records  # noqa: E402


def one_run(shape: str, every: int | None, records: int) -> str:
    from rivermark import Job, Stream

    logging.getLogger("rivermark").setLevel(logging.ERROR)
    n_open = 1_000_000
    feed = keys_records if shape == "keys" else windows_records
    grace = 0.0 if shape == "keys" else (n_open // 1000) * SIZE
    source = Stream.from_iterable(itertools.islice(feed(n_open), records), name="records")
    window = source.timestamps(event_time, max_delay="2s", name="times").tumbling_window(
        SIZE, key=key, agg="count", grace=grace, name="counts"
    )
    window.sink(noop)
    full: list[float] = []
    started = [0.0]

    def note(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started[0] = time.thread_time()
            else:
                full.append(time.thread_time() - started[0])

    gc.callbacks.append(note)
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every=None, every_batches=every, keep=3)
        c0, t0 = time.process_time(), time.perf_counter()
        job.run()
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    gc.callbacks.remove(note)
    return (
        f"{cpu:.2f} {wall:.2f} {len(job.checkpoints)} {job.checkpoints[-1].pause:.2f} "
        f"{len(full)} {max(full, default=0.0) * 1e3:.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="keys", choices=["keys", "windows"])
    p.add_argument("--records", type=int, default=3_000_000)
    p.add_argument("--every", type=int, default=400_000, help="records between checkpoints")
    p.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        every = None if args.child[0] == "off" else args.every
        print(one_run(args.shape, every, args.records))
        return 0
    print(f"{args.shape}: {args.records:,} records, 1,000,000 open windows; load {load()}")
    cpu = {}
    for mode in (str(args.every), "off"):
        out = subprocess.run(
            [sys.executable, __file__, "--shape", args.shape, "--records", str(args.records),
             "--every", str(args.every), "--child", mode],
            check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        cpu[mode] = float(out[0])
        label = f"every {args.every:,} records" if mode != "off" else "no checkpoints"
        print(
            f"- {label}: CPU {out[0]} s, wall {out[1]} s, {out[2]} checkpoints, final "
            f"{out[3]} s, {out[4]} full collections, longest {out[5]} ms CPU"
        )
    print(f"CPU without / with: {cpu['off'] / cpu[str(args.every)]:.2f}; load {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
