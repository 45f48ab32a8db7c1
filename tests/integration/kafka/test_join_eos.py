"""SIGKILL a join of two topics of three partitions each, written exactly once to Kafka.

The job (``join_eos_app.py``) joins orders with the tier of their key valid
at their time and pairs them with the tier changes at most 2 s apart, both
topics out of order, with deletes and late records.  It is killed at every
checkpoint fault point and at random moments; each restart reads the six
partitions interleaved in another way.  A ``read_committed`` consumer must
then read the lines of an uninterrupted backfill of the same topics: the
same joins, pairs and late records, each exactly once (in another order:
the lines of different partitions interleave as the partitions were read).
The same topics read live, while the records trickle in, join the same.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark.checkpoint import Job
from rivermark.testing import run_in_thread, wait_for

from .helpers import killed_then_finished, produce_at
from .join_eos_app import joins, sources

pytestmark = pytest.mark.kafka

APP = Path(__file__).with_name("join_eos_app.py")
ORDERS = 6000  # about 12 s of work at 2 ms an order: every run is killed mid-way
KEYS = 30


def _records(rnd: random.Random) -> tuple[list[tuple[int, bytes, int]], ...]:
    """Tier changes and orders, the key deciding the partition (k % 3) on both topics."""
    tiers, orders = [], []
    for i in range(ORDERS // 4):
        k = i % KEYS
        ts = i * 0.2 - rnd.choice([0, 0, 0.3, 0.8, 5.0])  # within and beyond 1 s
        v = None if i % 17 == 0 else f"{k}@{i}"  # None deletes the key
        tiers.append((k % 3, json.dumps({"i": i, "k": k, "ts": round(ts, 2), "v": v}).encode(), 0))
    for i in range(ORDERS):
        k = rnd.randrange(KEYS + 3)  # three keys never in the table
        ts = i * 0.05 - rnd.choice([0, 0, 0, 0.4, 0.9, 6.0])
        orders.append((k % 3, json.dumps({"i": i, "k": k, "ts": round(ts, 2)}).encode(), 0))
    return tiers, orders


def test_joins_over_three_partitions_a_side_are_exact_across_sigkills(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    orders, tiers = (
        new_topic(partitions=3, prefix="orders"),
        new_topic(partitions=3, prefix="tiers"),
    )
    out = new_topic(partitions=1, prefix="out")
    rnd = random.Random(37)
    tier_records, order_records = _records(rnd)
    ms = (int(time.time()) - 3600) * 1000
    produce_at(bootstrap, tiers, [(p, v, ms) for p, v, _ in tier_records])
    produce_at(bootstrap, orders, [(p, v, ms) for p, v, _ in order_records])
    # what an uninterrupted backfill writes
    left, right = sources(bootstrap, orders, tiers, f"{group}-ref")
    reference = joins(left, right).sink_to_list()
    Job(left, checkpoint=str(tmp_path / "ref"), every=None).run()
    expected = sorted(reference)
    kinds = [line.split()[0] for line in expected]
    assert kinds.count("join") + kinds.count("late") >= ORDERS  # every order joined or late
    assert kinds.count("late") > 10
    assert sum(line.startswith("join ") and line.endswith(" None") for line in expected) > 10
    assert sum(line.startswith("pair ") and not line.endswith(" None") for line in expected) > 100

    args = [bootstrap, orders, tiers, out, group, str(tmp_path / "ckpt")]
    log = tmp_path / "runs.log"
    # the last run reads both topics to their end, joins every waiting order and ends
    got = killed_then_finished(APP, args, log, rnd, out, len(reference))
    assert sorted(got) == expected


def _real(lines: list[str]) -> list[str]:
    """The lines sorted, without those of the closing records (ids below 0)."""
    return sorted(x for x in lines if not x.split()[1].startswith("-"))


def test_a_live_read_joins_as_a_backfill(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    orders, tiers = new_topic(3, "orders"), new_topic(3, "tiers")
    tier_records, order_records = _records(random.Random(41))
    # one closing record a partition, far ahead: it moves every watermark past
    # every record, so a live read (which never ends its input) joins them all
    for p in range(3):
        tier_records.append((p, json.dumps({"i": -1 - p, "k": p, "ts": 1e6, "v": "x"}).encode(), 0))
        order_records.append((p, json.dumps({"i": -1 - p, "k": p, "ts": 1e6}).encode(), 0))
    ms = (int(time.time()) - 3600) * 1000
    left, right = sources(bootstrap, orders, tiers, f"{group}-live", stop_at_end=False)
    live = joins(left, right).sink_to_list()
    job = Job(left, checkpoint=str(tmp_path / "live"), every="0.5s")
    thread, raised = run_in_thread(job)
    try:
        # the records trickle in: small batches, the topics and partitions interleaved
        rnd = random.Random(5)
        t, o = 0, 0
        while t < len(tier_records) or o < len(order_records):
            if o >= len(order_records) or (t < len(tier_records) and rnd.random() < 0.2):
                n = rnd.randint(1, 20)
                produce_at(bootstrap, tiers, [(p, v, ms) for p, v, _ in tier_records[t : t + n]])
                t += n
            else:
                n = rnd.randint(1, 80)
                produce_at(bootstrap, orders, [(p, v, ms) for p, v, _ in order_records[o : o + n]])
                o += n
        # what a backfill of the same topics writes
        back_left, back_right = sources(bootstrap, orders, tiers, f"{group}-back")
        backfill = joins(back_left, back_right).sink_to_list()
        Job(back_left, checkpoint=str(tmp_path / "back"), every=None).run()
        expected = _real(backfill)
        assert len(expected) > ORDERS
        wait_for(lambda: len(_real(live)) >= len(expected), timeout=120, what="the live joins")
    finally:
        job.stop()
        thread.join(60)
    assert raised == []
    assert _real(live) == expected
