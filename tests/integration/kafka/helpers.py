from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import confluent_kafka as ck

from rivermark.testing import run_in_thread, wait_for
from rivermark.testing.faults import FAULT_POINTS

__all__ = ["run_in_thread", "wait_for"]  # the tests take them from here too


def input_producer(bootstrap: str) -> Any:
    """The producer that writes a test's input, keeping each partition's order.

    A producer with several requests in flight retries one the broker did not
    answer in time while later ones go ahead, so on a starved broker it can
    reorder records within a partition: the job under test then computes over
    another input than the one the test expects (the same records in another
    order give the same totals but other running totals).  One request in
    flight per broker keeps the order; a two-minute request timeout keeps a
    late answer from a starved broker from being taken for a lost request
    (whose retry would write the records twice).  Not idempotent: such a
    producer takes half a second to get its producer id, and the tests make
    hundreds of producers.
    """
    return ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": 1,
            "request.timeout.ms": 120_000,
        }
    )


def produce(
    bootstrap: str, topic: str, values: Iterable[Any], partition: int | None = None, key: Any = None
) -> int:
    p = input_producer(bootstrap)
    n = 0
    for v in values:
        kwargs: dict[str, Any] = {"value": v if isinstance(v, bytes) else str(v).encode()}
        if partition is not None:
            kwargs["partition"] = partition
        if key is not None:
            kwargs["key"] = key(v) if callable(key) else key
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
    assert p.flush(30) == 0
    return n


def produce_at(bootstrap: str, topic: str, records: list[tuple[int, bytes, int]]) -> None:
    """Write ``(partition, value, timestamp in ms)`` records, each with its explicit timestamp."""
    p = input_producer(bootstrap)
    for partition, value, ms in records:
        while True:
            try:
                p.produce(topic, value=value, partition=partition, timestamp=ms)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0


def consume_all(
    bootstrap: str,
    topic: str,
    expected: int | None = None,
    timeout: float = 30.0,
    committed_only: bool = False,
) -> list[Any]:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if committed_only:
        conf["isolation.level"] = "read_committed"
    c = ck.Consumer(conf)
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    idle = 0
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(1000, timeout=0.5)
            real = [m for m in msgs if m.error() is None]
            out.extend(m for m in real)
            if expected is not None and len(out) >= expected:
                # read a little more to catch duplicates
                out.extend(m for m in c.consume(1000, timeout=1.0) if m.error() is None)
                break
            idle = idle + 1 if not real else 0
            if expected is None and out and idle >= 4:
                break
    finally:
        c.close()
    return out


_COORDINATOR_MOVING = {
    ck.KafkaError.NOT_COORDINATOR,
    ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    ck.KafkaError.COORDINATOR_NOT_AVAILABLE,
    ck.KafkaError._TRANSPORT,
    ck.KafkaError._TIMED_OUT,
}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                tps = c.committed(
                    [ck.TopicPartition(topic, p) for p in range(partitions)], timeout=10
                )
                return {tp.partition: tp.offset for tp in tps}
            except ck.KafkaException as e:
                # a fresh broker's group coordinator takes a while to load
                err = e.args[0]
                retry = err.retriable() or err.code() in _COORDINATOR_MOVING
                if not retry or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[Any, Any]],
    partition: int | Callable[[Any], int] = 0,
) -> None:
    """Produce (key, value) pairs as they are (None stays a null key or value).

    They go to ``partition``, or to ``partition(key)`` if it is a function;
    all of them are written (flushed) when this returns.
    """
    p = input_producer(bootstrap)
    for key, value in records:
        part = partition(key) if callable(partition) else partition
        p.produce(topic, value=value, key=key, partition=part)
    assert p.flush(30) == 0


def delete_group(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_consumer_groups([group], request_timeout=30).values():
        fut.result(30)


def delete_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)

    def gone() -> bool:
        return topic not in admin.list_topics(timeout=5).topics

    wait_for(gone, timeout, f"topic {topic!r} deleted")


FAULT_APP = Path(__file__).with_name("fault_app.py")


def start_script(
    script: Path, args: list[str], fault: str | None, log: Path
) -> subprocess.Popen[bytes]:
    """``python SCRIPT ARGS...`` (``RIVERMARK_FAULT=fault`` if given); stderr added to ``log``."""
    env = {k: v for k, v in os.environ.items() if k != "RIVERMARK_FAULT"}
    if fault:
        env["RIVERMARK_FAULT"] = fault
    with open(log, "ab") as f:
        f.write(f"--- run fault={fault}\n".encode())
        f.flush()
        # the child writes to its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, str(script), *args], env=env, stdout=subprocess.DEVNULL, stderr=f
        )


def kill_runs(
    script: Path,
    args: list[str],
    log: Path,
    rnd: random.Random,
    *,
    kills: int = 4,
    alive: tuple[float, float] = (1.0, 2.5),
    fault_timeout: float = 120,
) -> None:
    """Runs of a job script killed at every checkpoint fault point, then ``kills`` times at random.

    A run with a fault point must die of it (within ``fault_timeout``
    seconds); a run without one is killed (SIGKILL) after
    ``rnd.uniform(*alive)`` seconds and must be running until then.
    """
    for point in FAULT_POINTS:
        proc = start_script(script, args, f"{point}:3", log)
        assert proc.wait(timeout=fault_timeout) == -signal.SIGKILL, log.read_text()[-3000:]
    for _ in range(kills):
        proc = start_script(script, args, None, log)
        time.sleep(rnd.uniform(*alive))
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def killed_then_finished(
    script: Path, args: list[str], log: Path, rnd: random.Random, out: str, n: int
) -> list[str]:
    """The committed output of a job killed many times (:func:`kill_runs`), then run to its end.

    ``args[0]`` is the bootstrap address; ``out`` the output topic, of which
    ``n`` records are expected.
    """
    kill_runs(script, args, log, rnd)
    proc = start_script(script, args, None, log)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    got = consume_all(args[0], out, expected=n, timeout=60, committed_only=True)
    return [m.value().decode() for m in got]


def start_app(
    ckpt: Path,
    env: dict[str, str],
    log: Path,
    every: str = "0.3s",
    fault: str | None = None,
) -> subprocess.Popen[bytes]:
    """``rivermark run fault_app.py:src`` in a subprocess; stderr appended to ``log``."""
    full = {k: v for k, v in os.environ.items() if k != "RIVERMARK_FAULT"}
    full.update(env)
    if fault:
        full["RIVERMARK_FAULT"] = fault
    with open(log, "ab") as f:
        f.write(f"--- run fault={fault}\n".encode())
        return subprocess.Popen(
            [sys.executable, "-m", "rivermark.cli", "run", f"{FAULT_APP}:src"]
            + ["--checkpoint", str(ckpt), "--every", every],
            env=full,
            stdout=subprocess.DEVNULL,
            stderr=f,
        )
