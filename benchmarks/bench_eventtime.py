"""Event-time windows: throughput against a plain dict loop and Bytewax; checkpoint pauses.

Run:  .venv/bin/python benchmarks/bench_eventtime.py [--n 1000000] [--keys 1000] [--repeat 3]
      .venv/bin/python benchmarks/bench_eventtime.py --only pause [--rounds 3]

**Throughput** (``--only throughput``).  The input is ``n`` records
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

**Checkpoint pause** (``--only pause``).  A ``Job(every="1s")`` (background
writes, a local directory) whose ``tumbling_window`` count holds 1,000,000
open windows, of two shapes: ``keys``, 1M keys in one window each (times
stay inside ``[0, 10)``, so no window closes; a record adds to one), and
``windows``, 1,000 keys x 1,000 windows (one record per key and window,
``grace`` of 1,000 windows: every record opens one window and, once full,
closes one).  An endless source fills the state, then the job runs until
``--checkpoints`` interval checkpoints have been taken with the state full.
Per checkpoint: the pause (the time the sources were held, the manifest's
``timing``, read from ``job.checkpoints``), how it splits into quiescing,
taking the state's views (``Job._snapshot_states``) and the rest, the
bytes written, the write's duration in the background, the interval
between barriers; and the rate while measured against the same job without
interval checkpoints (``every=None``) run just after.  The final
checkpoint (written with the sources paused) is left out.

Not a test: it prints tables and exits 0 (1 if two runs count different windows).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import itertools
import logging
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
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


def run_rivermark(data: list[tuple[float, int]]) -> tuple[float, Counts]:
    from rivermark import Job, Stream

    out: Counts = {}

    def keep(w: Any) -> None:
        out[(w.key, w.start)] = w.value

    source = Stream.from_iterable(data, name="records")
    (
        source.timestamps(event_time, max_delay="2s", name="times")
        .tumbling_window(SIZE, key=key, agg="count", name="counts")
        .sink(keep)
    )
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every="1s")
        t0 = time.perf_counter()
        job.run()
        took = time.perf_counter() - t0
    return took, out


def run_plain(data: list[tuple[float, int]]) -> tuple[float, Counts]:
    t0 = time.perf_counter()
    counts: Counts = {}
    get = counts.get
    for ts, k in data:
        w = (k, ts - ts % SIZE)
        counts[w] = get(w, 0) + 1
    out = dict(counts)
    return time.perf_counter() - t0, out


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
        t0 = time.perf_counter()
        run_main(flow, **options)
        took = time.perf_counter() - t0
    return took, {(int(k), window * SIZE): c for k, (window, c) in out}


def bytewax_conversions(data: list[tuple[float, int]]) -> float:
    """Seconds to convert every record's time to an aware datetime and its key to a str."""
    from datetime import datetime, timezone

    utc, fromtimestamp = timezone.utc, datetime.fromtimestamp
    t0 = time.perf_counter()
    for ts, k in data:
        fromtimestamp(ts, utc)
        str(k)
    return time.perf_counter() - t0


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
        "rivermark": 'rivermark Job(every="1s"), tumbling_window count',
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
            f"\nBytewax {importlib.metadata.version('bytewax')}; rivermark / Bytewax (recovery): "
            f"{best['bytewax'] / best['rivermark']:.2f}x faster; converting the records' "
            f"times and keys for Bytewax alone: {bytewax_conversions(data):.3f} s"
        )
    else:
        print(f"\nBytewax: not installed (.venv/bin/pip install {BYTEWAX} to compare)")
    return 0


# ------------------------------------------------------------- checkpoint pause
def keys_records(n_open: int) -> Iterator[tuple[float, int]]:
    """Endless: ``n_open`` keys in turn, times inside one window (nothing closes)."""
    for i in itertools.count():
        yield (0.005 + (i % 1000) / 100.0, i % n_open)


