"""A table's bootstrap from a topic written in transactions (an exactly-once producer).

The topic holds committed changes, an aborted transaction and, while the
job starts, a transaction still open.  The job reads committed records
only (``read_committed``), so the bootstrap reads up to the last stable
offset: it must neither wait for the open transaction (its producer may
take minutes) nor count the transaction markers and aborted records as
unread, and the table holds the committed changes only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import confluent_kafka as ck

from .test_table_bootstrap import KEYS, _compacted, _lookup_job, _orders, _produce, _run_until


def _transaction(producer: ck.Producer, topic: str, label: str, ts: int) -> None:
    """Every key's change to ``label`` at time ``ts``, in the producer's open transaction."""
    for k in range(KEYS):
        value = json.dumps({"k": k, "ts": ts, "v": label}).encode()
        producer.produce(topic, value=value, key=str(k).encode(), partition=k % 2)
    assert producer.flush(30) == 0


def _producer(bootstrap: str) -> ck.Producer:
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"tiers-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": 300_000,  # the open one stays open for the test
        }
    )
    p.init_transactions(30)
    return p


def test_a_bootstrap_reads_committed_changes_and_does_not_wait_for_an_open_transaction(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    tiers, orders = _compacted(bootstrap), new_topic(prefix="orders")
    p = _producer(bootstrap)
    for ts, label, commit in [(1, "v1", True), (2, "aborted", False), (3, "v3", True)]:
        p.begin_transaction()
        _transaction(p, tiers, label, ts)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    p.begin_transaction()
    _transaction(p, tiers, "open", 4)  # still open while the job bootstraps and joins
    _produce(bootstrap, orders, _orders(range(40)))
    try:
        job, out = _lookup_job(bootstrap, tiers, orders, group, tmp_path / "ck", True)
        _run_until(job, lambda: len(out) >= 40, "every order joined")
        # every order sees the last committed version; none an aborted or open one
        assert [v for _, v in out] == ["v3"] * 40, sorted({str(v) for _, v in out})
    finally:
        p.abort_transaction(30)
