"""Kafka throughput on a real single-node broker started by this script.

Run:  .venv/bin/python benchmarks/bench_kafka.py              # 200,000 messages
      .venv/bin/python benchmarks/bench_kafka.py -n 1000000   # the issue's figure
      .venv/bin/python benchmarks/bench_kafka.py --quick      # 20,000 messages

Input: N JSON messages of about 100 bytes (``{"k": "key-017", "n": 5, "pad": ...}``,
100 keys) in a topic of 4 partitions, produced before timing.  The work:
read batches, ``json.loads`` every message of the batch, count per key, and
produce one message ``["key-017", count]`` per key touched by the batch to an
output topic (1 partition).  Contenders, each with a fresh consumer group and
output topic, in the same run:

- ``plain``: a confluent-kafka loop (``consume(10000)``, the same functions,
  ``produce`` + ``poll(0)``, async offset commit per batch, ``flush`` at the end);
- rivermark ``from_kafka_batched -> map(parse) -> accumulate(count) -> flatten
  -> to_kafka`` started with ``source.start()`` (at-least-once, no job);
- the same under ``Job(every="2s")`` (at-least-once, checkpointed);
- the same with ``to_kafka(exactly_once=True)`` under
  ``Job(every="2s", exactly_once=True)`` (one Kafka transaction per epoch);
- streamz 0.6.6 ``from_kafka_batched`` -> the same functions -> ``to_kafka``
  (at-least-once; benchmark-only dependency).

Time: from building the pipeline (consumer creation included) until all N
input messages were counted and every output message was acknowledged.
Best of ``--repeat`` interleaved rounds (the first round also warms the broker's
group and transaction coordinators).  ``check`` compares the final counts with
the counts of the produced input.

Not a test: it prints a table and exits 0 (1 if a check failed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafkabench import broker_with_input  # noqa: E402

from rivermark.testing import wait_for  # noqa: E402

logger = logging.getLogger(__name__)

KEYS = 100
PARTITIONS = 4


def make_messages(n: int) -> tuple[list[bytes], dict[str, int]]:
    out, expected = [], {}
    for i in range(n):
        k = f"key-{(i * 7919) % KEYS:03d}"
        expected[k] = expected.get(k, 0) + 1
        body = {"k": k, "n": i, "pad": ""}
        raw = json.dumps(body)
        body["pad"] = "x" * max(0, 100 - len(raw))
        out.append(json.dumps(body).encode())
    return out, expected


class Counter:
    """The shared work: parse a batch, count per key, report touched keys."""

    def __init__(self) -> None:
        self.processed = 0
        self.counts: dict[str, int] = {}

    def parse(self, batch: list[bytes]) -> list[dict[str, Any]]:
        return [json.loads(v) for v in batch]

    def count(self, state: dict[str, int], recs: list[dict[str, Any]]) -> tuple[Any, list[str]]:
        touched = {}
        for r in recs:
            k = r["k"]
            c = state.get(k, 0) + 1
            state[k] = c
            touched[k] = c
        self.processed += len(recs)
        self.counts = state
        return state, [json.dumps([k, c]) for k, c in touched.items()]


def consumer_conf(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
    }


def run_plain(bootstrap: str, inp: str, out: str, n: int) -> tuple[float, Counter]:
    import confluent_kafka as ck

    work = Counter()
    t0 = time.perf_counter()
    conf = consumer_conf(bootstrap)
    conf["enable.auto.commit"] = False
    c = ck.Consumer(conf)
    c.assign([ck.TopicPartition(inp, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    state: dict[str, int] = {}
    try:
        while work.processed < n:
            msgs = c.consume(10_000, timeout=0.05)
            batch = [m.value() for m in msgs if m.error() is None]
            if not batch:
                continue
            _, lines = work.count(state, work.parse(batch))
            for line in lines:
                while True:
                    try:
                        p.produce(out, line.encode())
                        break
                    except BufferError:
                        p.poll(0.05)
            p.poll(0)
            c.commit(asynchronous=True)
        assert p.flush(60) == 0
        took = time.perf_counter() - t0
    finally:
        c.close()
    return took, work


def run_rivermark(
    bootstrap: str, inp: str, out: str, n: int, mode: str, tmp: Path
) -> tuple[float, Counter]:
    """``mode``: ``start`` (no job), ``alo`` (Job at-least-once) or ``eos`` (exactly-once)."""
    import rivermark.kafka  # noqa: F401
    from rivermark import Job, Stream

    work = Counter()
    t0 = time.perf_counter()
    src = Stream.from_kafka_batched(inp, consumer_conf(bootstrap), poll_interval=0.05)
    sink = (
        src.map(work.parse)
        .accumulate(work.count, start={}, returns_state=True)
        .flatten()
        .to_kafka(out, {"bootstrap.servers": bootstrap}, exactly_once=mode == "eos")
    )
    if mode == "start":
        src.start()
        wait_for(
            lambda: work.processed >= n and sink.in_flight == 0, 600, "rivermark", interval=0.005
        )
        took = time.perf_counter() - t0
        src.stop()
        return took, work
    job = Job(src, checkpoint=str(tmp / f"ckpt-{out}"), every="2s", exactly_once=mode == "eos")
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    wait_for(
        lambda: work.processed >= n and sink.in_flight == 0, 600, "rivermark job", interval=0.005
    )
    job.stop()  # final checkpoint; for exactly-once the last transaction commits here
    took = time.perf_counter() - t0
    runner.join(60)
    return took, work


def run_streamz(bootstrap: str, inp: str, out: str, n: int) -> tuple[float, Counter]:
    import streamz

    work = Counter()
    state: dict[str, int] = {}
    t0 = time.perf_counter()
    src = streamz.Stream.from_kafka_batched(inp, consumer_conf(bootstrap), poll_interval=0.05)

    def count(batch: list[bytes]) -> list[str]:
        return work.count(state, work.parse(batch))[1]

    sink = src.map(count).flatten().map(str.encode).to_kafka(out, {"bootstrap.servers": bootstrap})
    src.start()
    wait_for(lambda: work.processed >= n and not sink.futures, 600, "streamz", interval=0.005)
    took = time.perf_counter() - t0
    src.stop()
    sink.stopped = True
    with contextlib.suppress(Exception):  # already closed by streamz
        src.consumer.close()
    return took, work


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("-n", type=int, default=None, help="messages (default 200,000)")
    p.add_argument("--no-streamz", action="store_true")
    p.add_argument("--only", default="", help="e.g. plain,start,alo,eos,streamz")
    p.add_argument("--repeat", type=int, default=2, help="best of R rounds (default 2)")
    args = p.parse_args(argv)
    n = args.n or (20_000 if args.quick else 200_000)
    logging.basicConfig(level=logging.WARNING)

    from rivermark.testing.kafka_broker import create_topic

    messages, expected = make_messages(n)
    size = sum(len(m) for m in messages) / n
    with broker_with_input("rivermark-bench-kafka-", messages, PARTITIONS) as (bs, tmp, t_produce):
        import rivermark

        print(
            f"rivermark {rivermark.__version__}, Python {sys.version.split()[0]}, "
            f"{os.cpu_count()} cpus; {n:,} messages of {size:.0f} bytes, "
            f"{PARTITIONS} partitions, {KEYS} keys (produced in {t_produce:.1f} s)"
        )
        contenders: list[tuple[str, str, Callable[[str], tuple[float, Counter]]]] = [
            ("plain", "confluent-kafka loop", lambda o: run_plain(bs, "input", o, n)),
            (
                "start",
                "rivermark, source.start() (at-least-once)",
                lambda o: run_rivermark(bs, "input", o, n, "start", tmp),
            ),
            (
                "alo",
                'rivermark, Job(every="2s") (at-least-once)',
                lambda o: run_rivermark(bs, "input", o, n, "alo", tmp),
            ),
            (
                "eos",
                'rivermark, Job(every="2s", exactly_once=True)',
                lambda o: run_rivermark(bs, "input", o, n, "eos", tmp),
            ),
        ]
        if not args.no_streamz:
            contenders.append(
                (
                    "streamz",
                    "streamz from_kafka_batched (at-least-once)",
                    lambda o: run_streamz(bs, "input", o, n),
                )
            )
        only = {k.strip() for k in args.only.split(",") if k.strip()}
        contenders = [c for c in contenders if not only or c[0] in only]
        best: dict[str, float] = {}
        checks: dict[str, str] = {}
        for r in range(args.repeat):  # interleaved rounds; the first also warms the broker
            for key, _title, run in contenders:
                out = f"out-{key}-{r}"
                create_topic(bs, out, partitions=1)
                took, work = run(out)
                best[key] = min(best.get(key, float("inf")), took)
                if work.counts != expected:
                    checks[key] = "counts differ"
                checks.setdefault(key, "ok")
                print(f"  round {r} {key}: {n / took:,.0f} msg/s", file=sys.stderr, flush=True)
        ok = all(v == "ok" for v in checks.values())
        plain_rate = n / best["plain"] if "plain" in best else None
        rows = [(t, n / best[k], best[k], checks[k]) for k, t, _ in contenders]
    print()
    print("| contender | msg/s | seconds | vs plain | check |")
    print("|---|---|---|---|---|")
    for title, rate, took, check in rows:
        ratio = "n/a" if plain_rate is None else f"{rate / plain_rate:.2f}"
        print(f"| {title} | {rate:,.0f} | {took:.1f} | {ratio} | {check} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
