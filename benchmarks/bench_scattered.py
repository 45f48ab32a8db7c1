"""RocksDB keyed state with keys in scattered order: rate over time, RSS, longest stall.

Run:  .venv/bin/python benchmarks/bench_scattered.py --keys 10000000
      .venv/bin/python benchmarks/bench_scattered.py --keys 30000000 --updates 3000000
      .venv/bin/python benchmarks/bench_bigstate.py --scattered 10000000   # the same
      .venv/bin/python benchmarks/bench_scattered.py --lookups 100000 800000 3000000

``--parts``: one run with checkpoints every 3 s whose memory is sampled
twice a second, part by part; prints the parts (MiB) at the sample of the
largest RSS and the largest of each over the run: RocksDB's block cache
(memtables charged to it), its table readers, glibc's ``mallinfo2`` (in
use besides the cache, free in its arenas, mmapped chunks), Python's
allocated blocks, and the mapping's key cache, changed and handed-over keys.

``--lookups N ...``: blocks and bytes read into the block cache per point
lookup (RocksDB's statistics) in a database of N scattered keys with an
8 MiB block cache, with the job's partitioned index and filters and with a
whole filter and index per file (the options before), in the same run.

A keyed count (``accumulate`` over a ``KeyedState``) with
``Job(state="rocksdb")`` (``--state memory``: the in-memory backend) and the default ``state_cache`` (256 MiB), fed by
``from_iterable``:

* ``--keys K`` alone: K distinct keys in uniformly scattered order (record
  ``i`` counts key ``i * 2654435761 mod 2**32``, every key new: a lookup
  that misses, then a write), as user, session or device ids arrive;
* ``--keys K --updates U``: K keys loaded in increasing order, then U
  updates of existing keys in scattered order (``i * 2654435761 mod K``);
  the figures are those of the updates.

Each case runs in a process of its own, with checkpoints every 3 s and with
checkpoints off (``every=None``).  Per case: records/s over the measured
phase and in its first and last tenth (a cliff shows as a last tenth far
below the first), the lowest rate of a 10-s window (sliding by 1 s) against
the median window, the process's peak RSS (``VmHWM``), and the longest
stall of the record loop: the largest gap between two records reaching the
count (which follows the source directly), found by timing every record,
with the process's CPU time during it (every thread's: a stall with little
CPU time is the process waiting for a core of a loaded machine, one with
CPU time close to it the process's own work holding the loop or the GIL);
records per second of the process's CPU time (every thread's, RocksDB's
too: the rate on a machine not shared with other work); and, with
checkpoints on, the seconds a new job on the same machine takes to restore
the final checkpoint (``job.restore_seconds``).

Not a test: it prints figures and exits 0.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

MIX = 2654435761


def scattered(keys: int) -> Iterator[int]:
    """``keys`` distinct keys in scattered order."""
    for i in range(keys):
        yield i * MIX % (1 << 32)


def load_then_update(keys: int, updates: int) -> Iterator[int]:
    """``keys`` keys in increasing order, then ``updates`` scattered updates of them."""
    yield from range(keys)
    for i in range(updates):
        yield i * MIX % keys


class _Loop:
    """Times every record: the largest gap between two, and the records counted."""

    def __init__(self, skip: int, measured: int) -> None:
        self.n = 0
        self.skip = skip  # records of the loading phase (not measured)
        self.last = 0.0
        self.gap = 0.0
        #: the process's CPU time during the longest gap (every thread's, RocksDB's too),
        #: and its CPU time read every 64 records (a syscall: not at every record)
        self.gap_cpu = 0.0
        self.cpu_mark = 0.0
        self.started = 0.0
        self.cpu = 0.0  # the process's CPU time when the measured phase started
        #: the records at the end of the first tenth and the start of the last tenth
        self.tenths = (skip + measured // 10, skip + measured - measured // 10)
        self.at: dict[int, float] = {}

    def count(self, acc: Any, key: int) -> Any:
        now = time.perf_counter()
        self.n += 1
        if self.n > self.skip + 1:
            gap = now - self.last
            if gap > self.gap:
                self.gap = gap
                # up to 63 records before the gap are counted in too (well under 1 ms)
                self.gap_cpu = time.process_time() - self.cpu_mark
        elif self.n == self.skip + 1:
            self.started = now
            self.cpu = time.process_time()
            self.cpu_mark = self.cpu
        if not self.n & 63:
            self.cpu_mark = time.process_time()
        if self.n in self.tenths:
            self.at[self.n] = now
        self.last = now
        acc[key] = acc.get(key, 0) + 1
        return acc


def _restart(ckpt: str, state: str, records: Iterator[int], backend: str) -> float:
    """Seconds a new job on the same machine takes to restore the final checkpoint."""
    from rivermark import Job, KeyedState, Stream

    source = Stream.from_iterable(records, name="keys")
    source.accumulate(_Loop(0, 10).count, start=KeyedState(), name="counts")
    job = Job(source, checkpoint=ckpt, every=None, keep=2, state=backend, state_dir=state)
    job.stop()  # recover, then stop at once
    job.run()
    seconds = float(job.restore_seconds)
    job.state_backend.close()
    return seconds


def _peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run_case(keys: int, updates: int, every: str | None, backend: str) -> dict[str, Any]:
    """One job in this process; its figures."""
    import logging

    from rivermark import Job, KeyedState, Stream
    from rivermark.checkpoint.state.rocks import RocksKeyedState

    logging.getLogger("rivermark").setLevel(logging.ERROR)
    total = keys + updates if updates else keys
    loop = _Loop(keys if updates else 0, updates or keys)
    records = load_then_update(keys, updates) if updates else scattered(keys)
    source = Stream.from_iterable(records, name="keys")
    acc = source.accumulate(loop.count, start=KeyedState(), name="counts")
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            if loop.started:
                samples.append((time.perf_counter(), loop.n))

    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as ckpt, tempfile.TemporaryDirectory() as state:
        job = Job(source, checkpoint=ckpt, every=every, keep=2, state=backend, state_dir=state)
        job.run()
        ended = time.perf_counter()
        cpu = time.process_time() - loop.cpu
        done.set()
        checkpoints = len(job.checkpoints)
        store = acc.state
        # the record loop waited for a barrier's write (RocksDB: the key cache filled first)
        waits = store.waits if isinstance(store, RocksKeyedState) else 0
        job.state_backend.close()
        again = load_then_update(keys, updates) if updates else scattered(keys)
        restart = _restart(ckpt, state, again, backend) if every is not None else float("nan")
    measured = total - loop.skip
    took = loop.last - loop.started
    windows = []
    for i, (t0, n0) in enumerate(samples):
        for t1, n1 in samples[i:]:
            if t1 - t0 >= 10:
                windows.append((n1 - n0) / (t1 - t0))
                break
    a, b = loop.tenths
    tenth = measured // 10
    return {
        "first_tenth": tenth / (loop.at[a] - loop.started),
        "last_tenth": tenth / (loop.last - loop.at[b]),
        "keys": keys,
        "updates": updates,
        "every": every,
        "rate": measured / took,
        # records per second of the process's CPU time (every thread, RocksDB's too):
        # what the rate would be on a machine of its own, not shared with other work
        "cpu_rate": measured / cpu,
        "seconds": took,
        "min_window": min(windows) if windows else float("nan"),
        "median_window": statistics.median(windows) if windows else float("nan"),
        "peak_rss": _peak_rss(),
        "stall": loop.gap,
        "stall_cpu": loop.gap_cpu,
        "checkpoints": checkpoints,
        "stop_seconds": ended - loop.last,
        "restart": restart,
        "waits": waits,
    }


def lookups(n: int, partitioned: bool, cache: int = 8 << 20) -> tuple[float, float, float]:
    """Blocks and bytes read per lookup, and microseconds, in a database of ``n`` scattered keys.

    ``partitioned``: the job's table options; else RocksDB's whole filter and
    index per file (the options before), both with the same block cache.
    """
    import random
    import shutil

    import rocksdict

    from rivermark.checkpoint.state import codec
    from rivermark.checkpoint.state.rocks.mapping import RocksSettings, open_db

    settings = RocksSettings(cache=cache, statistics=True)
    if not partitioned:

        def whole() -> Any:
            t = rocksdict.BlockBasedOptions()
            t.set_block_cache(settings._shared["cache"])  # noqa: SLF001 - the settings' cache
            t.set_bloom_filter(10, False)
            t.set_cache_index_and_filter_blocks(True)
            t.set_pin_l0_filter_and_index_blocks_in_cache(True)
            return t

        settings.table_options = whole  # type: ignore[method-assign]
    where = tempfile.mkdtemp()
    db = open_db(os.path.join(where, "db"), settings)
    rng = random.Random(n)
    keys = list(range(n))
    rng.shuffle(keys)
    for i in range(0, n, 20_000):
        batch = rocksdict.WriteBatch(raw_mode=True)
        for k in keys[i : i + 20_000]:
            batch.put(codec.pack(k * 7919), codec.pack(k))
        db.write(batch, settings.write_options())
    db.flush(True)
    db.compact_range(None, None)
    before = settings.statistics_counts()
    count = 20_000
    probes = [codec.pack(rng.randrange(2 * n) * 7919) for _ in range(count)]  # half absent
    t0 = time.perf_counter()
    for key in probes:
        db.get(key)
    took = time.perf_counter() - t0
    after = settings.statistics_counts()
    db.close()
    shutil.rmtree(where, ignore_errors=True)

    def grew(name: str) -> int:
        return after.get(name, 0) - before.get(name, 0)

    read = sum(grew(f"rocksdb.block.cache.{k}.bytes.insert") for k in ("index", "filter", "data"))
    return grew("rocksdb.block.cache.miss") / count, read / count, took / count * 1e6


def print_lookups(sizes: list[int]) -> None:
    print("| keys | table options | blocks read / lookup | bytes read / lookup | us / lookup |")
    print("|---|---|---|---|---|")
    for n in sizes:
        for partitioned in (False, True):
            blocks, read, us = lookups(n, partitioned)
            name = "partitioned (now)" if partitioned else "whole filter and index per file"
            print(f"| {n:,} | {name} | {blocks:.2f} | {read:,.0f} | {us:.1f} |", flush=True)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks")
        + ("uordblks", "fordblks", "keepcost")
    ]


def _rss() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def parts(keys: int) -> dict[str, Any]:
    """Memory part by part (MiB) at the largest RSS of a scattered-key run, and the maxima."""
    import logging

    from rivermark import Job, KeyedState, Stream
    from rivermark.checkpoint.state.rocks import RocksKeyedState

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    logging.getLogger("rivermark").setLevel(logging.ERROR)
    loop = _Loop(0, keys)
    source = Stream.from_iterable(scattered(keys), name="keys")
    acc = source.accumulate(loop.count, start=KeyedState(), name="counts")
    samples: list[dict[str, float | int]] = []
    done = threading.Event()
    jobs: list[Job] = []
    mib = 1 << 20

    def sample() -> None:
        while not done.wait(0.5):
            store = acc.state
            if not jobs or not isinstance(store, RocksKeyedState):
                continue
            shared = jobs[0].state_backend.settings._shared  # noqa: SLF001 - its one cache
            db, m, frozen = store.db, libc.mallinfo2(), store._frozen  # noqa: SLF001
            cache = shared["cache"].get_usage() / mib
            samples.append(
                {
                    "RSS (sampled)": _rss(),
                    "block cache and memtables": cache,
                    "memtables": (db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
                    / mib,
                    "table readers": (
                        db.property_int_value("rocksdb.estimate-table-readers-mem") or 0
                    )
                    / mib,
                    "malloc in use besides the cache": m.uordblks / mib - cache,
                    "malloc free in arenas": m.fordblks / mib,
                    "malloc mmapped": m.hblkhd / mib,
                    "python blocks": sys.getallocatedblocks(),
                    "key cache": store.cached(),
                    "changed keys": store.pending_changes(),
                    "handed-over keys": 0 if frozen is None else len(frozen.dirty),
                }
            )

    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as ckpt, tempfile.TemporaryDirectory() as state:
        job = Job(source, checkpoint=ckpt, every="3s", keep=2, state="rocksdb", state_dir=state)
        jobs.append(job)
        job.run()
        done.set()
        job.state_backend.close()
    if not samples:
        raise SystemExit(
            "bench_scattered --parts: the run ended before its first sample; more --keys"
        )
    peak = max(samples, key=lambda x: x["RSS (sampled)"])
    return {
        "peak_rss": _peak_rss() / mib,
        "at_peak": peak,
        "max": {k: max(x[k] for x in samples) for k in peak},
    }


def when(every: str, r: dict[str, Any]) -> str:
    """The checkpoints column: the interval, how many, and the loop's waits for a write."""
    if every == "off":
        return "off"
    return f"every {every} ({r['checkpoints']} taken, the loop waited {r['waits']} times)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=10_000_000)
    p.add_argument("--updates", type=int, default=0)
    p.add_argument("--every", nargs="*", default=["3s", "off"], help="checkpoint intervals")
    p.add_argument(
        "--lookups", type=int, nargs="*", default=None, help="blocks per lookup at these sizes"
    )
    p.add_argument("--state", default="rocksdb", choices=["rocksdb", "memory"])
    p.add_argument("--case", default=None, help=argparse.SUPPRESS)
    p.add_argument("--parts", action="store_true", help="memory part by part (one run)")
    args = p.parse_args(argv)
    if args.parts:
        r = parts(args.keys)
        print(
            f"{args.keys:,} scattered keys, checkpoint every 3 s: peak RSS {r['peak_rss']:,.0f} MiB"
        )
        print("| part | at the largest sampled RSS | largest over the run |")
        print("|---|---|---|")
        for k, v in r["at_peak"].items():
            f = ",.1f" if isinstance(v, float) else ",d"  # MiB, or a count
            print(f"| {k} | {v:{f}} | {r['max'][k]:{f}} |")
        return 0
    if args.lookups is not None:
        print_lookups(args.lookups or [100_000, 800_000, 3_000_000])
        return 0
    if args.case is not None:
        every = None if args.case == "off" else args.case
        print(json.dumps(run_case(args.keys, args.updates, every, args.state)))
        return 0
    import rivermark

    print(
        f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus, state={args.state!r}, state_cache 256 MiB (default)"
    )
    print()
    print(
        "| shape | checkpoints | records/s | first / last tenth | min 10-s window / median "
        "| records per CPU second | peak RSS MiB | longest stall ms (process CPU in it) "
        "| restart s | seconds "
        "| load average (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    shape = (
        f"{args.keys:,} keys in order, then {args.updates:,} scattered updates"
        if args.updates
        else f"{args.keys:,} distinct keys, scattered order"
    )
    for every in args.every:
        cmd = [sys.executable, __file__, "--keys", str(args.keys), "--updates", str(args.updates)]
        cmd += ["--state", args.state]
        res = subprocess.run([*cmd, "--case", every], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            print(f"| {shape} | {every} | failed: {res.stderr.strip()[-300:]} |")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        ratio = r["min_window"] / r["median_window"]
        print(
            f"| {shape} | {when(every, r)} | {r['rate']:,.0f} "
            f"| {r['first_tenth']:,.0f} / {r['last_tenth']:,.0f} "
            f"| {r['min_window']:,.0f} / {r['median_window']:,.0f} ({ratio:.2f}) "
            f"| {r['cpu_rate']:,.0f} | {r['peak_rss'] / (1 << 20):,.0f} | {r['stall'] * 1e3:,.1f} ({r['stall_cpu'] * 1e3:,.0f}) "
            f"| {r['restart']:.2f} | {r['seconds']:,.0f} | {os.getloadavg()[0]:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
