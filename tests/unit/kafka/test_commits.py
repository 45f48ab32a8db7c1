"""The group ends up holding the newest offset sent: refused or reordered commits are sent again."""

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
    commits.record({("t", 0): 10, ("t", 1): 7})  # sent again: partition 1 applied, 0 refused
    on_commit(None, [_tp("t", 0, 10, ck.KafkaError(ck.KafkaError._TRANSPORT)), _tp("t", 1, 7)])
    assert commits.due(now=100.0 + RETRY_EVERY / 2) == {}  # not before the interval passed
    assert commits.due(now=100.0 + RETRY_EVERY) == {("t", 0): 10}
    commits.record({("t", 0): 10})
    on_commit(None, [_tp("t", 0, 10)])
    assert commits.due(now=200.0) == {}  # the group holds every newest offset


def test_nothing_is_given_back_while_a_commit_is_unanswered() -> None:
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 5, ("t", 1): 6})
    assert commits.due(now=1.0) == {}  # sent, not answered yet
    on_commit(None, [_tp("t", 0, 5), _tp("t", 1, 6, ck.KafkaError(ck.KafkaError._TIMED_OUT))])
    assert commits.due(now=10.0) == {("t", 1): 6}


def test_an_offset_overtaken_by_a_newer_commit_is_not_sent_again() -> None:
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 10})
    commits.record({("t", 0): 20})  # sent before the first one's failure came back
    on_commit(ck.KafkaError(ck.KafkaError._TRANSPORT), [_tp("t", 0, 10)])
    assert commits.due(now=5.0) == {}  # 20 is unanswered: the group never moves back to 10
    on_commit(None, [_tp("t", 0, 20)])
    assert commits.due(now=10.0) == {}


def test_an_older_commit_applied_after_a_newer_one_is_repaired() -> None:
    # a commit held back while no coordinator was known goes out after a newer one:
    # the broker applies both, the older last, and both report success
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 10, ("t", 1): 4})
    commits.record({("t", 0): 20})
    on_commit(None, [_tp("t", 0, 20)])
    on_commit(None, [_tp("t", 0, 10), _tp("t", 1, 4)])
    assert commits.due(now=1.0) == {("t", 0): 20}
    commits.record({("t", 0): 20})
    on_commit(None, [_tp("t", 0, 20)])
    assert commits.due(now=5.0) == {}


def test_a_commit_that_could_not_be_sent_is_given_back() -> None:
    commits = GroupCommits("from_kafka")
    commits.unsent({("t", 3): 9})
    assert commits.due(now=1.0) == {("t", 3): 9}


def test_a_failed_request_naming_no_partition_counts_every_commit_as_lost() -> None:
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 10})
    on_commit(ck.KafkaError(ck.KafkaError._TRANSPORT), None)
    assert commits.due(now=1.0) == {("t", 0): 10}


def test_the_users_own_on_commit_is_still_called() -> None:
    seen: list[object] = []
    commits = GroupCommits("from_kafka")
    on_commit = commits.callback(lambda err, parts: seen.append((err, len(parts))))
    on_commit(None, [_tp("t", 0, 1)])
    assert seen == [(None, 1)]


def test_a_synchronous_commit_is_settled_and_a_refused_one_is_due_at_once() -> None:
    # a stopping member commits synchronously and tries again at once, within its deadline
    commits = GroupCommits("PartitionedJob")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 5})
    assert not commits.settled()  # unanswered
    on_commit(None, [_tp("t", 0, 5)])
    assert commits.settled()
    commits.unsent({("t", 0): 9})  # the synchronous commit raised (a rebalance refused it)
    assert not commits.settled()
    assert commits.due(now=50.0) == {("t", 0): 9}
    assert commits.due(now=50.0) == {}  # the interval, unless asked at once
    assert commits.due(now=50.0, at_once=True) == {("t", 0): 9}
    commits.confirmed({("t", 0): 9})
    assert commits.settled()
    assert commits.due(now=200.0, at_once=True) == {}


def test_a_forgotten_partition_is_never_sent_again() -> None:
    # a partition given up in a rebalance: its next owner commits newer offsets, and an
    # older one sent again from here would move the group back
    commits = GroupCommits("PartitionedJob")
    on_commit = commits.callback(None)
    commits.record({("t", 0): 5, ("t", 1): 3})
    commits.forget([("t", 0)])
    on_commit(ck.KafkaError(ck.KafkaError._TRANSPORT), [_tp("t", 0, 5), _tp("t", 1, 3)])
    assert commits.due(now=10.0) == {("t", 1): 3}
    commits.confirmed({("t", 1): 3})
    assert commits.settled()
