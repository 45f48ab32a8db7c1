"""What watching a job costs: the same job run without and with the live page open.

Each round runs one job twice, back to back in random order: once plain,
once with ``ui=0`` and a client reading the page's event stream (what an
open page does: one reading of the metrics a second, and the busy-time
sampler looking at the threads' stacks about 100 times a second).  The job
is ``from_iterable(range(n)).map.filter.accumulate.sink`` (pipeline (a) of
``bench_pipelines.py``) with one checkpoint at the start and one at the
end, timed from the moment the job runs (its recovery and the server's
start-up are left out) to its end.  It prints the best wall time of each, their ratio (with page / without;
1.00 means free) and the median of the rounds' own ratios, for three
figures: wall time, the CPU time of the thread that runs the records
(rivermark's event loop: what the page adds to the record path) and the
CPU time of the whole process (the sampler's and the server's threads
included).  On a shared machine the wall time is the noisiest.

    .venv/bin/python benchmarks/bench_observe.py                 # 2,000,000 records, 15 rounds
    .venv/bin/python benchmarks/bench_observe.py -n 200000 --repeat 5
    .venv/bin/python benchmarks/bench_observe.py --pages 60   # 60 open tabs

Not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import threading
import time
import urllib.request

from rivermark import Stream
from rivermark.checkpoint import Job


def _read_events(url: str, stop: threading.Event) -> None:
    with urllib.request.urlopen(url + "events", timeout=30) as resp:
        while not stop.is_set() and resp.readline():
            pass


def _loop_thread_clock() -> int:
    """The CPU clock of the thread that runs the jobs' records (rivermark's event loop)."""
    loop = next(t for t in threading.enumerate() if t.name == "rivermark-loop")
    assert loop.ident is not None
    return time.pthread_getcpuclockid(loop.ident)


def once(n: int, watched: bool, pages: int = 1) -> tuple[float, float, float]:
    """Wall seconds, the loop thread's CPU seconds and the process's CPU seconds of one job."""
    source = Stream.from_iterable(range(n), name="numbers")
    total = (
        source.map(lambda x: x + 1, name="inc")
        .filter(lambda x: x % 2 == 0, name="evens")
        .accumulate(lambda acc, x: acc + x, start=0, name="total")
    )
    total.sink(lambda x: None, name="drop")
    job = Job(source, checkpoint=tempfile.mkdtemp(), every=None, ui=0 if watched else None)
    stop = threading.Event()
    runner = threading.Thread(target=job.run)
    runner.start()
    # timed from the moment the job runs (recovered, page served): what the page
    # costs while records flow, not its start-up
    while not job.running:
        time.sleep(0.0005)
    clock = _loop_thread_clock()
    start, loop_cpu, cpu = time.perf_counter(), time.clock_gettime(clock), time.process_time()
    if watched:
        assert job.ui_url is not None
        for _ in range(pages):  # open pages (tabs): each reads the event stream
            threading.Thread(target=_read_events, args=(job.ui_url, stop), daemon=True).start()
    while job.running:  # the loop thread outlives the job: read its clock at the job's end
        job.wait_ended(0.05)
    loop_cpu = time.clock_gettime(clock) - loop_cpu
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    runner.join()
    stop.set()
    return elapsed, loop_cpu, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=2_000_000, help="records per job")
    parser.add_argument("--repeat", type=int, default=15, help="rounds")
    parser.add_argument("--pages", type=int, default=1, help="open pages (event streams)")
    args = parser.parse_args()
    once(10_000, True)  # warm up imports and the server
    plain: list[tuple[float, float, float]] = []
    watched: list[tuple[float, float, float]] = []
    for _ in range(args.repeat):
        order = [False, True]
        random.shuffle(order)
        times = {w: once(args.n, w, args.pages) for w in order}
        plain.append(times[False])
        watched.append(times[True])
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.1f}, n={args.n:,}, rounds={args.repeat}, pages={args.pages}"
    )
    print("figure                          without page   with page   best ratio   median ratio")
    for i, what in enumerate(("wall s", "loop thread CPU s", "process CPU s")):
        a, b = [t[i] for t in plain], [t[i] for t in watched]
        ratios = statistics.median(y / x for x, y in zip(a, b))
        print(
            f"{what:<30} {min(a):>10.3f}   {min(b):>10.3f}   {min(b) / min(a):>10.3f}   {ratios:>12.3f}"
        )
    print(f"records/s (best wall, without page): {args.n / min(t[0] for t in plain):,.0f}")


if __name__ == "__main__":
    main()
