"""Kafka, one output per input: the sink's cost in full view.

Run:  .venv/bin/python benchmarks/bench_kafka_1to1.py              # 300,000 records, 3 rounds
      .venv/bin/python benchmarks/bench_kafka_1to1.py --quick      # 30,000 records
      .venv/bin/python benchmarks/bench_kafka_1to1.py --only plain,batched-alo

Input: N JSON records of about 100 bytes in a topic of 4 partitions,
produced before timing.  The work per record: ``json.loads`` -> a dict with
one more field -> ``json.dumps`` -> one output record (output topic of 4
partitions).  Contenders, each with a fresh consumer group and output topic,
in the same run (interleaved rounds; rates and times are medians, the
ratios the median of the rounds' ratios):

- ``plain``: a confluent-kafka loop (``consume(10000)``, ``produce`` +
  ``poll(0)``, asynchronous offset commit per batch, ``flush`` at the end):
  the baseline, 1.00;
- ``plain-txn``: the same loop with a Kafka transaction every 2 s
  (``send_offsets_to_transaction`` + ``commit_transaction``);
- rivermark ``from_kafka_batched -> map(per batch) -> flatten -> to_kafka``
  under ``Job(every="2s")``: at-least-once (``batched-alo``) and with
  ``exactly_once=True`` on the job and the sink (``batched-eos``);
- rivermark ``from_kafka -> map -> to_kafka`` (one record at a time), the
  same two ways (``record-alo``, ``record-eos``);
- Quix Streams (``quix-alo``, ``quix-eos``; ``commit_interval=2``), run in a
  separate virtualenv because it pins its own confluent-kafka.  Create it
  once with::

      python -m venv .venv-peers && .venv-peers/bin/pip install quixstreams

  and point ``--peers-python`` at ``.venv-peers/bin/python`` (the default
  when that file exists next to the running interpreter's venv); without
  it the Quix rows are left out.

Two versions of rivermark in the same minutes: ``--trees before=DIR,after=DIR``
(each DIR holds a ``rivermark`` package, e.g. ``git archive <commit> src | tar
-x``) runs every rivermark contender once per tree, each in a child process
with that DIR first on ``PYTHONPATH``, one after the other in each round.

Time: from building the pipeline (consumer creation included) until every
output record was acknowledged (and, for the transactional contenders, the
last transaction committed); also the process's CPU time (all its threads,
librdkafka's included) per record, which a machine shared with other work
disturbs less than the wall clock.  Check: after each run the output topic is read
back with ``read_committed``; its records must be exactly the baseline's
(the same multiset of values: count and a digest).  A contender whose output
differs is marked, and the run exits 1.

Not a test: it prints a table and exits 0 (1 if a check failed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafkabench import broker_with_input  # noqa: E402

logger = logging.getLogger(__name__)

PARTITIONS = 4
TXN_EVERY = 2.0


def make_messages(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        body = {"k": f"key-{(i * 7919) % 1000:03d}", "n": i, "pad": ""}
        raw = json.dumps(body)
        body["pad"] = "x" * max(0, 100 - len(raw))
        out.append(json.dumps(body).encode())
    return out


def transform(value: bytes) -> str:
    """The work per record: parse, add a field, serialise."""
    d = json.loads(value)
    d["n2"] = d["n"] * 2
    return json.dumps(d)


def transform_dict(d: dict[str, Any]) -> dict[str, Any]:
    """The same work on a parsed record (Quix Streams parses and serialises itself)."""
    d["n2"] = d["n"] * 2
    return d


def digest(values: list[bytes]) -> tuple[int, int]:
    """Count and an order-independent digest of the values (as parsed JSON)."""
    total = 0
    for v in values:
        canon = json.dumps(json.loads(v), sort_keys=True, separators=(",", ":"))
        total = (total + zlib.crc32(canon.encode())) & 0xFFFFFFFFFFFF
    return len(values), total


def expected_digest(messages: list[bytes]) -> tuple[int, int]:
    return digest([transform(m).encode() for m in messages])


def read_back(bootstrap: str, topic: str, n: int) -> list[bytes]:
    """Every committed record of ``topic`` (waits at most 60 s for ``n`` of them)."""
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=0.2):
                if m.error() is None:
                    out.append(m.value())
                elif m.error().code() == ck.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
            if len(eof) == PARTITIONS and len(out) >= n:
                break
    finally:
        c.close()
    return out


def consumer_conf(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
    }


def run_plain(bootstrap: str, inp: str, out: str, n: int, txn: bool) -> tuple[float, float]:
    import confluent_kafka as ck

    t0, c0 = time.perf_counter(), time.process_time()
    conf = consumer_conf(bootstrap)
    conf["enable.auto.commit"] = False
    c = ck.Consumer(conf)
    tps = [ck.TopicPartition(inp, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)]
    c.assign(tps)
    pconf: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if txn:
        pconf["transactional.id"] = f"plain-{uuid.uuid4().hex[:8]}"
    p = ck.Producer(pconf)
    if txn:
        p.init_transactions(30)
        p.begin_transaction()
    last = time.monotonic()
    done = 0

    def commit_txn() -> None:
        positions = c.position([ck.TopicPartition(inp, i) for i in range(PARTITIONS)])
        p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
        p.commit_transaction(30)

    try:
        while done < n:
            msgs = c.consume(10_000, timeout=0.05)
            for m in msgs:
                if m.error() is not None:
                    continue
                line = transform(m.value()).encode()
                while True:
                    try:
                        p.produce(out, line)
                        break
                    except BufferError:
                        p.poll(0.05)
                done += 1
            p.poll(0)
            if txn:
                if time.monotonic() - last >= TXN_EVERY:
                    commit_txn()
                    p.begin_transaction()
                    last = time.monotonic()
            elif msgs:
                c.commit(asynchronous=True)
        if txn:
            commit_txn()
        else:
            assert p.flush(60) == 0
        took = time.perf_counter() - t0, time.process_time() - c0
    finally:
        c.close()
    return took


def run_rivermark(
    bootstrap: str, inp: str, out: str, n: int, batched: bool, eos: bool, tmp: Path
) -> tuple[float, float]:
    import rivermark.kafka  # noqa: F401
    from rivermark import Job, Stream
    from rivermark.testing import wait_for

    t0, c0 = time.perf_counter(), time.process_time()
    src: Any
    if batched:
        src = Stream.from_kafka_batched(inp, consumer_conf(bootstrap), poll_interval=0.05)
        body = src.map(lambda batch: [transform(v) for v in batch]).flatten()
    else:
        src = Stream.from_kafka(inp, consumer_conf(bootstrap))
        body = src.map(transform)
    sink = body.to_kafka(out, {"bootstrap.servers": bootstrap}, exactly_once=eos)
    job = Job(src, checkpoint=str(tmp / f"ckpt-{out}"), every="2s", exactly_once=eos)
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    wait_for(
        lambda: sink.delivered >= n and sink.in_flight == 0, 600, "rivermark job", interval=0.005
    )
    job.stop()  # final checkpoint; exactly-once: the last transaction commits here
    took = time.perf_counter() - t0, time.process_time() - c0
    runner.join(60)
    return took


def rivermark_child(bootstrap: str, inp: str, out: str, n: int, kind: str) -> None:
    """Run one rivermark contender (in a child process): print its seconds and CPU seconds."""
    import tempfile

    batched, eos = kind.startswith("batched"), kind.endswith("eos")
    with tempfile.TemporaryDirectory(prefix="rivermark-bench-") as d:
        took, cpu = run_rivermark(bootstrap, inp, out, n, batched, eos, Path(d))
    print(json.dumps({"seconds": took, "cpu": cpu}))


def run_in_tree(tree: str, bootstrap: str, out: str, n: int, kind: str) -> tuple[float, float]:
    """A rivermark contender run with the ``rivermark`` package of ``tree``."""
    cmd = [sys.executable, __file__, "--rivermark-child", bootstrap, "input", out, str(n), kind]
    env = {**os.environ, "PYTHONPATH": tree}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"rivermark child ({tree}) failed: {res.stderr[-2000:]}")
    got = json.loads(res.stdout.splitlines()[-1])
    return float(got["seconds"]), float(got["cpu"])


# ---------------------------------------------------------------- Quix Streams (separate venv)
def quix_child(bootstrap: str, inp: str, out: str, n: int, eos: bool) -> None:
    """Run in the peers' virtualenv: print the seconds Quix Streams took."""
    from quixstreams import Application

    t0, c0 = time.perf_counter(), time.process_time()
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once" if eos else "at-least-once",
        commit_interval=TXN_EVERY,
        auto_create_topics=False,
        use_changelog_topics=False,
    )
    tin = app.topic(inp, value_deserializer="json")
    tout = app.topic(out, value_serializer="json")
    seen = [0]

    def count(d: dict[str, Any]) -> dict[str, Any]:
        seen[0] += 1
        if seen[0] >= n:
            app.stop()  # graceful: flushes the producer and commits the last checkpoint
        return d

    sdf = app.dataframe(tin).apply(transform_dict).apply(count)
    sdf.to_topic(tout)
    app.run()
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0}))


