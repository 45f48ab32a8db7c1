"""CPU cost of the checkpoint cycle and of the record path, in process CPU time.

Run:  PYTHONPATH=src .venv/bin/python benchmarks/bench_cycle_cpu.py [label]

Part 1: a job on a plain ``Stream()`` root with a small ``accumulate`` state;
``job.checkpoint()`` is called 300 times from this thread (one record
emitted before each); reported: process CPU milliseconds per checkpoint
(the barrier, the durable write, the commit, the listeners' events).
Part 2: ``map(inc).filter(even).accumulate(add).sink(noop)`` over
``from_iterable(range(300,000))`` under ``Job(every=None)``; reported:
records per process CPU second, best of 3.

CPU time, not wall time: on a machine shared with other work the wall time
of a short run measures the neighbours.  To compare two versions, run this
alternately with each on ``PYTHONPATH`` and compare the medians.

Not a test: it prints figures and exits 0.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from typing import Any

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.testing import wait_for


def add(acc: int, x: int) -> int:
    return acc + x


def inc(x: int) -> int:
    return x + 1


def even(x: int) -> bool:
    return x % 2 == 0


def noop(x: Any) -> None:
    """The benchmark sink."""


def cpu_ms_per_checkpoint(n: int = 300) -> float:
    root = Stream(name="in")
    root.accumulate(add, start=0, name="sum").sink(noop)
    job = Job(root, checkpoint=tempfile.mkdtemp(), every=None, keep=2)
    runner = threading.Thread(target=job.run)
    runner.start()
    wait_for(lambda: job.running, what="the job running")
    started = time.process_time()
    for i in range(n):
        root.emit(i)
        job.checkpoint()
    cpu = (time.process_time() - started) * 1000 / n
    job.stop()
    runner.join()
    return cpu


def records_per_cpu_second(n: int = 300_000, repeat: int = 3) -> float:
    best = 0.0
    for _ in range(repeat):
        source = Stream.from_iterable(range(n), name="numbers")
        source.map(inc).filter(even).accumulate(add, start=0).sink(noop)
        started = time.process_time()
        Job(source, checkpoint=tempfile.mkdtemp(), every=None).run()
        best = max(best, n / (time.process_time() - started))
    return best


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "this version"
    per_checkpoint = cpu_ms_per_checkpoint()
    rate = records_per_cpu_second()
    print(
        f"{label}: {per_checkpoint:.3f} CPU ms per checkpoint(); "
        f"{rate:,.0f} records per CPU second (best of 3)"
    )


if __name__ == "__main__":
    main()
