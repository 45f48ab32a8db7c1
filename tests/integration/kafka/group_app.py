"""The partitioned exactly-once app the group scale-out test runs in several processes.

argv: bootstrap input_topic output_topic group checkpoint_location [mode]

Mode ``sums`` (the default): each task keeps a running sum per key of its
partition's records and writes ``[key, sum]`` to the output topic in Kafka
transactions, keyed by the key.

Mode ``windows``: each task reads its partition one record at a time with
the Kafka record timestamps as event times (its own watermark, from its
partition alone) and writes, per key, each closed 10 s tumbling window as
``[key, start, [i, ...]]`` (the ``i`` of its records in arrival order) and
each late record as ``[key, "late", i]`` (:func:`windows_graph`).
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import time
from typing import Any

import rivermark.kafka  # noqa: F401
from rivermark import Stream
from rivermark.kafka import PartitionedJob
from rivermark.operators.eventtime import WindowResult


def add(state: dict[str, int], rec: dict[str, Any]) -> tuple[dict[str, int], str]:
    k = str(rec["k"])
    state[k] = state.get(k, 0) + int(rec["v"])
    return state, json.dumps([k, state[k]])


def slow(batch: list[bytes]) -> list[bytes]:
    time.sleep(0.001 * len(batch))  # some work per record, so that kills land mid-data
    return batch


#: the event-time windows of mode ``windows``: size and the allowed disorder (seconds)
WINDOW = 10.0
MAX_DELAY = 5.0


def slow_one(value: bytes) -> bytes:
    time.sleep(0.001)
    return value


def key_of(value: bytes) -> str:
    return str(json.loads(value)["k"])


def index_of(value: bytes) -> int:
    return int(json.loads(value)["i"])


def window_json(w: WindowResult) -> str:
    return json.dumps([w.key, w.start, list(w.value)])


def late_json(value: bytes) -> str:
    return json.dumps([key_of(value), "late", index_of(value)])


def windows_graph(source: Stream) -> Stream:
    """Mode ``windows`` below the source (the test runs it in-process for the expected output)."""
    times = source.map(slow_one).timestamps(max_delay=MAX_DELAY, name="times")
    windows = times.tumbling_window(
        WINDOW, key=key_of, value=index_of, agg="collect", name="windows"
    )
    return windows.map(window_json).union(windows.late.map(late_json))


def _dump_tasks(signum: int, frame: Any) -> None:
    import asyncio

    from rivermark.core import runtime

    loop = runtime.background_loop()

    def dump() -> None:
        for task in asyncio.all_tasks(loop):
            print(f"task {task.get_name()}:", file=sys.stderr)
            coro: Any = task.get_coro()
            while coro is not None:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                if frame is not None:
                    print(
                        f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}",
                        file=sys.stderr,
                    )
                coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)

    loop.call_soon_threadsafe(dump)


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(process)d %(name)s %(message)s"
    )
    faulthandler.register(signal.SIGUSR1)  # thread dumps when a test is stuck
    signal.signal(signal.SIGUSR2, _dump_tasks)  # and the event loop's tasks
    bootstrap, inp, out, group, ckpt = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "sums"

    def build_windows(source: Stream) -> Stream:
        return windows_graph(source).to_kafka(
            out, {"bootstrap.servers": bootstrap}, key=lambda s: json.loads(s)[0], exactly_once=True
        )

    def build(source: Stream) -> Stream:
        return (
            source.map(slow)
            .flatten()
            .map(json.loads)
            .accumulate(add, start={}, returns_state=True)
            .to_kafka(
                out,
                {"bootstrap.servers": bootstrap},
                key=lambda s: json.loads(s)[0],
                exactly_once=True,
            )
        )

    windows = mode == "windows"
    job = PartitionedJob(
        inp,
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            # short, so that a killed or paused process loses its partitions soon;
            # a test that does neither may ask for longer (APP_SESSION_MS)
            "session.timeout.ms": int(os.environ.get("APP_SESSION_MS", "6000")),
            "heartbeat.interval.ms": 500,
        },
        build_windows if windows else build,
        checkpoint=ckpt,
        every="0.5s",
        # the windows (KeyedState) in RocksDB: a directory per task on this machine,
        # which a task moved to another process here finds and verifies
        **({"state": "rocksdb", "state_dir": f"{ckpt}-state"} if windows else {}),
        batched=not windows,
        source_options={"poll_interval": 0.05, "timestamps": True}
        if windows
        else {"poll_interval": 0.05, "max_batch_size": 50},
        # the control API for this process's tasks, when the test asks for it
        control_port=int(os.environ["APP_CONTROL_PORT"])
        if "APP_CONTROL_PORT" in os.environ
        else None,
    )
    job.install_signal_handlers()
    job.run()


if __name__ == "__main__":
    main()
