"""The topic ids in a Kafka source's position, and positions written before them."""

from __future__ import annotations

import logging

import pytest

from rivermark.checkpoint.tools.inspection import describe_position
from rivermark.kafka import KafkaBatchedSource
from rivermark.kafka.topic_ids import TOPIC_IDS_KEY, TopicIds, split_position, with_topic_ids

CONF = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


def test_a_position_written_before_topic_ids_restores_as_it_was() -> None:
    src = KafkaBatchedSource(["a", "b"], CONF)
    src.seek({"a:0": 3, "b:1": 7})
    assert src.position() == {"a:0": 3, "b:1": 7}  # no ids to check: accepted
    assert src.position_now() == {"a:0": 3, "b:1": 7}


def test_a_position_with_topic_ids_round_trips() -> None:
    position = {"a:0": 3, "b:1": 7, TOPIC_IDS_KEY: {"a": "id-a", "b": "id-b"}}
    src = KafkaBatchedSource(["a", "b"], CONF)
    src.seek(position)
    assert src.position() == position
    assert src.position_now() == {"a:0": 3, "b:1": 7}  # the offsets, for display
    assert split_position(position) == ({"a:0": 3, "b:1": 7}, {"a": "id-a", "b": "id-b"})
    assert with_topic_ids(*split_position(position)) == position


def test_checkpoints_show_explains_the_ids() -> None:
    src = KafkaBatchedSource(["a"], CONF)
    src.seek({"a:0": 3, TOPIC_IDS_KEY: {"a": "951d0gBFQTeDsmfAPqaBiQ"}})
    assert describe_position(src.state_signature(), src.position()) == [
        "topic a partition 0: offset 3 is the next to read",
        "topic a: topic id '951d0gBFQTeDsmfAPqaBiQ' (a recreated topic is refused)",
    ]


def test_ids_that_cannot_be_read_are_warned_about_once_and_the_check_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a client the library refuses to create stands for a broker that cannot describe topics
    lookup = TopicIds({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "bogus"}, "src")
    with caplog.at_level(logging.WARNING, logger="rivermark.kafka.topic_ids"):
        assert lookup.lookup(["a"]) == {}
        assert lookup.lookup(["a"]) == {}
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("src: cannot read the ids of the input topics (")
    assert lookup.unavailable
