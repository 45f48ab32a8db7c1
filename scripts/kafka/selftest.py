#!/usr/bin/env python3
"""Self-test of the integration-test Kafka broker (scripts/kafka/broker).

Run with any Python that has confluent-kafka installed:

    python scripts/kafka/selftest.py [--keep DIR]

It starts a broker in a temporary directory, creates a 4-partition topic,
writes committed and aborted transactions, checks that a read_committed
consumer sees exactly the committed records (and a read_uncommitted one sees
the aborted ones too), grows the topic, restarts the broker and checks that
records, consumer-group offsets and transactions survive, then stops it and
checks that the JVM is gone.  Exits 0 on success, 1 on failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
MODULE_PATH = REPO / "src" / "rivermark" / "testing" / "kafka_broker.py"
TOPIC = "selftest-events"
PARTITIONS = 4


class SelfTestFailure(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SelfTestFailure(message)


def load_kafka_broker() -> ModuleType:
    """Import kafka_broker.py by path, so the rivermark package need not import."""
    spec = importlib.util.spec_from_file_location("rivermark_kafka_broker_selftest", MODULE_PATH)
    if spec is None or spec.loader is None:
        raise SelfTestFailure(f"cannot load {MODULE_PATH}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def step(message: str) -> None:
    print(f"[selftest] {message}", flush=True)


def produce_transactions(
    bootstrap: str, transactional_id: str, tag: str
) -> tuple[set[str], set[str]]:
    """One committed, one aborted and one more committed transaction."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    committed: set[str] = set()
    aborted: set[str] = set()

    def batch(kind: str, count: int) -> set[str]:
        values = set()
        for i in range(count):
            value = f"{tag}-{kind}-{i}"
            producer.produce(
                TOPIC, key=str(i).encode(), value=value.encode(), partition=i % PARTITIONS
            )
            values.add(value)
        return values

    producer.begin_transaction()
    committed |= batch("committed-a", 40)
    producer.commit_transaction(30)

    producer.begin_transaction()
    aborted |= batch("aborted", 20)
    producer.flush(30)  # make sure the aborted records really reach the log
    producer.abort_transaction(30)

    producer.begin_transaction()
    committed |= batch("committed-b", 40)
    producer.commit_transaction(30)
    return committed, aborted


def consume_all(
    bootstrap: str,
    group: str,
    isolation: str,
    expected: int,
    *,
    commit: bool = False,
    timeout: float = 30.0,
) -> list[str]:
    """Read from the earliest offset until ``expected`` records or the topic is drained."""
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                # Once the expected count is reached, wait a little for extras.
                if len(values) >= expected:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 2.0:
                        break
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise SelfTestFailure(f"consumer error: {error}")
            quiet_since = None
            value = message.value()
            check(value is not None, "record without a value")
            assert value is not None
            values.append(value.decode())
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def committed_offsets(bootstrap: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in offsets}


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return b"kafka.Kafka" in cmdline.read_bytes()
    except OSError:
        return False


