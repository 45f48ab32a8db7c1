"""Cost of acknowledged dead letters, on a real single-node broker started by this script.

Run:  .venv/bin/python benchmarks/bench_dead_letter.py            # 20,000 records
      .venv/bin/python benchmarks/bench_dead_letter.py -n 2000 --poison 0.5

Input: N records in one partition, a fraction ``--poison`` of them not JSON.
Pipeline, under ``Job(every="2s")`` with ``from_kafka_batched(stop_at_end=True)``
(the job ends by itself): ``flatten -> map(json.loads, on_error=POLICY) -> sink``.
Contenders in the same run, each with a fresh group and checkpoint directory:
``skip`` (``on_error="skip"``, the baseline) and ``dead_letter`` (every failed
record written to a dead-letter topic and acknowledged before it completes).
Prints the time of each and the ratio to the baseline; not a test.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def run(bootstrap: str, topic: str, policy: Any, ckpt: Path) -> float:
    import json

    import rivermark.kafka  # noqa: F401
    from rivermark import Stream
    from rivermark.checkpoint import Job

    src = Stream.from_kafka_batched(
        topic,
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"},
        poll_interval=0.01,
        stop_at_end=True,
    )
    src.flatten().map(json.loads, on_error=policy).sink(lambda x: None)
    t0 = time.perf_counter()
    Job(src, checkpoint=str(ckpt), every="2s").run()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--poison", type=float, default=0.1, help="fraction of bad records")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import confluent_kafka as ck

    from rivermark.kafka import dead_letter
    from rivermark.testing.kafka_broker import create_topic, start_broker, stop_broker

    every = max(1, round(1 / args.poison)) if args.poison > 0 else 0
    with tempfile.TemporaryDirectory(prefix="rivermark-bench-dlq-") as d:
        tmp = Path(d)
        broker = start_broker(tmp / "kafka")
        try:
            bs = broker.bootstrap
            create_topic(bs, "input", partitions=1)
            producer = ck.Producer(
                {"bootstrap.servers": bs, "linger.ms": 5, "enable.idempotence": True}
            )
            for i in range(args.n):
                bad = every and i % every == 0
                producer.produce("input", value=b"not json" if bad else b'{"n": 1}')
                producer.poll(0)
            producer.flush(60)
            poison = sum(1 for i in range(args.n) if every and i % every == 0)
            handler = dead_letter("dlq", {"bootstrap.servers": bs})
            run(bs, "input", "skip", tmp / "warm")  # warms the group coordinator
            t_skip = run(bs, "input", "skip", tmp / "skip")
            t_dlq = run(bs, "input", handler, tmp / "dlq")
            assert handler.count == poison, (handler.count, poison)  # type: ignore[attr-defined]
            print(f"{args.n:,} records, {poison:,} dead-lettered")
            print(f"  on_error='skip'        {t_skip:7.2f} s")
            print(
                f"  dead_letter (acked)    {t_dlq:7.2f} s  ({t_dlq / t_skip:.2f}x; "
                f"{(t_dlq - t_skip) / max(poison, 1) * 1000:.2f} ms per dead letter)"
            )
        finally:
            stop_broker(broker)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
