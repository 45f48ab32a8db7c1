"""SIGKILL an event-time job reading three Kafka partitions with the exactly-once sink.

The job (``eventtime_eos_app.py``) windows records by their Kafka timestamps,
some of them late, and writes the windows and the late records to a topic in
transactions.  It is killed at every checkpoint fault point and at random
moments; each restart reads the partitions interleaved in another way.  A
``read_committed`` consumer must then read the windows of an uninterrupted
backfill of the same topic, each window node's in the same order, and the
same late records.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job

from .eventtime_eos_app import windows
from .helpers import killed_then_finished, produce_at

pytestmark = pytest.mark.kafka

APP = Path(__file__).with_name("eventtime_eos_app.py")
PER_PARTITION = 2500  # about 16 s of work at 2 ms a record: every run is killed mid-way


def _split(lines: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The tumbling windows and the sessions, each in their order, and the late records
    sorted (the two window nodes' lines interleave as the watermark moved in steps, and
    late records come as they arrive: both depend on how the partitions were read)."""
    return (
        [x for x in lines if x.startswith("w ")],
        [x for x in lines if x.startswith("s ")],
        sorted(x for x in lines if x.startswith("late ")),
    )


def test_windows_over_three_partitions_are_exact_across_sigkills(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp, out = new_topic(partitions=3, prefix="in"), new_topic(partitions=1, prefix="out")
    base = (int(time.time()) - 7200) // 60 * 60 * 1000
    rnd = random.Random(24)
    records = []
    for i in range(3 * PER_PARTITION):
        behind = rnd.choice([0, 0, 0, 400, 1_500, 7_000])  # within and beyond 2 s
        value = f"{'abcd'[rnd.randrange(4)]}-{i}".encode()
        records.append((i % 3, value, base + i * 150 - behind))
    produce_at(bootstrap, inp, records)
    # what an uninterrupted backfill writes
    src = Stream.from_kafka(
        inp,
        {"bootstrap.servers": bootstrap, "group.id": f"{group}-ref"},
        timestamps=True,
        stop_at_end=True,
    )
    reference = windows(src).sink_to_list()
    Job(src, checkpoint=str(tmp_path / "ref"), every=None).run()
    expected = _split(reference)
    assert expected[2] and len(expected[0]) > 100  # late records, and many windows

    args = [bootstrap, inp, out, group, str(tmp_path / "ckpt")]
    log = tmp_path / "runs.log"
    # the last run reads to the end of the topic, closes every window and ends
    got = killed_then_finished(APP, args, log, rnd, out, len(reference))
    assert _split(got) == expected
