"""The seed's DataFrame pipeline over Kafka, its sums in PostgreSQL (upsert) and Delta (merge).

A producer thread writes JSON records to a topic while ``apps/seed0_tables_app.py``
reads it and is SIGKILLed at random moments, restarted until it finishes.
The final PostgreSQL table and Delta table must hold pandas' sums over every
produced record, and the window's Delta table one row per batch and name
exactly once (no epoch written twice, none lost).
"""

from __future__ import annotations

import json
import random
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pandas as pd
import psycopg
import pytest
from deltalake import DeltaTable

from rivermark.testing.crash import run_with_crashes
from rivermark.testing.kafka_broker import KafkaBroker, create_topic, start_broker, stop_broker

from .conftest import PgServer

pytestmark = [pytest.mark.kafka, pytest.mark.crash]

APP = Path(__file__).parents[1] / "apps" / "seed0_tables_app.py"
NAMES = ["Alice", "Tom", "Linda", "Bob", "Eve"]
N = 2000
CHUNK = 10


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    b = start_broker(tmp_path_factory.mktemp("kafka") / "broker")
    try:
        yield b
    finally:
        stop_broker(b)


def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]], kills: threading.Semaphore) -> None:  # fmt: skip
    """Records in record batches of CHUNK, a pause for a kill every fifth, then the end."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 10_000, "enable.idempotence": True})  # fmt: skip
    fifth = len(records) // 5
    for i in range(0, len(records), CHUNK):
        if i and i % fifth == 0:
            kills.acquire(timeout=240)  # a kill lands while records are still coming
        for r in records[i : i + CHUNK]:
            p.produce(topic, json.dumps(r).encode(), partition=0)
        assert p.flush(30) == 0
    p.produce(topic, json.dumps({"Name": "__end__"}).encode(), partition=0)
    assert p.flush(30) == 0


def test_seed_pipeline_sums_land_exactly_once_in_postgresql_and_delta(
    broker: KafkaBroker, pg_server: PgServer, tmp_path: Path
) -> None:
    topic = f"seed-tables-{random.Random().randrange(10**9)}"
    create_topic(broker.bootstrap, topic, partitions=1)
    rng = random.Random(3)
    records = [{"Name": rng.choice(NAMES), "Amount": rng.randrange(1, 1000)} for _ in range(N)]
    pg_url = pg_server.new_database()
    delta = str(tmp_path / "delta")
    ckpt = tmp_path / "ckpt"
    kills = threading.Semaphore(0)
    producer = threading.Thread(target=_produce, args=(broker.bootstrap, topic, records, kills))
    producer.start()
    try:
        report = run_with_crashes(
            [sys.executable, str(APP), broker.bootstrap, topic, str(ckpt), pg_url, delta],
            kills=6, min_delay=0.5, max_delay=2.0, seed=9, timeout=120,
            on_kill=lambda n: kills.release(),
            ready=lambda pid: (ckpt / "LOCK").exists(),
        )  # fmt: skip
    finally:
        for _ in range(8):
            kills.release()
        producer.join(300)
    assert report.completed and report.kills == 6, report.summary()
    expected = {k: int(v) for k, v in pd.DataFrame(records).groupby("Name").Amount.sum().items()}
    with psycopg.connect(pg_url) as c:
        assert dict(c.execute('SELECT "Name", total FROM totals').fetchall()) == expected
    t = DeltaTable(f"{delta}/totals").to_pyarrow_table()
    assert dict(zip(t.column("Name").to_pylist(), t.column("total").to_pylist())) == expected
    # the window: one row per batch of CHUNK records and name in it, each batch once
    w = DeltaTable(f"{delta}/windows").to_pyarrow_table()
    per_batch = sum(len({r["Name"] for r in records[end - 5 : end]}) for end in range(CHUNK, N + 1, CHUNK))  # fmt: skip
    assert w.num_rows == per_batch, report.summary()
