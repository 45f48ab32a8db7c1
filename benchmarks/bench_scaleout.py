"""Consumer-group scale-out: 1 vs 2 processes, and how long a killed process's partitions wait.

Run:  .venv/bin/python benchmarks/bench_scaleout.py            # 6,000 records, 2 ms each
      .venv/bin/python benchmarks/bench_scaleout.py --quick    # 2,000 records
      .venv/bin/python benchmarks/bench_scaleout.py --comeback-only --kills 5

A single-node broker is started by this script.  The app is a
``PartitionedJob`` (``every="1s"``, at-least-once ``to_kafka``) whose tasks
run a CPU-bound function per record (``--work-ms`` of SHA-256 rounds,
calibrated at start) on an 8-partition input topic; each output record names
its input partition.

- **Throughput**: the app runs in 1 process, then (fresh group, topics and
  checkpoints) in 2 processes.  The input is produced once every process
  holds its tasks, and the time runs from the start of producing until the
  last output record was written.  Reported: both times and their ratio.
- **Recovery**: 2 processes read a backlog; one is SIGKILLed once output
  flows; reported is the time from the kill until output from each of the
  killed process's partitions is written again (session timeout 6 s, so the
  group notices the death after at most 6 s; then the new owner restores
  each task from its newest checkpoint).
- **Comeback**: 3 processes read a backlog; one is SIGKILLed once output
  flows and started again at once (as a supervisor restarts it), ``--kills``
  times; reported per kill is the time from the kill until output from each
  of the killed process's partitions is written again, next to the restore
  time of those tasks in the new process (from its "task ... started" line to
  its "restored checkpoint" line).

Not a test: it prints the figures and the load average, and exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from rivermark.testing import wait_for

PARTITIONS = 8
SESSION_MS = 6000


def _rounds_for(ms: float) -> int:
    """SHA-256 rounds that take about ``ms`` milliseconds here."""
    n, h = 20000, b"x" * 32
    t = time.perf_counter()
    for _ in range(n):
        h = hashlib.sha256(h).digest()
    per = (time.perf_counter() - t) / n
    return max(1, int(ms / 1000 / per))


def worker(bootstrap: str, inp: str, out: str, group: str, ckpt: str, rounds: int) -> None:
    """One process of the app (``--worker``)."""
    import logging

    import rivermark.kafka  # noqa: F401
    from rivermark import Stream
    from rivermark.kafka import PartitionedJob, PartitionSource

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    logging.getLogger("rivermark.checkpoint").setLevel(logging.WARNING)
    logging.getLogger("rivermark.checkpoint.protocol.job").setLevel(logging.INFO)

    def build(source: PartitionSource) -> Stream:
        part = source.partition

        def work(value: bytes) -> str:
            h = value
            for _ in range(rounds):
                h = hashlib.sha256(h).digest()
            return json.dumps({"p": part, "h": h.hex()[:8]})

        return source.flatten().map(work).to_kafka(out, {"bootstrap.servers": bootstrap})

    job = PartitionedJob(
        inp,
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500,
        },
        build,
        checkpoint=ckpt,
        every="1s",
        source_options={"poll_interval": 0.05, "max_batch_size": 20},
    )
    job.install_signal_handlers()
    job.run()


class Reader:
    """Reads the output in a thread: (time written, input partition) of every record."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        import confluent_kafka as ck

        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._c = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"r-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
            }
        )
        self._c.subscribe([topic])
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(500, timeout=0.1):
                if m.error() is None:
                    # the producer's create time (wall clock, ms): when the task wrote it
                    self.seen.append((m.timestamp()[1] / 1000, json.loads(m.value())["p"]))

    def close(self) -> None:
        self._stop.set()
        self._t.join(10)
        self._c.close()


def owners(log: Path) -> dict[int, set[int]]:
    """pid -> partitions it holds now, from the processes' log lines."""
    held: dict[int, set[int]] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r" (\d+) partitions (assigned|revoked): (\[.*\])", line)
        if not m:
            continue
        parts = {int(p) for p in re.findall(r", (\d+)\)", m.group(3))}
        mine = held.setdefault(int(m.group(1)), set())
        if m.group(2) == "assigned":
            mine |= parts
        else:
            mine -= parts
    return held


