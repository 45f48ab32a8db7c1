"""The group's offsets never move backwards because of the order the source sends them in."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rivermark.kafka.source import KafkaBatchedSource

from .helpers import committed, wait_for

pytestmark = pytest.mark.kafka


def test_offsets_held_back_during_a_wait_never_follow_newer_ones(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    # a record completes while the waiting thread is on the consumer (its offset is
    # held back); the next completes after the wait ended but before the loop sent
    # the held-back one: the older offset must not reach the group after the newer
    topic = new_topic()
    src = KafkaBatchedSource([topic], {"bootstrap.servers": bootstrap, "group.id": group})
    src.consumer = src._make_consumer()
    try:
        src._waiter.idle.clear()  # the waiting thread is on the consumer
        src._commit({(topic, 0): 10})
        assert src._commits.sent == {}
        src._waiter.idle.set()  # the wait ended
        src._commit({(topic, 0): 12})
        src._commit_deferred()  # what the loop does after the wait
        assert src._commits.sent == {(topic, 0): 12}
        commits = src._commits

        def answered() -> bool:
            src.consumer.poll(0.05)  # serves the commit callbacks
            commits._read_answers()
            return not commits._unanswered

        wait_for(answered, what="the broker's answers")
        assert committed(bootstrap, group, topic, 1) == {0: 12}
    finally:
        src.consumer.close()
