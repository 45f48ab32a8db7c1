"""Offset commits the broker refused after they were sent are sent again, never backwards."""

from __future__ import annotations

from dataclasses import dataclass

import confluent_kafka as ck

from rivermark.kafka.commits import RETRY_EVERY, GroupCommits


@dataclass
class _Refused:
    """A partition of a commit the broker refused, as the callback reads it.

    confluent-kafka sets ``TopicPartition.error`` itself (read-only from Python).
    """

    topic: str
    partition: int
    offset: int
    error: ck.KafkaError


def _tp(topic: str, partition: int, offset: int, error: ck.KafkaError | None = None) -> object:
    if error is not None:
        return _Refused(topic, partition, offset, error)
    return ck.TopicPartition(topic, partition, offset)


def test_a_failed_commit_is_given_back_once_the_retry_interval_passed() -> None:
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 10, ("t", 1): 7})
    on_commit(ck.KafkaError(ck.KafkaError._TRANSPORT), [_tp("t", 0, 10), _tp("t", 1, 7)])
    assert commits.due(now=100.0) == {("t", 0): 10, ("t", 1): 7}
    # sent again and refused again: not before the interval has passed
    on_commit(ck.KafkaError(ck.KafkaError._TRANSPORT), [_tp("t", 0, 10)])
    assert commits.due(now=100.0 + RETRY_EVERY / 2) == {}
    assert commits.due(now=100.0 + RETRY_EVERY) == {("t", 0): 10}
    assert commits.due(now=200.0) == {}  # nothing failed since


def test_a_partition_error_alone_counts_and_a_success_gives_nothing_back() -> None:
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 5, ("t", 1): 6})
    on_commit(None, [_tp("t", 0, 5), _tp("t", 1, 6, ck.KafkaError(ck.KafkaError._TIMED_OUT))])
    assert commits.due(now=1.0) == {("t", 1): 6}
    on_commit(None, [_tp("t", 0, 5)])
    assert commits.due(now=10.0) == {}


def test_an_offset_overtaken_by_a_newer_commit_is_not_sent_again() -> None:
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 10})
    commits.record({("t", 0): 20})  # sent before the first one's failure came back
    on_commit(ck.KafkaError(ck.KafkaError._TRANSPORT), [_tp("t", 0, 10)])
    assert commits.due(now=5.0) == {}  # the group offset never moves back to 10


def test_the_users_own_on_commit_is_still_called() -> None:
    seen: list[object] = []
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(lambda err, parts: seen.append((err, len(parts))))
    on_commit(None, [_tp("t", 0, 1)])
    assert seen == [(None, 1)]
