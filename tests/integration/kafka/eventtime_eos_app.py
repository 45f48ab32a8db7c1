"""An event-time job over a topic of three partitions, written exactly once to Kafka.

``test_eventtime_eos.py`` runs it in a subprocess and SIGKILLs it; it reads
the topic to its end (``stop_at_end``), so a run that is not killed ends its
input, closes every window and exits.

argv: bootstrap input_topic output_topic group checkpoint_dir
"""

from __future__ import annotations

import logging
import sys
import time

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.operators.eventtime import WindowResult


def key(value: bytes) -> str:
    return value.split(b"-")[0].decode()


def tumble_line(w: WindowResult) -> str:
    return f"w {w.start} {w.key} {w.value}"


def session_line(w: WindowResult) -> str:
    return f"s {w.start} {w.end} {w.key} {w.value}"


def late_line(value: bytes) -> str:
    return f"late {value.decode()}"


def windows(src: Stream) -> Stream:
    """Tumbling and session windows of the records' Kafka timestamps, and the late records."""
    times = src.timestamps(max_delay=2, name="times")
    tumble = times.tumbling_window(5, key=key, agg="count", grace=1, name="tumble")
    sessions = times.session_window(2, key=key, agg="count", name="sessions")
    return tumble.map(tumble_line).union(sessions.map(session_line), tumble.late.map(late_line))


def slow(value: bytes) -> bytes:
    time.sleep(0.002)  # every run is killed in the middle of the input
    return value


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    bootstrap, inp, out, group, ckpt = sys.argv[1:6]
    src = Stream.from_kafka(
        inp,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.02,
        timestamps=True,
        stop_at_end=True,
        name="kafka",
    )
    windows(src.map(slow, name="slow")).to_kafka(
        out, {"bootstrap.servers": bootstrap}, exactly_once=True, transactional_id=f"tx-{out}"
    )
    Job(src, checkpoint=ckpt, every="0.3s").run()


if __name__ == "__main__":
    main()
