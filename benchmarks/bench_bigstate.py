"""Checkpoints of large state: pause, bytes written, throughput, restore time.

Run:  .venv/bin/python benchmarks/bench_bigstate.py                 # 10k/100k/1M and 3M keys
      .venv/bin/python benchmarks/bench_bigstate.py --quick         # 10k and 100k keys
      .venv/bin/python benchmarks/bench_bigstate.py --sizes --keyed 10000000 --modes keyed

Every case is a keyed running count: an ``accumulate`` whose state holds K
keys, all loaded before the job starts (``start=``), fed by an endless
``from_iterable`` whose records touch a hot set of K/100 keys (about 1% of
the keys change between two checkpoints), with a checkpoint every second
(``Job(every="1s")``) for ``--seconds`` seconds, against the same job
without interval checkpoints (``every=None``) in the same run.

Modes (``--modes``, all by default; a mode this version lacks is skipped):

* ``blocking``: a plain ``dict`` state, the whole state pickled and written
  while the sources are paused (``Job(background=False)``, today's protocol);
* ``background``: a plain ``dict``, pickled at the barrier but written in the
  background (``Job(background=True)``);
* ``keyed``: ``rivermark.KeyedState`` with background writes: a checkpoint
  writes only the keys changed since the previous one.

Per case: *pause* (first ``source.pause()`` to the last ``source.resume()``,
found by wrapping the two methods on the source instance), bytes of state
written per checkpoint (and per changed key), throughput with checkpoints on
as a ratio of off (best of ``--repeat`` runs each, interleaved), and *restore*: wall time of a fresh job's recovery from
the last checkpoint (``job.restore_seconds``).

With ``--compact-every N`` (keyed mode) the job writes a new base after N
deltas (``Job(compact_every=N)``; default 20, more than a short run
writes), and a second table reports what a compaction costs: the time the
worker thread spends reading the chain back, applying the deltas and
pickling the new base (``KeyedView.serialise``, timed by wrapping it), the
whole checkpoint's write (``CheckpointInfo.duration``), the pipeline's rate
while the compaction runs as a ratio of the rate with checkpoints off, the
pauses of the barriers taken meanwhile, and how often a trigger waited for
the write in flight (``checkpoint_waits``).

With ``--backends K [K ...]`` it compares the two keyed state backends on
the same keyed running count over K keys, each case in a process of its
own (so that its memory is its own): ``memory`` (``KeyedState``, loaded
with ``start=``) and ``rocksdb`` (``Job(state="rocksdb", state_cache=
--cache)``, loaded by a first job that sets every key, then copied by hard
links for each run).  Per case: the process's peak RSS (``VmHWM``) and its
largest RSS while the measured jobs run, the rate with checkpoints off and
the ratio on/off, the pause, the bytes a checkpoint writes (for RocksDB:
the shared files uploaded plus the state files) per checkpoint and per
changed key, and the restore time of a new job on the same machine (the
local state directory kept) and, for RocksDB, on a fresh machine (an empty
state directory: every file fetched from the store).

With ``--scattered K`` it runs ``bench_scattered.py --keys K`` (RocksDB,
K distinct keys in scattered order: rate over time, peak RSS, longest stall
of the record loop, checkpoints every 3 s against off); see that module.

Not a test: it prints figures and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import itertools
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)


def noop(x: Any) -> None:
    """The benchmark sink."""


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


class _SerialiseClock:
    """Wraps ``KeyedView.serialise`` (the worker thread's part of a keyed checkpoint)."""

    def __init__(self, source: Any) -> None:
        from rivermark.checkpoint.state import keyed

        #: (a compaction?, seconds, records the source emitted meanwhile, bytes, start)
        self.runs: list[tuple[bool, float, int, int, float]] = []
        self._cls = keyed.KeyedView
        self._orig = orig = keyed.KeyedView.serialise

        def serialise(view: Any) -> bytes:
            e0, t0 = source.emitted, time.perf_counter()
            blob = orig(view)
            took = time.perf_counter() - t0
            self.runs.append(
                (view.compact_from is not None, took, source.emitted - e0, len(blob), t0)
            )
            return blob

        self._cls.serialise = serialise  # type: ignore[method-assign]

    def close(self) -> None:
        self._cls.serialise = self._orig  # type: ignore[method-assign]


def hot_keys(k: int) -> Iterator[int]:
    """Endless keys, cycling over a hot set of k/100 keys spread over range(k)."""
    hot = max(1, k // 100)
    stride = k // hot
    i = 0
    while True:
        yield (i % hot) * stride
        i += 1


def count(acc: Any, key: int | range) -> Any:
    """The keyed running count (updates the mapping in place and returns it).

    A ``range`` of keys (the RocksDB case's loading job) counts each once.
    """
    if type(key) is range:
        acc.update(zip(key, itertools.repeat(1)))
        return acc
    acc[key] = acc.get(key, 0) + 1
    return acc


def modes_available() -> list[str]:
    import rivermark
    from rivermark import Job

    if "background" not in inspect.signature(Job).parameters:
        return ["blocking"]
    return ["blocking", "background", *(["keyed"] if hasattr(rivermark, "KeyedState") else [])]


def _job_kwargs(mode: str) -> dict[str, Any]:
    from rivermark import Job

    if "background" not in inspect.signature(Job).parameters:
        return {}
    return {"background": mode != "blocking"}


def _start_state(k: int, mode: str) -> Any:
    initial = dict.fromkeys(range(k), 0)
    if mode == "keyed":
        import rivermark

        return rivermark.KeyedState(initial)
    return initial


def run_case(
    k: int, mode: str, every: Any, seconds: float, ckpt: str, compact_every: int | None = None
) -> dict[str, Any]:
    """Run the keyed count over ``k`` keys for ``seconds``; figures of that run."""
    from rivermark import Job, Stream

    source = Stream.from_iterable(hot_keys(k), name="keys")
    source.accumulate(count, start=_start_state(k, mode), name="counts").sink(noop)
    clock = _PauseClock(source)
    kwargs = _job_kwargs(mode)
    if compact_every is not None and mode == "keyed":
        kwargs["compact_every"] = compact_every
    serialise = _SerialiseClock(source) if mode == "keyed" and every is not None else None
    job = Job(source, checkpoint=ckpt, every=every, keep=3, **kwargs)
    gc.collect()
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 600
    while not source.started and time.monotonic() < deadline:  # after the start checkpoint
        time.sleep(0.005)
    e0, t0 = source.emitted, time.perf_counter()
    first = len(job.checkpoints)
    time.sleep(seconds)
    emitted, took = source.emitted - e0, time.perf_counter() - t0
    infos = list(job.checkpoints)[first:]
    pauses = clock.pauses[1 : 1 + len(infos)] if every is not None else []
    stopped_at = time.perf_counter()
    job.stop()
    runner.join(600)
    if serialise is not None:
        serialise.close()
    return {
        "compactions": _compactions(serialise, infos, stopped_at) if serialise else [],
        "rate": emitted / took,
        "pauses": pauses,
        "sizes": [i.size for i in infos],
        "epochs": len(infos),
        "start_size": job.checkpoints[0].size if job.checkpoints else 0,
        "backpressure": getattr(job, "checkpoint_waits", 0),
    }


def _compactions(
    serialise: _SerialiseClock, infos: list[Any], stopped_at: float
) -> list[dict[str, Any]]:
    """Each compaction while the job ran: worker seconds, rate meanwhile, its checkpoint's write."""
    out = []
    for compact, took, emitted, size, t0 in serialise.runs:
        if not compact or t0 + took > stopped_at:  # not the final checkpoint's, after the stop
            continue
        writes = [i.duration for i in infos if i.size == size]
        out.append(
            {
                "seconds": took,
                "rate": emitted / took if took > 0 else float("nan"),
                "write": writes[0] if writes else float("nan"),
                "size": size,
                "t0": t0,
            }
        )
    return out


def restore_seconds(k: int, mode: str, ckpt: str) -> float:
    """Wall time of a fresh job's recovery from ``ckpt`` (same graph)."""
    from rivermark import Job, Stream

    source = Stream.from_iterable(hot_keys(k), name="keys")
    source.accumulate(count, start=_start_state(0, mode), name="counts").sink(noop)
    job = Job(source, checkpoint=ckpt, every=None, keep=3, **_job_kwargs(mode))
    job.stop()  # recover, then stop at once with a final checkpoint
    job.run()
    return float(getattr(job, "restore_seconds", float("nan")))


def case(
    k: int, mode: str, seconds: float, repeat: int, compact_every: int | None = None
) -> dict[str, Any]:
    offs, ons = [], []
    for _ in range(repeat):  # interleaved, so that a slow spell of the machine hits both
        with tempfile.TemporaryDirectory() as off_dir, tempfile.TemporaryDirectory() as on_dir:
            offs.append(run_case(k, mode, None, seconds, off_dir))
            ons.append(run_case(k, mode, "1s", seconds, on_dir, compact_every))
            restore = restore_seconds(k, mode, on_dir)
    off = max(offs, key=lambda r: r["rate"])
    on = max(ons, key=lambda r: r["rate"])
    on["pauses"] = [p for r in ons for p in r["pauses"]]
    on["sizes"] = [x for r in ons for x in r["sizes"]]
    changed = min(max(1, k // 100), int(on["rate"]))  # hot keys touched between checkpoints
    size = statistics.median(on["sizes"]) if on["sizes"] else float("nan")
    return {
        "k": k,
        "mode": mode,
        "pause": statistics.median(on["pauses"]) if on["pauses"] else float("nan"),
        "pause_max": max(on["pauses"]) if on["pauses"] else float("nan"),
        "size": size,
        "per_key": size / changed,
        "start_size": on["start_size"],
        "ratio": on["rate"] / off["rate"],
        "rate_off": off["rate"],
        "epochs": on["epochs"],
        "restore": restore,
        "backpressure": sum(r["backpressure"] for r in ons),
        "compactions": [c for r in ons for c in r["compactions"]],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sizes", type=int, nargs="*", default=None, help="state sizes (keys)")
    p.add_argument("--keyed", type=int, nargs="*", default=None, help="large keyed counts")
    p.add_argument("--modes", nargs="*", default=None)
    p.add_argument("--seconds", type=float, default=4.0, help="run time per job")
    p.add_argument("--repeat", type=int, default=2, help="runs per case (best rate)")
    p.add_argument(
        "--compact-every", type=int, default=None, help="keyed mode: a new base after N deltas"
    )
    p.add_argument(
        "--backends", type=int, nargs="*", default=None, help="memory vs rocksdb at these keys"
    )
    p.add_argument(
        "--only", nargs="*", default=["memory", "rocksdb"], help="with --backends: which ones"
    )
    p.add_argument("--cache", default="256MiB", help="with --backends: the RocksDB cache")
    p.add_argument("--scattered", type=int, default=None, help="RocksDB, K keys in scattered order")
    p.add_argument("--case", nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.scattered is not None:
        here = os.path.dirname(os.path.abspath(__file__))
        cmd = [sys.executable, os.path.join(here, "bench_scattered.py")]
        return subprocess.call([*cmd, "--keys", str(args.scattered)])
    if args.case is not None:
        return backend_case(int(args.case[0]), args.case[1], args.seconds, args.cache)
    if args.backends is not None:
        return compare_backends(args)
    default = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    sizes = args.sizes if args.sizes is not None else default
    keyed = args.keyed if args.keyed is not None else ([] if args.quick else [3_000_000])
    modes = args.modes or modes_available()
    logging.basicConfig(level=logging.WARNING)
    # the generator source is not replayable: that warning is expected here
    logging.getLogger("rivermark").setLevel(logging.ERROR)

    import rivermark

    print(
        f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus, {args.seconds:g} s per run, checkpoint every 1 s"
    )
    print()
    print(
        "| keys | mode | pause ms median (max) | bytes/checkpoint | bytes/changed key "
        "| start checkpoint | throughput on/off | events/s off | restore s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    results = []
    for k in [*sizes, *keyed]:
        for mode in modes:
            r = case(k, mode, args.seconds, args.repeat, args.compact_every)
            results.append(r)
            print(
                f"| {k:,} | {mode} | {r['pause'] * 1e3:.1f} ({r['pause_max'] * 1e3:.1f}) "
                f"| {r['size']:,.0f} | {r['per_key']:,.1f} | {r['start_size']:,} "
                f"| {r['ratio']:.3f} | {r['rate_off']:,.0f} | {r['restore']:.2f} |",
                flush=True,
            )
    if args.compact_every is not None:
        print_compactions(results, args.compact_every)
    print(f"\nload average: {os.getloadavg()}")
    return 0


def print_compactions(results: list[dict[str, Any]], every: int) -> None:
    print()
    print(f"Compactions (keyed mode, compact_every={every}), median (max) over the runs:")
    print()
    print(
        "| keys | compactions | base bytes | worker s | checkpoint write s "
        "| events/s during / off | trigger waits |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        cs = r["compactions"]
        if r["mode"] != "keyed" or not cs:
            continue

        def med(f: str, cs: list[dict[str, Any]] = cs) -> str:
            xs = [c[f] for c in cs]
            return f"{statistics.median(xs):.2f} ({max(xs):.2f})"

        during = [c["rate"] / r["rate_off"] for c in cs]
        print(
            f"| {r['k']:,} | {len(cs)} | {statistics.median(c['size'] for c in cs):,.0f} "
            f"| {med('seconds')} | {med('write')} "
            f"| {statistics.median(during):.2f} ({min(during):.2f} min) | {r['backpressure']} |",
            flush=True,
        )


# ---------------------------------------------------------------------- backends
def _rss() -> tuple[int, int]:
    """This process's resident set size now and at its peak (VmRSS, VmHWM), bytes."""
    now = peak = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return now, peak


class _RssWatch:
    """The largest RSS seen while it runs (sampled every 50 ms)."""

    def __init__(self) -> None:
        self.top = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.top = max(self.top, _rss()[0])

    def close(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.top, _rss()[0])


def _link_copy(src: str, dst: str) -> None:
    """A copy of directory ``src`` whose files are hard links (immutable files, no bytes)."""
    shutil.copytree(src, dst, copy_function=os.link)


def _backend_job(
    source: Any, ckpt: str, state_dir: str, backend: str, cache: str, **kw: Any
) -> Any:
    from rivermark import Job

    if backend == "rocksdb":
        kw.update(state="rocksdb", state_dir=state_dir, state_cache=cache)
    return Job(source, checkpoint=ckpt, keep=3, **kw)


def _backend_run(
    k: int, backend: str, every: Any, seconds: float, ckpt: str, state_dir: str, cache: str
) -> dict[str, Any]:
    """One measured job: the hot-key count over the loaded state, for ``seconds``."""
    from rivermark import KeyedState, Stream
    from rivermark.checkpoint import LocalDirectoryStore

    source = Stream.from_iterable(hot_keys(k), name="keys")
    start = KeyedState() if backend == "rocksdb" else KeyedState(dict.fromkeys(range(k), 0))
    source.accumulate(count, start=start, name="counts").sink(noop)
    del start
    clock = _PauseClock(source)
    uploaded: list[int] = []  # the bytes of the shared files each checkpoint uploads
    local_orig = LocalDirectoryStore.write_shared

    def counting(store: LocalDirectoryStore, digest: str, data: bytes) -> None:
        uploaded.append(len(data))
        local_orig(store, digest, data)

    LocalDirectoryStore.write_shared = counting  # type: ignore[method-assign]
    job = _backend_job(source, ckpt, state_dir, backend, cache, every=every)
    watch = _RssWatch()
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 3600
    while not source.started and time.monotonic() < deadline:
        time.sleep(0.005)
    uploaded.clear()
    e0, t0 = source.emitted, time.perf_counter()
    first = len(job.checkpoints)
    time.sleep(seconds)
    emitted, took = source.emitted - e0, time.perf_counter() - t0
    infos = list(job.checkpoints)[first:]
    sent = sum(uploaded)
    pauses = clock.pauses[1 : 1 + len(infos)] if every is not None else []
    job.stop()
    runner.join(3600)
    LocalDirectoryStore.write_shared = local_orig  # type: ignore[method-assign]
    return {
        "rate": emitted / took,
        "pauses": pauses,
        "bytes": (sent + sum(i.size for i in infos)) / max(1, len(infos)),
        "epochs": len(infos),
        "rss_run": watch.close(),
    }


def _backend_restore(k: int, backend: str, ckpt: str, state_dir: str, cache: str) -> float:
    from rivermark import KeyedState, Stream

    source = Stream.from_iterable(hot_keys(k), name="keys")
    source.accumulate(count, start=KeyedState(), name="counts").sink(noop)
    job = _backend_job(source, ckpt, state_dir, backend, cache, every=None)
    job.stop()  # recover, then stop at once with a final checkpoint
    job.run()
    return float(job.restore_seconds)


def backend_case(k: int, backend: str, seconds: float, cache: str) -> int:
    """One (keys, backend) case in this process; prints one JSON line."""
    from rivermark import KeyedState, Stream

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("rivermark").setLevel(logging.ERROR)
    out: dict[str, Any] = {"k": k, "backend": backend}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        base_ck, base_sd = f"{tmp}/base-ckpt", f"{tmp}/base-state"
        if backend == "rocksdb":
            t0 = time.perf_counter()
            chunks = [range(i, min(k, i + 10_000)) for i in range(0, k, 10_000)]
            source = Stream.from_iterable(chunks, name="keys")
            # the same graph as the measured jobs (the restore checks it): every key once
            source.accumulate(count, start=KeyedState(), name="counts").sink(noop)
            _backend_job(source, base_ck, base_sd, backend, cache, every=None).run()
            out["load_s"] = time.perf_counter() - t0
            out["rss_after_load"] = _rss()[0]
            del source
        gc.collect()
        runs = {}
        for name, every in (("off", None), ("on", "1s")):
            ck, sd = f"{tmp}/{name}-ckpt", f"{tmp}/{name}-state"
            if backend == "rocksdb":
                _link_copy(base_ck, ck)
                _link_copy(base_sd, sd)
            runs[name] = _backend_run(k, backend, every, seconds, ck, sd, cache)
            gc.collect()
        on, off = runs["on"], runs["off"]
        changed = min(max(1, k // 100), int(on["rate"]))
        out.update(
            rate_off=off["rate"],
            ratio=on["rate"] / off["rate"],
            pause=statistics.median(on["pauses"]) if on["pauses"] else float("nan"),
            pause_max=max(on["pauses"]) if on["pauses"] else float("nan"),
            bytes=on["bytes"],
            per_key=on["bytes"] / changed,
            epochs=on["epochs"],
            rss_run=max(on["rss_run"], off["rss_run"]),
        )
        out["restore_local"] = _backend_restore(
            k, backend, f"{tmp}/on-ckpt", f"{tmp}/on-state", cache
        )
        if backend == "rocksdb":
            out["restore_fresh"] = _backend_restore(
                k, backend, f"{tmp}/on-ckpt", f"{tmp}/fresh-state", cache
            )
        out["rss_peak"] = _rss()[1]
    print(json.dumps(out), flush=True)
    return 0


def compare_backends(args: argparse.Namespace) -> int:
    import rivermark

    print(
        f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus, {args.seconds:g} s per run, checkpoint every 1 s, "
        f"RocksDB cache {args.cache}"
    )
    print()
    print(
        "| keys | backend | load s | peak RSS MiB | RSS in run MiB | events/s off | on/off "
        "| pause ms median (max) | bytes/checkpoint | bytes/changed key "
        "| restore same machine s | restore fresh machine s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    mib = 1 << 20
    for k in args.backends:
        for backend in args.only:
            cmd = [
                sys.executable, __file__, "--case", str(k), backend,
                "--seconds", str(args.seconds), "--cache", args.cache,
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
                print(f"| {k:,} | {backend} | failed (exit {proc.returncode}): {tail} |")
                continue
            r = json.loads(lines[-1])
            print(
                f"| {k:,} | {backend} | {r.get('load_s', float('nan')):.0f} "
                f"| {r['rss_peak'] / mib:,.0f} | {r['rss_run'] / mib:,.0f} "
                f"| {r['rate_off']:,.0f} | {r['ratio']:.3f} "
                f"| {r['pause'] * 1e3:.1f} ({r['pause_max'] * 1e3:.1f}) "
                f"| {r['bytes']:,.0f} | {r['per_key']:,.1f} "
                f"| {r['restore_local']:.2f} | {r.get('restore_fresh', float('nan')):.2f} |",
                flush=True,
            )
    print(f"\nload average: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
