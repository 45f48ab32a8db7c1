"""Keyed tumbling-window count by event time: rivermark against a plain dict loop and Bytewax.

Run:  .venv/bin/python benchmarks/bench_eventtime.py [--n 1000000] [--keys 1000] [--repeat 3]

The input is ``n`` records
``(time, key)``: times increase by 1 ms with up to 2 s of disorder,
``keys`` keys.  rivermark: ``from_iterable`` (the source drives the graph)
-> ``timestamps(max_delay="2s")`` -> ``tumbling_window(10, key=...,
agg="count")`` -> ``sink``, run by a checkpointed ``Job`` (a checkpoint
every second, in a temporary directory), timed from ``job.run()`` to its
end (the final checkpoint included).  The plain loop does the same
bucketing in a dict (``(key, window start) -> count``) and hands out every
window at the end, with no watermark, no late records and no checkpoints.
Bytewax (when installed: ``.venv/bin/pip install bytewax==0.21.1``; it is
no dependency of rivermark): the same records from a ``TestingSource``
(batches of 1,024, as ``from_iterable`` reads), ``EventClock`` on the
record's time with ``wait_for_system_duration`` of 2 s, ``TumblingWindower``
of 10 s, ``count_window``, run in this process by ``bytewax.testing.run_main``
from its start to its end: once with its recovery (an SQLite partition in a
temporary directory, a snapshot every 1 s epoch: what ``Job(every="1s")``
does) and once without.  Bytewax wants aware datetimes and string keys, so
its getters convert each record's time and key (the note gives what the
conversion alone costs); its clock is given a fixed ``now_getter`` so that
its watermark moves by the records' times alone, as rivermark's does (by
default Bytewax also moves it by the wall clock), and no wake-ups.  Its
watermark is per key, rivermark's per input partition: with this input no
record is late for either.  Every run counts the same windows as the plain
loop (checked).  Each figure is the best of ``repeat`` runs, interleaved;
the ratios are plain seconds / that run's seconds.

The checkpoint pause with 1M open windows: ``bench_eventtime_pause.py``.

``--cpu`` times CPU seconds of this process (every thread, the checkpoints'
included) instead of the wall clock, for a busy machine.
``--window hopping``: ``hopping_window(10, 5)`` instead (each record in two
windows; the plain loop counts both), rivermark and the plain loop only.

Not a test: it prints a table and exits 0 (1 if two runs count different windows).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

SIZE = 10.0
BYTEWAX = "bytewax==0.21.1"
Counts = dict[tuple[Any, float], int]


def load() -> str:
    """The load average (1, 5, 15 minutes): the machine is shared."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def records(n: int, keys: int) -> list[tuple[float, int]]:
    rnd = random.Random(1)
    return [(i / 1000 + rnd.random() * 2.0, rnd.randrange(keys)) for i in range(n)]


def event_time(r: tuple[float, int]) -> float:
    return r[0]


def key(r: tuple[float, int]) -> int:
    return r[1]


#: what the runs are timed by (``--cpu``: the process's CPU time, every thread)
clock: Callable[[], float] = time.perf_counter
#: ``--window hopping``: windows of SIZE every STEP seconds instead of tumbling ones
STEP = 5.0
HOPPING = False


def run_rivermark(data: list[tuple[float, int]]) -> tuple[float, Counts]:
    from rivermark import Job, Stream

    out: Counts = {}

    def keep(w: Any) -> None:
        out[(w.key, w.start)] = w.value

    source = Stream.from_iterable(data, name="records")
    timed = source.timestamps(event_time, max_delay="2s", name="times")
    if HOPPING:
        windows = timed.hopping_window(SIZE, STEP, key=key, agg="count", name="counts")
    else:
        windows = timed.tumbling_window(SIZE, key=key, agg="count", name="counts")
    windows.sink(keep)
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every="1s")
        t0 = clock()
        job.run()
        took = clock() - t0
    return took, out


def run_plain(data: list[tuple[float, int]]) -> tuple[float, Counts]:
    t0 = clock()
    counts: Counts = {}
    get = counts.get
    if HOPPING:
        for ts, k in data:
            w = (k, ts - ts % STEP)
            counts[w] = get(w, 0) + 1
            w = (k, w[1] - STEP)
            counts[w] = get(w, 0) + 1
    else:
        for ts, k in data:
            w = (k, ts - ts % SIZE)
            counts[w] = get(w, 0) + 1
    out = dict(counts)
    return clock() - t0, out


