"""Cost of checkpoints: throughput ratio, and pause/duration/size for dict state.

Run:  .venv/bin/python benchmarks/bench_checkpoint.py            # N=2,000,000, best of 3
      .venv/bin/python benchmarks/bench_checkpoint.py --quick    # smoke run

Part 1: pipeline (a) ``map(inc).filter(even).accumulate(add).sink(noop)`` fed by
``Stream.from_iterable(range(N))`` under ``Job(node, checkpoint=tmp, every="1s")``
against the same graph under ``Job(..., every=None)`` (only the start and the
final checkpoint).  Ratio = events/s with checkpoints / events/s without.

Part 2: an ``accumulate`` holding a dict of K entries (K = 10k, 100k, 1M), fed
by an endless ``from_iterable``; ``job.checkpoint()`` is called from another
thread.  Measured per checkpoint: wall time of ``job.checkpoint()``, *pause*
(first ``source.pause()`` to last ``source.resume()``, found by wrapping the
two methods on the source instance; ``job.py`` is not modified) and the size
of the checkpoint directory of that epoch.

Part 3: the state file encoding (``rivermark.checkpoint.state.codec``, data that
cannot run code when read) against ``pickle.dumps`` of the same value: time
to encode and decode, and bytes, for a dict of ints, a dict of tuples and
a DataFrame.  Part 2's pause includes only the barrier's in-memory pickle
(the encoding runs in the background write).

``--state-only`` runs parts 2 and 3.

Not a test: it prints figures and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def inc(x: int) -> int:
    return x + 1


def even(x: int) -> bool:
    return x % 2 == 0


def add(acc: int, x: int) -> int:
    return acc + x


def noop(x: Any) -> None:
    """The benchmark sink."""


def run_pipeline(n: int, every: Any) -> tuple[float, int]:
    """Seconds to run pipeline (a) over ``range(n)`` under a Job; and the epochs written."""
    from rivermark import Job, Stream

    source = Stream.from_iterable(range(n))
    source.map(inc).filter(even).accumulate(add, start=0).sink(noop)
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(source, checkpoint=tmp, every=every)
        gc.collect()
        t0 = time.perf_counter()
        job.run()
        took = time.perf_counter() - t0
        return took, job.epoch


def throughput(n: int, repeat: int) -> dict[str, Any]:
    best_off = best_on = float("inf")
    epochs = 0
    for _ in range(repeat):  # interleaved so a slow spell hits both
        t_off, _ = run_pipeline(n, None)
        t_on, ep = run_pipeline(n, "1s")
        best_off = min(best_off, t_off)
        if t_on < best_on:
            best_on, epochs = t_on, ep
    return {
        "n": n,
        "off": n / best_off,
        "on": n / best_on,
        "ratio": best_off / best_on,
        "epochs": epochs,
        "seconds_on": best_on,
    }


class _PauseClock:
    """Wraps ``pause``/``resume`` of one source instance to time the barrier."""

    def __init__(self, source: Any) -> None:
        self.paused_at: float | None = None
        self.pauses: list[float] = []
        orig_pause, orig_resume = source.pause, source.resume

        def pause() -> None:
            self.paused_at = time.perf_counter()
            orig_pause()

        def resume() -> None:
            orig_resume()
            if self.paused_at is not None:
                self.pauses.append(time.perf_counter() - self.paused_at)
                self.paused_at = None

        source.pause = pause
        source.resume = resume


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def dict_state(k: int, rounds: int) -> dict[str, Any]:
    """Checkpoint figures for an accumulate holding a dict of ``k`` entries."""
    from rivermark import Job, Stream

    def put(acc: dict[int, int], x: int) -> dict[int, int]:
        acc[x % k] = x
        return acc

    source = Stream.from_iterable(range(10**12))
    source.accumulate(put, start={i: i for i in range(k)}).sink(noop)
    clock = _PauseClock(source)
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(source, checkpoint=tmp, every=None, keep=2)
        runner = threading.Thread(target=job.run, daemon=True)
        runner.start()
        deadline = time.monotonic() + 30
        while job.epoch < 1 and time.monotonic() < deadline:  # the start checkpoint
            time.sleep(0.01)
        durations, sizes = [], []
        first_pause = len(clock.pauses)
        for _ in range(rounds):
            t0 = time.perf_counter()
            epoch = job.checkpoint()
            durations.append(time.perf_counter() - t0)
            sizes.append(dir_size(job.store.epoch_dir(epoch)))  # type: ignore[attr-defined]
        pauses = clock.pauses[first_pause : first_pause + rounds]
        emitted = source.emitted
        job.stop()
        runner.join(60)
    return {
        "k": k,
        "duration": statistics.median(durations),
        "duration_max": max(durations),
        "pause": statistics.median(pauses),
        "pause_max": max(pauses),
        "size": statistics.median(sizes),
        "emitted": emitted,
    }


def _best(f: Any, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def codec_vs_pickle(k: int) -> list[dict[str, Any]]:
    """Encode/decode seconds and bytes of the codec and of pickle for three states."""
    import pickle

    import pandas as pd

    from rivermark.checkpoint.state import codec

    states = {
        f"dict of {k:,} ints": {i: i * 3 for i in range(k)},
        f"dict of {k:,} tuples": {i: (i, str(i)) for i in range(k)},
        f"DataFrame {k:,} x 3": pd.DataFrame(
            {"a": range(k), "b": [float(i) for i in range(k)], "c": [str(i) for i in range(k)]}
        ),
    }
    rows = []
    for name, value in states.items():
        blob, pblob = codec.dumps(value), pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        rows.append(
            {
                "state": name,
                "codec_dump": _best(lambda v=value: codec.dumps(v)),
                "pickle_dump": _best(lambda v=value: pickle.dumps(v, protocol=5)),
                "codec_load": _best(lambda b=blob: codec.loads(b)),
                "pickle_load": _best(lambda b=pblob: pickle.loads(b)),
                "codec_size": len(blob),
                "pickle_size": len(pblob),
            }
        )
    return rows


def _print_codec(k: int) -> None:
    print()
    print(f"Part 3: state file encoding against pickle, best of 5 (k = {k:,})")
    print()
    print(
        "| state | codec dump ms | pickle dump ms | codec load ms | pickle load ms | codec / pickle bytes |"
    )
    print("|---|---|---|---|---|---|")
    for r in codec_vs_pickle(k):
        print(
            f"| {r['state']} | {r['codec_dump'] * 1e3:.1f} | {r['pickle_dump'] * 1e3:.1f} "
            f"| {r['codec_load'] * 1e3:.1f} | {r['pickle_load'] * 1e3:.1f} "
            f"| {r['codec_size']:,} / {r['pickle_size']:,} |"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("-n", type=int, default=None, help="events for part 1 (default 2,000,000)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5, help="checkpoints per dict size")
    p.add_argument("--state-only", action="store_true", help="parts 2 and 3 only")
    args = p.parse_args(argv)
    n = args.n or (200_000 if args.quick else 2_000_000)
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    logging.basicConfig(level=logging.WARNING)

    import rivermark

    print(
        f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} cpus"
    )
    if not args.state_only:
        _print_throughput(n, args.repeat)
    print()
    print(f"Part 2: accumulate holding a dict, median of {args.rounds} checkpoints (max)")
    print()
    print("| dict entries | checkpoint() ms | pause ms | size |")
    print("|---|---|---|---|")
    for k in sizes:
        r = dict_state(k, args.rounds)
        print(
            f"| {k:,} | {r['duration'] * 1e3:.1f} ({r['duration_max'] * 1e3:.1f}) "
            f"| {r['pause'] * 1e3:.1f} ({r['pause_max'] * 1e3:.1f}) "
            f"| {r['size'] / 1024:,.0f} KiB |"
        )
    if _has_codec():
        _print_codec(sizes[-1])
    return 0


def _has_codec() -> bool:
    import importlib.util

    return importlib.util.find_spec("rivermark.checkpoint.state.codec") is not None


def _print_throughput(n: int, repeat: int) -> None:
    t = throughput(n, repeat)
    print()
    print(f"Part 1: pipeline (a) over range({n:,}), best of {repeat} interleaved")
    print()
    print("| run | events/s | checkpoints written |")
    print("|---|---|---|")
    print(f"| Job(every=None) | {t['off']:,.0f} | start + final |")
    print(f'| Job(every="1s") | {t["on"]:,.0f} | {t["epochs"]} ({t["seconds_on"]:.1f} s run) |')
    print(f"| ratio with/without | {t['ratio']:.3f} | goal >= 0.9 |")


if __name__ == "__main__":
    sys.exit(main())