def windows_records(n_open: int) -> Iterator[tuple[float, int]]:
    """Endless: 1,000 keys, one record per key and window (in its middle), moving on."""
    for i in itertools.count():
        yield ((i // 1000 + 0.5) * SIZE, i % 1000)


def noop(x: Any) -> None:
    """The benchmark sink."""


class _Barriers:
    """Per epoch: open windows, records emitted and the time at the pause; phase seconds."""

    def __init__(self, job: Any, source: Any, window: Any) -> None:
        self.at: dict[int, tuple[int, int, float]] = {}
        self.phases: dict[int, dict[str, float]] = {}
        pause, quiesce, snapshot = source.pause, job._quiesce, job._snapshot_states

        def timed_pause() -> None:
            self.at[job.epoch + 1] = (window.open_windows, source.emitted, time.perf_counter())
            pause()

        async def timed_quiesce() -> None:
            t0 = time.perf_counter()
            await quiesce()
            self.phases.setdefault(job.epoch + 1, {})["quiesce"] = time.perf_counter() - t0

        def timed_snapshot(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            views = snapshot(*args, **kwargs)
            self.phases.setdefault(job.epoch + 1, {})["views"] = time.perf_counter() - t0
            return views

        source.pause = timed_pause
        job._quiesce = timed_quiesce
        job._snapshot_states = timed_snapshot


def _graph(shape: str, n_open: int) -> tuple[Any, Any]:
    from rivermark import Stream

    feed = keys_records if shape == "keys" else windows_records
    grace = 0.0 if shape == "keys" else (n_open // 1000) * SIZE
    source = Stream.from_iterable(feed(n_open), name="records")
    window = source.timestamps(event_time, max_delay="2s", name="times").tumbling_window(
        SIZE, key=key, agg="count", grace=grace, name="counts"
    )
    window.sink(noop)
    return source, window


def pause_run(shape: str, n_open: int, wanted: int, timeout: float) -> dict[str, Any]:
    """One job: the interval checkpoints taken with ``n_open`` windows open, and a baseline."""
    from rivermark import Job

    source, window = _graph(shape, n_open)
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every="1s", keep=3)
        barriers = _Barriers(job, source, window)
        runner = threading.Thread(target=job.run, daemon=True)
        runner.start()
        deadline = time.monotonic() + timeout

        def full() -> list[Any]:
            return [c for c in list(job.checkpoints) if barriers.at.get(c.epoch, (0,))[0] >= n_open]

        while len(full()) < wanted and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.05)
        taken, waits = full()[:wanted], job.checkpoint_waits
        job.stop()
        runner.join(600)
    if len(taken) < 2:
        raise SystemExit(
            f"pause ({shape}): {len(taken)} checkpoints with {n_open:,} windows open within "
            f"{timeout:g} s; pass a larger --timeout"
        )
    first, last = barriers.at[taken[0].epoch], barriers.at[taken[-1].epoch]
    seconds = last[2] - first[2]
    return {
        "infos": taken,
        "phases": [barriers.phases.get(c.epoch, {}) for c in taken],
        "intervals": [
            barriers.at[b.epoch][2] - barriers.at[a.epoch][2] for a, b in itertools.pairwise(taken)
        ],
        "rate": (last[1] - first[1]) / seconds if seconds > 0 else float("nan"),
        "seconds": seconds,
        "waits": waits,
        "off_rate": baseline_rate(shape, n_open, min(max(seconds, 1.0), 10.0), timeout),
    }


def baseline_rate(shape: str, n_open: int, seconds: float, timeout: float) -> float:
    """Records/s of the same job with ``every=None``, once its state is full."""
    from rivermark import Job

    source, window = _graph(shape, n_open)
    with tempfile.TemporaryDirectory() as d:
        job = Job(source, checkpoint=d, every=None)
        runner = threading.Thread(target=job.run, daemon=True)
        runner.start()
        deadline = time.monotonic() + timeout
        while window.open_windows < n_open and time.monotonic() < deadline:
            time.sleep(0.01)
        e0, t0 = source.emitted, time.perf_counter()
        time.sleep(seconds)
        rate = (source.emitted - e0) / (time.perf_counter() - t0)
        job.stop()
        runner.join(600)
    return rate


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:.2f} ({max(xs) * 1e3:.2f})" if xs else "-"


def pauses(args: argparse.Namespace) -> int:
    # the generator source is not replayable: that warning is expected here
    logging.getLogger("rivermark").setLevel(logging.ERROR)
    print(
        f"\nCheckpoint pause, {args.open:,} open windows, Job(every='1s'), background writes; "
        f"{args.checkpoints} checkpoints per run, {args.rounds} runs per shape; "
        f"load {load()}"
    )
    print()
    print(
        "| shape | run | pause ms median (max) | quiesce / views / rest ms median "
        "| bytes/checkpoint median (max) | delta / base | write s median (max) | s between barriers "
        "| records/s on / off | trigger waits |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        all_pauses: list[float] = []
        for r in range(args.rounds):
            run = pause_run(shape, args.open, args.checkpoints, args.timeout)
            infos = run["infos"]
            ps = [c.pause for c in infos]
            all_pauses += ps
            q = [p.get("quiesce", 0.0) for p in run["phases"]]
            v = [p.get("views", 0.0) for p in run["phases"]]
            rest = [p - a - b for p, a, b in zip(ps, q, v, strict=True)]
            sizes = [c.size for c in infos]
            writes = [c.duration for c in infos]
            print(
                f"| {shape} | {r + 1} | {_ms(ps)} | {statistics.median(q) * 1e3:.2f} / "
                f"{statistics.median(v) * 1e3:.2f} / {statistics.median(rest) * 1e3:.2f} "
                f"| {statistics.median(sizes):,.0f} ({max(sizes):,}) "
                f"| {sum(c.kind == 'delta' for c in infos)} / {sum(c.kind != 'delta' for c in infos)} "
                f"| {statistics.median(writes):.2f} ({max(writes):.2f}) "
                f"| {statistics.median(run['intervals']):.2f} "
                f"| {run['rate']:,.0f} / {run['off_rate']:,.0f} "
                f"({run['rate'] / run['off_rate']:.2f}) | {run['waits']} |",
                flush=True,
            )
        print(f"| {shape} | all | {_ms(all_pauses)} | | | | | | | |")
    print(f"\nload average at the end: {load()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("throughput", "pause"), default=None)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-bytewax", action="store_true", help="leave Bytewax out")
    p.add_argument("--open", type=int, default=1_000_000, help="open windows (pause)")
    p.add_argument("--shapes", nargs="*", default=["keys", "windows"], help="pause shapes")
    p.add_argument("--checkpoints", type=int, default=4, help="measured checkpoints per run")
    p.add_argument("--rounds", type=int, default=3, help="pause runs per shape")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per pause run")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    status = 0
    if args.only in (None, "throughput"):
        status = throughput(args)
    if args.only in (None, "pause"):
        status = pauses(args) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
