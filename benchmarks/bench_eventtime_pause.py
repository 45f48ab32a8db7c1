"""Checkpoint pause of an event-time window holding 1,000,000 open windows.

Run:  .venv/bin/python benchmarks/bench_eventtime_pause.py [--rounds 3] [--checkpoints 4]
      .venv/bin/python benchmarks/bench_eventtime_pause.py --open 100000 --rounds 1   # smoke run

A ``Job(every="1s")`` (background writes, a local directory) whose
``tumbling_window`` count holds 1,000,000 open windows, of two shapes:
``keys``, 1M keys in one window each (times stay inside ``[0, 10)``, so no
window closes; a record adds to one), and ``windows``, 1,000 keys x 1,000
windows (one record per key and window, in its middle, ``grace`` of 1,000
windows: every record opens one window and, once the state is full,
closes one).  An endless source fills the state, then the job runs until
``--checkpoints`` interval checkpoints have been taken with the state full.

Per checkpoint: the pause (the time the sources were held, the manifest's
``timing``, read from ``job.checkpoints``), how it splits into quiescing
(``Job._quiesce``), taking the state's views (``Job._snapshot_states``) and
the rest (positions, the manifest, resuming), the bytes written, whether
it was a delta or a new base, the write's duration in the background, and
the interval between barriers; per run, the rate while measured against
the same job without interval checkpoints (``every=None``) run just after,
how often a trigger waited for the write in flight, the garbage
collector's full (generation 2) collections and whether one fell inside a
measured pause.  The final checkpoint (written with the sources paused,
after ``job.stop()``) is left out of the pauses and shown on its own, with
the time ``job.stop()`` took (from the call to the job's end); the interval
between completed checkpoints (when each write finished) beside the interval
between barriers.  The goals each run is held against are printed after the
table: records/s with checkpoints >= 0.9 of without, a checkpoint completed
at least every 2 s, the final checkpoint <= 1 s, no generation-2 collection
above 100 ms.  Last, what encoding the open windows whole costs, in the
state files' columns, in the columns of tuples earlier versions wrote, and
in pickle, in the same run.

Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from bench_eventtime import SIZE, event_time, key, load  # noqa: E402


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
        cycle = job._cycle  # the job's checkpoint protocol (rivermark.checkpoint.protocol.cycle)
        pause, quiesce, snapshot = source.pause, cycle.quiesce, cycle.snapshot_states

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

        complete = cycle.complete
        #: per epoch, when its write completed (perf_counter)
        self.done: dict[int, float] = {}

        async def timed_complete(p: Any) -> None:
            await complete(p)
            self.done[p.epoch] = time.perf_counter()

        source.pause = timed_pause
        cycle.quiesce = timed_quiesce
        cycle.snapshot_states = timed_snapshot
        cycle.complete = timed_complete


class _FullCollections:
    """The generation-2 garbage collections while it is installed: (start, seconds).

    Also the CPU time of each (the collecting thread's): on a loaded machine
    the wall time of a collection includes the time its thread waited for a
    CPU, the CPU time does not.
    """

    def __init__(self) -> None:
        self.runs: list[tuple[float, float]] = []
        self.cpu: list[float] = []
        self._started = self._cpu = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started, self._cpu = time.perf_counter(), time.thread_time()
        else:
            self.runs.append((self._started, time.perf_counter() - self._started))
            self.cpu.append(time.thread_time() - self._cpu)

    def close(self) -> None:
        gc.callbacks.remove(self._note)


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
        collections = _FullCollections()
        runner = threading.Thread(target=job.run, daemon=True)
        runner.start()
        deadline = time.monotonic() + timeout

        def full() -> list[Any]:
            return [c for c in list(job.checkpoints) if barriers.at.get(c.epoch, (0,))[0] >= n_open]

        while len(full()) < wanted and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.05)
        taken, waits = full()[:wanted], job.checkpoint_waits
        t_stop = time.perf_counter()
        job.stop()
        runner.join(600)
        stop_seconds = time.perf_counter() - t_stop
        collections.close()
        final = job.checkpoints[-1].pause  # written with the sources paused
    if len(taken) < 2:
        raise SystemExit(
            f"pause ({shape}): {len(taken)} checkpoints with {n_open:,} windows open within "
            f"{timeout:g} s; pass a larger --timeout"
        )
    first, last = barriers.at[taken[0].epoch], barriers.at[taken[-1].epoch]
    seconds = last[2] - first[2]
    held = [(barriers.at[c.epoch][2], barriers.at[c.epoch][2] + c.pause) for c in taken]
    return {
        "final": final,
        "stop": stop_seconds,
        "gc": [t for _, t in collections.runs],
        "gc_cpu": collections.cpu,
        "gc_in_pause": sum(any(a <= g < b for a, b in held) for g, _ in collections.runs),
        "infos": taken,
        "phases": [barriers.phases.get(c.epoch, {}) for c in taken],
        "intervals": [
            barriers.at[b.epoch][2] - barriers.at[a.epoch][2] for a, b in itertools.pairwise(taken)
        ],
        "completed": [
            barriers.done[b.epoch] - barriers.done[a.epoch]
            for a, b in itertools.pairwise(taken)
            if a.epoch in barriers.done and b.epoch in barriers.done
        ],
        "rate": (last[1] - first[1]) / seconds if seconds > 0 else float("nan"),
        "seconds": seconds,
        "waits": waits,
        "encoding": encoding(window),
        "off_rate": baseline_rate(shape, n_open, min(max(seconds, 1.0), 10.0), timeout),
    }


def encoding(window: Any) -> dict[str, float]:
    """Seconds and bytes to encode the window's open windows whole: the state codec, pickle."""
    import pickle

    from rivermark.checkpoint.state import codec

    try:
        from rivermark.checkpoint.state.columns import Columns

        by_columns = Columns.of
    except ImportError:  # a tree from before the columns (a comparison run)
        by_columns = codec.Table.of

    content = dict(window.get_state()["open"])
    t0 = time.perf_counter()
    blob = codec.dumps({"open": by_columns(content)})  # what a checkpoint writes
    t1 = time.perf_counter()
    pickled = pickle.dumps({"open": content}, protocol=pickle.HIGHEST_PROTOCOL)
    t2 = time.perf_counter()
    table = codec.dumps({"open": codec.Table.of(content)})  # what earlier versions wrote
    t3 = time.perf_counter()
    return {
        "windows": len(content),
        "codec": t1 - t0,
        "codec_bytes": len(blob),
        "pickle": t2 - t1,
        "pickle_bytes": len(pickled),
        "table": t3 - t2,
        "table_bytes": len(table),
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
        rate = float(source.emitted - e0) / (time.perf_counter() - t0)
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
        "| s between completed (max) | records/s on / off | trigger waits "
        "| final checkpoint s (stop() s) "
        "| gen-2 GCs: n, max ms (CPU ms), in a pause |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    encoded: list[str] = []
    goals: list[str] = []
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
                f"| {statistics.median(run['completed']):.2f} ({max(run['completed']):.2f}) "
                f"| {run['rate']:,.0f} / {run['off_rate']:,.0f} "
                f"({run['rate'] / run['off_rate']:.2f}) | {run['waits']} | {run['final']:.2f} ({run['stop']:.2f}) "
                f"| {len(run['gc'])}, {max(run['gc'], default=0.0) * 1e3:.0f} "
                f"({max(run['gc_cpu'], default=0.0) * 1e3:.0f} CPU), {run['gc_in_pause']} |",
                flush=True,
            )
            goals.append(
                f"{shape} run {r + 1}: on/off {run['rate'] / run['off_rate']:.2f} (>= 0.9), "
                f"completed every {max(run['completed'], default=float('nan')):.2f} s at most "
                f"(<= 2), final {run['final']:.2f} s (<= 1), "
                f"max gen-2 {max(run['gc'], default=0.0) * 1e3:.0f} ms, "
                f"{max(run['gc_cpu'], default=0.0) * 1e3:.0f} ms CPU (<= 100)"
            )
        print(f"| {shape} | all | {_ms(all_pauses)} | | | | | | | | | | |")
        e = run["encoding"]
        encoded.append(
            f"{shape}: {e['windows']:,} windows, codec {e['codec']:.2f} s "
            f"({e['codec_bytes']:,} bytes), tuple columns {e['table']:.2f} s "
            f"({e['table_bytes']:,} bytes), pickle {e['pickle']:.2f} s ({e['pickle_bytes']:,} bytes)"
        )
    print("\nAgainst the goals:")
    for line in goals:
        print(f"- {line}")
    print("\nEncoding the open windows whole in the writer thread's format (last run):")
    for line in encoded:
        print(f"- {line}")
    print(f"\nload average at the end: {load()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--open", type=int, default=1_000_000, help="open windows")
    p.add_argument("--shapes", nargs="*", default=["keys", "windows"], help="keys, windows")
    p.add_argument("--checkpoints", type=int, default=4, help="measured checkpoints per run")
    p.add_argument("--rounds", type=int, default=3, help="runs per shape")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run at most")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    return pauses(args)


if __name__ == "__main__":
    sys.exit(main())
