"""A lookup join against a table bootstrapped from Kafka, run by ``rivermark run``.

``test_table_bootstrap.py`` runs it with ``rivermark run
table_bootstrap_app.py:orders`` and SIGKILLs it.  Configured through the
environment: ``TB_BOOTSTRAP`` (the broker), ``TB_TIERS`` (the table's topic:
JSON changes ``{"k": key, "ts": seconds, "v": value}``), ``TB_ORDERS`` (JSON
records ``{"i": id, "k": key}``), ``TB_GROUP`` and ``TB_OUT`` (a text file:
one line ``"<id> <value>"`` per order).  Both topics are read live.  The
records are parsed as ``join_eos_app.py`` parses them (``rivermark run``
puts this file's directory first on the import path).
"""

from __future__ import annotations

import os
from typing import Any

from join_eos_app import event_time, parse, tier

import rivermark.kafka  # noqa: F401  (registers from_kafka)
from rivermark import Stream

env = os.environ
params = {"bootstrap.servers": env["TB_BOOTSTRAP"], "group.id": env["TB_GROUP"]}


def line(pair: tuple[dict[str, Any], Any]) -> str:
    r, v = pair
    return f"{r['i']} {v}"


tiers = Stream.from_kafka(env["TB_TIERS"], params, poll_interval=0.02, name="kafka-tiers")
orders = Stream.from_kafka(env["TB_ORDERS"], params, poll_interval=0.02, name="kafka-orders")
table = (
    tiers.map(parse, name="parse_tiers")
    .timestamps(event_time, name="tier_times")
    .to_table(key="k", value=tier, bootstrap=True, name="table")
)
(
    orders.map(parse, name="parse_orders")
    .join_asof(table, key="k", how="left", mode="lookup", name="join")
    .map(line, name="line")
    .sink_to_textfile(env["TB_OUT"], name="out")
)