def peers_python(arg: str | None) -> str | None:
    if arg:
        return arg
    venv = Path(sys.prefix)
    candidate = venv.parent / ".venv-peers" / "bin" / "python"
    return str(candidate) if candidate.exists() else None


def run_quix(
    python: str, bootstrap: str, inp: str, out: str, n: int, eos: bool
) -> tuple[float, float]:
    cmd = [python, __file__, "--quix-child", bootstrap, inp, out, str(n), "eos" if eos else "alo"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"quix child failed: {res.stderr[-2000:]}")
    got = json.loads(res.stdout.splitlines()[-1])
    return float(got["seconds"]), float(got["cpu"])


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--quix-child":
        bs, inp, out, n, mode = argv[1:6]
        logging.basicConfig(level=logging.WARNING)
        quix_child(bs, inp, out, int(n), mode == "eos")
        return 0
    if argv and argv[0] == "--rivermark-child":
        bs, inp, out, n, kind = argv[1:6]
        logging.basicConfig(level=logging.WARNING)
        rivermark_child(bs, inp, out, int(n), kind)
        return 0
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("-n", type=int, default=None, help="records (default 300,000)")
    p.add_argument("--only", default="", help="e.g. plain,batched-alo,record-eos,quix-alo")
    p.add_argument("--repeat", type=int, default=3, help="median of R rounds (default 3)")
    p.add_argument("--peers-python", default=None, help="python of the venv with quixstreams")
    p.add_argument(
        "--trees",
        default="",
        help="name=DIR,...: each rivermark contender once per source tree (see the module docs)",
    )
    args = p.parse_args(argv)
    n = args.n or (30_000 if args.quick else 300_000)
    logging.basicConfig(level=logging.WARNING)

    from rivermark.testing.kafka_broker import create_topic

    messages = make_messages(n)
    expected = expected_digest(messages)
    size = sum(len(m) for m in messages) / n
    peers = peers_python(args.peers_python)
    with broker_with_input("rivermark-bench-kafka11-", messages, PARTITIONS) as (bs, tmp, _):
        import rivermark

        print(
            f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, "
            f"{os.cpu_count()} cpus; {n:,} records of {size:.0f} bytes, "
            f"{PARTITIONS} partitions, one output per input; median of {args.repeat}"
        )
        Run = Callable[[str], tuple[float, float]]
        contenders: list[tuple[str, str, Run]] = [
            ("plain", "confluent-kafka loop", lambda o: run_plain(bs, "input", o, n, False)),
            (
                "plain-txn",
                "confluent-kafka transactional loop (2 s transactions)",
                lambda o: run_plain(bs, "input", o, n, True),
            ),
            (
                "batched-alo",
                "rivermark from_kafka_batched + flatten, at-least-once",
                lambda o: run_rivermark(bs, "input", o, n, True, False, tmp),
            ),
            (
                "batched-eos",
                "rivermark from_kafka_batched + flatten, exactly-once",
                lambda o: run_rivermark(bs, "input", o, n, True, True, tmp),
            ),
            (
                "record-alo",
                "rivermark from_kafka (per record), at-least-once",
                lambda o: run_rivermark(bs, "input", o, n, False, False, tmp),
            ),
            (
                "record-eos",
                "rivermark from_kafka (per record), exactly-once",
                lambda o: run_rivermark(bs, "input", o, n, False, True, tmp),
            ),
        ]
        if peers is not None:
            py = peers
            contenders += [
                (
                    "quix-alo",
                    "Quix Streams, at-least-once",
                    lambda o: run_quix(py, bs, "input", o, n, False),
                ),
                (
                    "quix-eos",
                    "Quix Streams, exactly-once",
                    lambda o: run_quix(py, bs, "input", o, n, True),
                ),
            ]
        else:
            print("(no peers' virtualenv: Quix Streams left out; see the module docs)")
        trees = [t.split("=", 1) for t in args.trees.split(",") if t.strip()]
        if trees:
            contenders = [
                c
                for key, title, run in contenders
                for c in (
                    [
                        (
                            f"{key}@{name}",
                            f"{title} [{name}]",
                            lambda o, k=key, d=tree: run_in_tree(d, bs, o, n, k),
                        )
                        for name, tree in trees
                    ]
                    if key.startswith(("batched", "record"))
                    else [(key, title, run)]
                )
            ]
        only = {k.strip() for k in args.only.split(",") if k.strip()}
        contenders = [c for c in contenders if not only or c[0].split("@")[0] in only]
        times: dict[str, list[float]] = {}
        cpus: dict[str, list[float]] = {}
        checks: dict[str, str] = {}
        for r in range(args.repeat):
            # with --trees, every other round in the reverse order
            order = contenders[::-1] if trees and r % 2 else contenders
            for key, _title, run in order:
                out = f"out-{key.replace('@', '.')}-{r}"
                create_topic(bs, out, partitions=PARTITIONS)
                took, cpu = run(out)
                got = digest(read_back(bs, out, n))
                if got != expected:
                    checks[key] = f"output differs: {got[0]:,} records"
                checks.setdefault(key, "ok")
                times.setdefault(key, []).append(took)
                cpus.setdefault(key, []).append(cpu)
                print(
                    f"  round {r} {key}: {n / took:,.0f} rec/s, {cpu / n * 1e6:.1f} us CPU/rec",
                    file=sys.stderr,
                    flush=True,
                )
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items()}

    def ratio_of(clock: dict[str, list[float]], key: str) -> str:
        """The median over the rounds of plain's time / this one's (a ratio within a round)."""
        if "plain" not in clock:
            return "n/a"
        return f"{statistics.median(p / t for p, t in zip(clock['plain'], clock[key])):.2f}"

    print()
    print("| contender | rec/s | seconds | vs plain | CPU us/rec | vs plain (CPU) | check |")
    print("|---|---|---|---|---|---|---|")
    for key, title, _ in contenders:
        rate = n / med[key]
        ratio, cpu_ratio = ratio_of(times, key), ratio_of(cpus, key)
        print(
            f"| {title} | {rate:,.0f} | {med[key]:.2f} | {ratio} | "
            f"{cpu_med[key] / n * 1e6:.1f} | {cpu_ratio} | {checks[key]} |"
        )
    return 0 if all(v == "ok" for v in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
