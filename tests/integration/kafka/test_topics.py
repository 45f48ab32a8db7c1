"""Input topics that are missing, or deleted and recreated, are not silent."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, JobFailedError
from rivermark.kafka import KafkaTopicError
from rivermark.testing.kafka_broker import create_topic

from .helpers import delete_topic, produce, run_in_thread, wait_for

pytestmark = pytest.mark.kafka


def test_a_missing_input_topic_is_warned_about_loudly(
    bootstrap: str, group: str, caplog: pytest.LogCaptureFixture
) -> None:
    missing = f"missing-{uuid.uuid4().hex[:12]}"
    src = Stream.from_kafka_batched(
        missing, {"bootstrap.servers": bootstrap, "group.id": group}, poll_interval=0.05
    )
    seen: list[bytes] = []
    src.flatten().sink(seen.append)
    with caplog.at_level(logging.WARNING, logger="rivermark.kafka"):
        src.start()
        try:
            wait_for(
                lambda: any(
                    f"input topic {missing!r} does not exist" in r.message for r in caplog.records
                ),
                what="the warning",
            )
            # it waits for the topic and reads it once it exists
            create_topic(bootstrap, missing, 1)
            produce(bootstrap, missing, ["a", "b"])
            wait_for(lambda: len(seen) == 2, what="the records of the new topic")
        finally:
            src.stop()
    assert seen == [b"a", b"b"]


def _recreate(bootstrap: str, topic: str) -> None:
    delete_topic(bootstrap, topic)
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [f"new{i}" for i in range(5)])


def test_a_recreated_input_topic_is_refused_unless_allowed(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, [f"old{i}" for i in range(50)])
    params = {"bootstrap.servers": bootstrap, "group.id": group}
    src = Stream.from_kafka_batched(topic, params, poll_interval=0.05, metadata_refresh=0.2)
    seen: list[bytes] = []
    src.flatten().sink(seen.append)
    job = Job(src, checkpoint=str(tmp_path / "a"), every="0.2s")
    t, errors = run_in_thread(job)
    try:
        wait_for(lambda: len(seen) == 50, what="the old records")
        _recreate(bootstrap, topic)
        t.join(90)
        assert not t.is_alive()
    finally:
        job.stop()
    (err,) = errors
    assert isinstance(err, JobFailedError)
    assert isinstance(src.failure, KafkaTopicError)
    # noticed by whichever comes first: the topic's new id at a partition listing,
    # or its first record below the position (test_topic_ids.py has only the id)
    assert f"the offsets of topic {topic!r} partition 0 went backwards" in str(
        src.failure
    ) or f"input topic {topic!r} was deleted and recreated" in str(src.failure)
    assert "allow_offset_reset=True" in str(src.failure)
    assert seen == [f"old{i}".encode() for i in range(50)]


def test_a_recreated_input_topic_is_read_from_its_new_offsets_when_allowed(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, [f"old{i}" for i in range(50)])
    src = Stream.from_kafka_batched(
        topic,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        metadata_refresh=0.2,
        allow_offset_reset=True,
    )
    seen: list[bytes] = []
    src.flatten().sink(seen.append)
    job = Job(src, checkpoint=str(tmp_path / "ckpt"), every="0.2s")
    t, errors = run_in_thread(job)
    try:
        wait_for(lambda: len(seen) == 50, what="the old records")
        _recreate(bootstrap, topic)
        wait_for(lambda: len(seen) == 55, what="the new topic's records")
    finally:
        job.stop()
        t.join(30)
    assert errors == []
    assert seen == [f"old{i}".encode() for i in range(50)] + [f"new{i}".encode() for i in range(5)]
    assert src.position_now() == {f"{topic}:0": 5}
