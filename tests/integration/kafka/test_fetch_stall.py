"""A partition the Kafka client stopped fetching is found and assigned again.

librdkafka can stop fetching an assigned partition after a broker restart,
for good and without a word.  The stand-in here is a partition paused on the
source's own consumer (which the source never pauses): its records stay on
the broker until the source's fetch watch assigns it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from rivermark import Stream
from rivermark.kafka import stalls

from .helpers import committed, produce, wait_for

pytestmark = pytest.mark.kafka


@pytest.fixture
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stalls, "STALL_AFTER", 1.0)
    monkeypatch.setattr(stalls, "CHECK_EVERY", 0.1)


@pytest.mark.usefixtures("quick_watch")
def test_a_partition_the_client_stopped_fetching_is_assigned_again_and_read(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rivermark.kafka.stalls")
    inp = new_topic(partitions=2)
    produce(bootstrap, inp, range(20), partition=0)
    produce(bootstrap, inp, range(20, 40), partition=1)
    src = Stream.from_kafka_batched(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, poll_interval=0.05
    )
    got = src.flatten().sink_to_list()
    src.start()
    try:
        wait_for(lambda: len(got) >= 40, what="the first records")
        src.consumer.pause([ck.TopicPartition(inp, 1)])
        produce(bootstrap, inp, range(40, 60), partition=1)
        produce(bootstrap, inp, range(60, 80), partition=0)
        wait_for(lambda: len(got) >= 80, timeout=120, what="the stopped partition's records")
        wait_for(lambda: "had stopped fetching it" in caplog.text, what="the warning")
        wait_for(lambda: committed(bootstrap, group, inp, 2) == {0: 40, 1: 40}, what="commits")
    finally:
        src.stop()
    assert sorted(int(v) for v in got) == list(range(80))
    # the stall's own warnings (a stop on a loaded machine may add its own lines:
    # the consumer's last wait outlasting the stop's bound leaves the consumer behind)
    warning = [
        r.getMessage()
        for r in caplog.records
        if r.name == stalls.__name__ and r.levelno == logging.WARNING
    ]
    assert len(warning) == 1, warning
    assert f"topic {inp!r} partition 1 delivered no record" in warning[0]
    assert "assigned again at offset 20" in warning[0]


@pytest.mark.usefixtures("quick_watch")
def test_the_commit_marker_ending_a_transactional_topic_is_no_stall(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rivermark.kafka.stalls")
    inp = new_topic(partitions=1)
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{group}"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(inp, str(i).encode(), partition=0)
    p.commit_transaction(30)
    src = Stream.from_kafka_batched(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, poll_interval=0.05
    )
    got = src.flatten().sink_to_list()
    src.start()
    try:
        wait_for(lambda: len(got) >= 10, what="the records")
        # the marker holds the last offset (10) and is never delivered: the watch
        # looks at the idle partition again and again, and leaves it alone
        wait_for(lambda: src._fetch_watch.lookups >= 3, what="three looks")
    finally:
        src.stop()
    assert sorted(int(v) for v in got) == list(range(10))
    assert "assigning it again" not in caplog.text
    assert not [r for r in caplog.records if r.name == stalls.__name__ and r.levelno > logging.INFO]
