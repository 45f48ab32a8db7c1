"""An as-of join and an interval join of two topics of three partitions, written exactly once.

``test_join_eos.py`` runs it in a subprocess and SIGKILLs it.  ``orders`` and
``tiers`` hold JSON records (``{"k": key, "ts": seconds, ...}``), the key
deciding the partition on both; the orders are joined with the tier of their
key valid at their time (``how="left"``) and paired with the tier changes at
most 2 s apart.  Both topics are read to their end (``stop_at_end``), so a
run that is not killed joins every record and exits.

argv: bootstrap orders_topic tiers_topic output_topic group checkpoint_dir
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from rivermark import Stream
from rivermark.checkpoint import Job


def parse(value: bytes) -> dict[str, Any]:
    return dict(json.loads(value))


def event_time(r: dict[str, Any]) -> float:
    return float(r["ts"])


def tier(r: dict[str, Any]) -> Any:
    return r["v"]


def join_line(pair: tuple[dict[str, Any], Any]) -> str:
    r, tier = pair
    return f"join {r['i']} {tier}"


def pair_line(pair: tuple[dict[str, Any], Any]) -> str:
    r, c = pair
    return f"pair {r['i']} {None if c is None else c['i']}"


def late_line(r: dict[str, Any]) -> str:
    return f"late {r['i']}"


def joins(orders: Stream, tiers: Stream) -> Stream:
    """The lines of both joins and of the late records of either side."""
    order_times = orders.map(parse, name="parse_orders").timestamps(
        event_time, max_delay=1, name="order_times"
    )
    tier_times = tiers.map(parse, name="parse_tiers").timestamps(
        event_time, max_delay=1, name="tier_times"
    )
    table = tier_times.to_table(key="k", value=tier, name="table")
    joined = order_times.join_asof(table, key="k", how="left", name="join")
    pairs = order_times.join_interval(
        tier_times, key="k", lower=-2, upper=2, how="left", name="pairs"
    )
    return joined.map(join_line).union(
        pairs.map(pair_line),
        joined.late.map(late_line),
        table.late.map(late_line),
        pairs.late.map(late_line),
    )


def slow(value: bytes) -> bytes:
    time.sleep(0.002)  # every run is killed in the middle of the input
    return value


def sources(
    bootstrap: str, orders: str, tiers: str, group: str, stop_at_end: bool = True
) -> tuple[Stream, Stream]:
    """The two topics' sources, read to their end, or live with ``stop_at_end=False``."""

    def source(topic: str) -> Stream:
        return Stream.from_kafka(
            topic,
            {"bootstrap.servers": bootstrap, "group.id": group},
            poll_interval=0.02,
            stop_at_end=stop_at_end,
            name=f"kafka-{topic}",
        )

    return source(orders), source(tiers)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    bootstrap, orders, tiers, out, group, ckpt = sys.argv[1:7]
    left, right = sources(bootstrap, orders, tiers, group)
    joins(left.map(slow, name="slow"), right).to_kafka(
        out, {"bootstrap.servers": bootstrap}, exactly_once=True, transactional_id=f"tx-{out}"
    )
    Job(left, checkpoint=ckpt, every="0.3s").run()


if __name__ == "__main__":
    main()
