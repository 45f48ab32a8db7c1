"""An exactly-once app for the fault tests, run with ``rivermark run fault_app.py:src``.

Configured through the environment: ``FAULT_BOOTSTRAP``, ``FAULT_IN``,
``FAULT_OUT``, ``FAULT_GROUP``, ``FAULT_TXID`` (empty: derived), ``FAULT_STOP_AT_END``
("1": a bounded read), ``FAULT_THROTTLE`` (seconds per batch), ``FAULT_TIMEOUT``
(the sink's flush and commit deadlines, seconds), ``FAULT_QUEUE`` (the most records
the sink's producer queues, ``queue.buffering.max.messages``; empty: librdkafka's default).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import rivermark.kafka  # noqa: F401
from rivermark import Stream

env = os.environ
bootstrap = env["FAULT_BOOTSTRAP"]
throttle = float(env.get("FAULT_THROTTLE", "0.01"))
deadline = float(env.get("FAULT_TIMEOUT", "60"))
producer_config: dict[str, Any] = {"bootstrap.servers": bootstrap}
if env.get("FAULT_QUEUE"):
    producer_config["queue.buffering.max.messages"] = int(env["FAULT_QUEUE"])


def count(state: dict[str, int], rec: dict[str, Any]) -> tuple[dict[str, int], str]:
    k = str(rec["k"])
    state[k] = state.get(k, 0) + 1
    return state, json.dumps([k, state[k]])


def slow(batch: list[bytes]) -> list[bytes]:
    time.sleep(throttle)
    return batch


src = Stream.from_kafka_batched(
    env["FAULT_IN"],
    {"bootstrap.servers": bootstrap, "group.id": env["FAULT_GROUP"]},
    poll_interval=0.05,
    max_batch_size=50,
    stop_at_end=env.get("FAULT_STOP_AT_END") == "1",
)
(
    src.map(slow)
    .flatten()
    .map(json.loads)
    .accumulate(count, start={}, returns_state=True, name="counts")
    .to_kafka(
        env["FAULT_OUT"],
        producer_config,
        exactly_once=True,
        transactional_id=env.get("FAULT_TXID") or None,
        flush_timeout=deadline,
        commit_timeout=deadline,
    )
)