class App:
    """N processes of the app on fresh topics, group and checkpoints."""

    def __init__(self, bootstrap: str, tmp: Path, rounds: int, procs: int) -> None:
        from rivermark.testing.kafka_broker import create_topic

        tag = uuid.uuid4().hex[:8]
        self.bootstrap, self.inp, self.out = bootstrap, f"in-{tag}", f"out-{tag}"
        create_topic(bootstrap, self.inp, partitions=PARTITIONS)
        create_topic(bootstrap, self.out, partitions=PARTITIONS)
        self.log = tmp / f"app-{tag}.log"
        self.log.touch()
        self.args = [sys.executable, __file__, "--worker", bootstrap, self.inp, self.out]
        self.args += [f"g-{tag}", str(tmp / f"ckpt-{tag}"), str(rounds)]
        self.procs: list[subprocess.Popen[bytes]] = []
        for _ in range(procs):
            self.start()
        self.reader = Reader(bootstrap, self.out)

        def settled() -> bool:
            held = owners(self.log)
            live = {p.pid for p in self.procs}
            return sum(len(v) for k, v in held.items() if k in live) == PARTITIONS and all(
                held.get(pid) for pid in live
            )

        wait_for(settled, 120, f"{procs} processes holding all partitions", interval=0.05)

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as f:
            proc = subprocess.Popen(self.args, stdout=f, stderr=f)
        self.procs.append(proc)
        return proc

    def produce(self, n: int) -> None:
        import confluent_kafka as ck

        p = ck.Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        for i in range(n):
            while True:
                try:
                    p.produce(self.inp, value=f"{i:08d}".encode(), partition=i % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(30) == 0

    def produce_steadily(self, per_second: int, stop: threading.Event) -> None:
        import confluent_kafka as ck

        p = ck.Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        i = 0
        while not stop.is_set():
            for _ in range(max(1, per_second // 10)):
                p.produce(self.inp, value=f"{i:08d}".encode(), partition=i % PARTITIONS)
                i += 1
            p.poll(0)
            time.sleep(0.1)
        p.flush(30)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.reader.close()


def throughput(bootstrap: str, tmp: Path, rounds: int, procs: int, n: int) -> float:
    app = App(bootstrap, tmp, rounds, procs)
    try:
        t0 = time.time()
        app.produce(n)
        wait_for(lambda: len(app.reader.seen) >= n, 600, f"{n} outputs", interval=0.05)
        return max(t for t, _ in app.reader.seen) - t0
    finally:
        app.close()


def recovery(bootstrap: str, tmp: Path, rounds: int, n: int) -> tuple[float, list[float]]:
    """Seconds from the kill until each of the victim's partitions produced output again."""
    app = App(bootstrap, tmp, rounds, 2)
    try:
        app.produce(n)
        wait_for(lambda: len(app.reader.seen) >= n // 10, 300, "output flowing", interval=0.05)
        victim = app.procs[0]
        lost = owners(app.log)[victim.pid]
        killed = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait()

        def back() -> bool:
            again = {p for t, p in list(app.reader.seen) if t > killed and p in lost}
            return again == lost

        wait_for(back, 300, "output of the killed process's partitions", interval=0.05)
        first: dict[int, float] = {}
        for t, p in app.reader.seen:
            if t > killed and p in lost and p not in first:
                first[p] = t - killed
        return max(first.values()), sorted(first.values())
    finally:
        app.close()


_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\d+) "


def _stamp(text: str) -> float:
    return time.mktime(time.strptime(text[:19], "%Y-%m-%d %H:%M:%S")) + int(text[20:]) / 1000


def restore_seconds(log: Path, pid: int, parts: set[int]) -> float:
    """The longest restore of ``parts`` in process ``pid``: task started -> restored checkpoint."""
    started: dict[int, float] = {}
    longest = 0.0
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(_STAMP + r"task \S+\[(\d+)\] started", line)
        if m and int(m.group(2)) == pid:
            started[int(m.group(3))] = _stamp(m.group(1))
            continue
        m = re.match(_STAMP + r"restored checkpoint \d+ from .*tasks/\S+-(\d+)'", line)
        if m and int(m.group(2)) == pid and int(m.group(3)) in started:
            p = int(m.group(3))
            if p in parts:
                longest = max(longest, _stamp(m.group(1)) - started.pop(p))
    return longest


def comeback(
    bootstrap: str, tmp: Path, rounds: int, n: int, kills: int
) -> list[tuple[float, float]]:
    """(kill -> every lost partition producing, restore time) per kill; the victim comes back.

    ``n``: records per second produced while the processes run.
    """
    app = App(bootstrap, tmp, rounds, 3)
    out: list[tuple[float, float]] = []
    stop = threading.Event()
    # a steady input (about half the app's capacity), so every partition has
    # records to produce output from after each kill
    feeder = threading.Thread(target=app.produce_steadily, args=(n, stop), daemon=True)
    feeder.start()
    try:
        for _ in range(kills):
            seen = len(app.reader.seen)
            wait_for(
                lambda s=seen: len(app.reader.seen) >= s + 200, 300, "output flowing", interval=0.05
            )
            live = {p.pid for p in app.procs if p.poll() is None}
            wait_for(
                lambda live=live: (
                    sum(  # type: ignore[misc]
                        len(v) for pid, v in owners(app.log).items() if pid in live
                    )
                    == PARTITIONS
                ),
                120,
                "every partition owned",
                interval=0.05,
            )
            victim = next(p for p in app.procs if p.poll() is None)
            lost = owners(app.log)[victim.pid]
            killed = time.time()
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            app.procs.remove(victim)
            new = app.start()

            def back(lost: set[int] = lost, killed: float = killed) -> bool:
                return {p for t, p in list(app.reader.seen) if t > killed and p in lost} == lost

            wait_for(back, 300, "output of the killed process's partitions", interval=0.05)
            first: dict[int, float] = {}
            for t, p in app.reader.seen:
                if t > killed and p in lost and p not in first:
                    first[p] = t - killed
            out.append((max(first.values()), restore_seconds(app.log, new.pid, lost)))
        return out
    finally:
        stop.set()
        feeder.join(30)
        app.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        b, inp, out, group, ckpt, rounds = argv[1:7]
        worker(b, inp, out, group, ckpt, int(rounds))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=None, help="records (default 6,000)")
    ap.add_argument("--work-ms", type=float, default=2.0, help="CPU time per record (ms)")
    ap.add_argument("--kills", type=int, default=3, help="kills in the comeback run")
    ap.add_argument(
        "--comeback-only", action="store_true", help="only the comeback run (3 processes)"
    )
    args = ap.parse_args(argv)
    n = args.n or (2000 if args.quick else 6000)
    from rivermark.testing.kafka_broker import start_broker, stop_broker

    rounds = _rounds_for(args.work_ms)
    print(f"load average at start: {os.getloadavg()}; {n} records, {args.work_ms} ms each")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        broker = start_broker(tmp / "kafka")
        try:
            if not args.comeback_only:
                one = throughput(broker.bootstrap, tmp, rounds, 1, n)
                two = throughput(broker.bootstrap, tmp, rounds, 2, n)
                worst, each = recovery(broker.bootstrap, tmp, rounds, n * 2)
            rate = int(0.5 * 1000 / args.work_ms)  # records/s, about half of one core
            back = comeback(broker.bootstrap, tmp, rounds, rate, args.kills)
        finally:
            stop_broker(broker)
    if not args.comeback_only:
        _print_throughput(n, one, two, worst, each)
    times = sorted(t for t, _ in back)
    print(
        f"3 processes, 8 partitions, killed process started again at once, {len(back)} kills: "
        f"kill -> output of every lost partition again: median {times[len(times) // 2]:.2f} s, "
        f"max {times[-1]:.2f} s; per kill (seconds, restore): "
        + ", ".join(f"{t:.2f} ({r:.2f})" for t, r in back)
    )
    print(f"load average at end: {os.getloadavg()}")
    return 0


def _print_throughput(n: int, one: float, two: float, worst: float, each: list[float]) -> None:
    print(f"1 process : {one:6.2f} s  ({n / one:7.0f} records/s)")
    print(f"2 processes: {two:6.2f} s  ({n / two:7.0f} records/s)   speed-up {one / two:.2f}x")
    print(
        f"kill -> output of every lost partition again: {worst:.2f} s "
        f"(per partition: {', '.join(f'{x:.2f}' for x in each)}; session timeout "
        f"{SESSION_MS / 1000:g} s)"
    )


if __name__ == "__main__":
    sys.exit(main())
