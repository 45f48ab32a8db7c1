"""The exactly-once pipeline the crash-loop test runs (and SIGKILLs) in a subprocess.

argv: bootstrap input_topic output_topic group checkpoint_dir
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import rivermark.kafka  # noqa: F401
from rivermark import Stream
from rivermark.checkpoint import Job


def count(state: dict[str, int], rec: dict[str, Any]) -> tuple[dict[str, int], str]:
    k = str(rec["k"])
    state[k] = state.get(k, 0) + 1
    return state, json.dumps([k, state[k]])


def slow(batch: list[bytes]) -> list[bytes]:
    # throttle, so that every run is killed in the middle of the input
    time.sleep(0.012)
    return batch


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    bootstrap, inp, out, group, ckpt = sys.argv[1:6]
    src = Stream.from_kafka_batched(
        inp,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        max_batch_size=100,
    )
    (
        src.map(slow)
        .flatten()
        .map(json.loads)
        .accumulate(count, start={}, returns_state=True)
        .to_kafka(
            out, {"bootstrap.servers": bootstrap}, exactly_once=True, transactional_id=f"tx-{out}"
        )
    )
    Job(src, checkpoint=ckpt, every="0.5s").run()


if __name__ == "__main__":
    main()