def run(directory: Path) -> dict[str, float]:
    kb = load_kafka_broker()
    timings: dict[str, float] = {}

    missing = kb.missing_prerequisites()
    check(not missing, f"missing prerequisites: {', '.join(missing)}")

    step("fetching jars (no-op when cached)")
    t0 = time.monotonic()
    kb.fetch_broker()
    timings["fetch"] = time.monotonic() - t0

    step(f"starting broker in {directory}")
    t0 = time.monotonic()
    broker = kb.start_broker(directory)
    timings["start (fresh)"] = time.monotonic() - t0
    step(
        f"broker ready at {broker.bootstrap} (pid {broker.pid}) in {timings['start (fresh)']:.1f}s"
    )
    pid = broker.pid
    check(pid is not None and pid_running(pid), "broker pid file missing or process not running")

    try:
        again = kb.start_broker(directory)
        check(
            again.bootstrap == broker.bootstrap, "second start of a running broker changed address"
        )

        step(f"creating topic {TOPIC} with {PARTITIONS} partitions")
        t0 = time.monotonic()
        kb.create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        timings["create topic"] = time.monotonic() - t0
        kb.create_topic(broker.bootstrap, TOPIC, PARTITIONS, exist_ok=True)

        step("producing committed and aborted transactions")
        t0 = time.monotonic()
        tx_id = f"selftest-{uuid.uuid4()}"
        committed, aborted = produce_transactions(broker.bootstrap, tx_id, "run1")
        timings["transactions"] = time.monotonic() - t0

        step("consuming with isolation.level=read_committed")
        t0 = time.monotonic()
        seen = consume_all(
            broker.bootstrap, "selftest-rc", "read_committed", len(committed), commit=True
        )
        timings["consume read_committed"] = time.monotonic() - t0
        check(len(seen) == len(set(seen)), "read_committed consumer saw duplicates")
        check(
            not (set(seen) & aborted),
            f"read_committed consumer saw {len(set(seen) & aborted)} aborted records",
        )
        check(
            set(seen) == committed,
            f"read_committed saw {len(set(seen))} of {len(committed)} committed records",
        )

        step("consuming with isolation.level=read_uncommitted (aborted records are in the log)")
        raw = consume_all(
            broker.bootstrap, "selftest-ru", "read_uncommitted", len(committed) + len(aborted)
        )
        check(
            set(raw) == committed | aborted,
            f"read_uncommitted saw {len(set(raw))} records, expected {len(committed | aborted)}",
        )

        offsets_before = committed_offsets(broker.bootstrap, "selftest-rc")
        check(
            all(o > 0 for o in offsets_before.values()),
            f"group offsets not committed: {offsets_before}",
        )

        step("growing the topic to 6 partitions")
        kb.add_partitions(broker.bootstrap, TOPIC, 6)

        step("restarting the broker")
        t0 = time.monotonic()
        broker = kb.restart_broker(broker)
        timings["restart (stop+start)"] = time.monotonic() - t0
        step(f"broker back at {broker.bootstrap} in {timings['restart (stop+start)']:.1f}s")
        check(
            pid is not None and not pid_running(pid),
            "old broker process still running after restart",
        )
        pid = broker.pid

        after = consume_all(
            broker.bootstrap, "selftest-after-restart", "read_committed", len(committed)
        )
        check(
            set(after) == committed and len(after) == len(committed),
            "committed records changed across the restart",
        )
        offsets_after = committed_offsets(broker.bootstrap, "selftest-rc")
        check(
            offsets_after == offsets_before,
            f"group offsets changed: {offsets_before} -> {offsets_after}",
        )

        from confluent_kafka.admin import AdminClient

        metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(
            TOPIC, timeout=30
        )
        check(
            len(metadata.topics[TOPIC].partitions) == 6,
            "partition count changed across the restart",
        )

        step("transactions after the restart (same transactional.id)")
        committed2, aborted2 = produce_transactions(broker.bootstrap, tx_id, "run2")
        everything = consume_all(
            broker.bootstrap, "selftest-final", "read_committed", len(committed) + len(committed2)
        )
        check(
            set(everything) == committed | committed2, "read_committed after restart does not match"
        )
        check(not (set(everything) & (aborted | aborted2)), "aborted records visible after restart")
    finally:
        step("stopping the broker")
        t0 = time.monotonic()
        kb.stop_broker(broker)
        timings["stop"] = time.monotonic() - t0

    check(
        pid is not None and not pid_running(pid), f"broker JVM (pid {pid}) still running after stop"
    )
    check(not (directory / "pid").exists(), "pid file left behind after stop")
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keep", type=Path, help="use (and keep) this broker directory")
    args = parser.parse_args()
    directory = (
        args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="rivermark-kafka-"))
    )
    try:
        timings = run(directory)
    except Exception as exc:  # report anything, including KafkaBrokerError
        print(f"[selftest] FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        log = directory / "broker.log"
        if log.exists():
            print(f"[selftest] broker log: {log}", file=sys.stderr)
        return 1
    for name, seconds in timings.items():
        print(f"[selftest] {name:<24} {seconds:6.2f}s")
    print("[selftest] OK")
    if not args.keep:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