# ---------------------------------------------------------------------- Bytewax
def run_bytewax(data: list[tuple[float, int]], recovery: bool) -> tuple[float, Counts]:
    """Seconds of ``run_main`` over ``data`` (with Bytewax's recovery or without); its counts."""
    from datetime import datetime, timedelta, timezone

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, count_window
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import TestingSink, TestingSource, run_main

    utc = timezone.utc
    origin = datetime(1970, 1, 1, tzinfo=utc)
    fromtimestamp = datetime.fromtimestamp

    def bw_time(r: tuple[float, int]) -> datetime:
        return fromtimestamp(r[0], utc)

    def bw_key(r: tuple[float, int]) -> str:
        return str(r[1])

    out: list[tuple[str, tuple[int, int]]] = []
    flow = Dataflow("eventtime")
    up = op.input("records", flow, TestingSource(data, batch_size=1024))
    clock = EventClock(
        ts_getter=bw_time,
        wait_for_system_duration=timedelta(seconds=2),
        now_getter=lambda: origin,  # the watermark moves by the records' times only
        to_system_utc=lambda t: None,  # no wake-ups: records and the end close windows
    )
    windower = TumblingWindower(length=timedelta(seconds=SIZE), align_to=origin)
    counts = count_window("counts", up, clock, windower, bw_key)
    op.output("out", counts.down, TestingSink(out))
    with tempfile.TemporaryDirectory() as d:
        options: dict[str, Any] = {}
        if recovery:
            init_db_dir(Path(d), 1)
            options = {
                "epoch_interval": timedelta(seconds=1),
                "recovery_config": RecoveryConfig(Path(d)),
            }
        t0 = clock()
        run_main(flow, **options)
        took = clock() - t0
    return took, {(int(k), window * SIZE): c for k, (window, c) in out}


def bytewax_conversions(data: list[tuple[float, int]]) -> float:
    """Seconds to convert every record's time to an aware datetime and its key to a str."""
    from datetime import datetime, timezone

    utc, fromtimestamp = timezone.utc, datetime.fromtimestamp
    t0 = clock()
    for ts, k in data:
        fromtimestamp(ts, utc)
        str(k)
    return clock() - t0


def throughput(args: argparse.Namespace) -> int:
    load_start = load()
    data = records(args.n, args.keys)
    bytewax = importlib.util.find_spec("bytewax") is not None and not args.no_bytewax
    runs: dict[str, Any] = {"plain": run_plain, "rivermark": run_rivermark}
    if bytewax:
        runs["bytewax"] = lambda d: run_bytewax(d, recovery=True)
        runs["bytewax-norec"] = lambda d: run_bytewax(d, recovery=False)
    times: dict[str, list[float]] = {name: [] for name in runs}
    outs: dict[str, Counts] = {}
    for _ in range(args.repeat):  # interleaved, so that a slow spell hits every run
        for name, run in runs.items():
            gc.collect()
            t, outs[name] = run(data)
            times[name].append(t)
    wrong = [name for name, out in outs.items() if out != outs["plain"]]
    if wrong:
        print(f"{', '.join(wrong)} counted other windows than the plain loop", file=sys.stderr)
        return 1
    best = {name: min(ts) for name, ts in times.items()}
    print(f"{args.n:,} records, {args.keys:,} keys, {len(outs['plain']):,} windows; best of "
          f"{args.repeat} (spread: slowest run); load {load_start} at the start, "
          f"{load()} at the end")  # fmt: skip
    print()
    print("| run | seconds (slowest) | records/s | plain / this |")
    print("|---|---|---|---|")
    titles = {
        "plain": "plain dict loop",
        "rivermark": f'rivermark Job(every="1s"), {"hopping" if HOPPING else "tumbling"}'
        "_window count",
        "bytewax": "Bytewax count_window, recovery (SQLite, 1 s epochs)",
        "bytewax-norec": "Bytewax count_window, no recovery",
    }
    for name in runs:
        print(
            f"| {titles[name]} | {best[name]:.3f} ({max(times[name]):.3f}) "
            f"| {args.n / best[name]:,.0f} | {best['plain'] / best[name]:.2f} |"
        )
    if bytewax:
        print(
            f"\nBytewax {importlib.metadata.version('bytewax')}; Bytewax (recovery) seconds / "
            f"rivermark seconds: {best['bytewax'] / best['rivermark']:.2f}; converting the records' "
            f"times and keys for Bytewax alone: {bytewax_conversions(data):.3f} s"
        )
    elif args.no_bytewax:
        print("\nBytewax: left out (--no-bytewax)")
    else:
        print(f"\nBytewax: not installed (.venv/bin/pip install {BYTEWAX} to compare)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-bytewax", action="store_true", help="leave Bytewax out")
    p.add_argument("--window", default="tumbling", choices=["tumbling", "hopping"])
    p.add_argument("--cpu", action="store_true", help="time CPU seconds, not wall seconds")
    args = p.parse_args(argv)
    if args.cpu:  # a busy machine: the process's CPU time (the checkpoint thread's too)
        global clock
        clock = time.process_time
    if args.window == "hopping":  # rivermark and the plain loop only
        global HOPPING
        HOPPING = True
        args.no_bytewax = True
    logging.basicConfig(level=logging.WARNING)
    return throughput(args)


if __name__ == "__main__":
    sys.exit(main())
