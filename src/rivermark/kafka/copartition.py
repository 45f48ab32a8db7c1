"""Joins in a :class:`~rivermark.kafka.PartitionedJob`: co-partitioned and global inputs.

A task of a partitioned job reads one partition of its topic.  To join it
with another topic by key, the task reads the *same partition number* of
the other topic (``source.co_partitioned(topic)``): the two topics must
then have the same number of partitions and be keyed alike (the key decides
the partition, as Kafka's default partitioner does), so that the records of
one key of both topics meet in one task.  The job checks the counts when it
starts and refuses, with one line naming the topics, when they differ.

A small table may instead be read whole by every task
(``source.global_topic(topic)``): no co-partitioning is needed, at the cost
of every task reading every partition of it and holding all its keys.

Both kinds of source keep their offsets in the task's checkpoints only (the
group's committed offsets are the main topic's).  See ``docs/joins.md``.

>>> co_partitioning_problem({"orders": 3, "tiers": 3}, ["orders"], ["tiers"]) is None
True
>>> print(co_partitioning_problem({"orders": 3, "tiers": 2}, ["orders"], ["tiers"]))
PartitionedJob: topics 'orders' (3 partitions) and 'tiers' (2 partitions) are joined in each task but are not co-partitioned (a task reads partition N of both, so a key's records would not meet); give 'tiers' 3 partitions keyed as 'orders', or read it whole in every task with source.global_topic('tiers')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["co_partitioning_problem", "partition_counts"]


def co_partitioning_problem(
    counts: dict[str, int], topics: Sequence[str], joined: Sequence[str]
) -> str | None:
    """Why the tasks of ``topics`` cannot read the same partition of ``joined`` (None: they can).

    ``counts`` is each topic's number of partitions (0: the topic does not exist).
    """
    for t in [*topics, *joined]:
        if not counts.get(t):
            return (
                f"PartitionedJob: topic {t!r} does not exist (or has no partitions); create it "
                "before the job starts"
            )
    for main in topics:
        for other in joined:
            if counts[main] != counts[other]:
                return (
                    f"PartitionedJob: topics {main!r} ({counts[main]} partitions) and {other!r} "
                    f"({counts[other]} partitions) are joined in each task but are not "
                    "co-partitioned (a task reads partition N of both, so a key's records "
                    f"would not meet); give {other!r} {counts[main]} partitions keyed as "
                    f"{main!r}, or read it whole in every task with "
                    f"source.global_topic({other!r})"
                )
    return None


def partition_counts(consumer: Any, topics: Sequence[str], timeout: float = 10.0) -> dict[str, int]:
    """Each topic's number of partitions, from the broker's metadata (0 when absent)."""
    counts = {}
    for t in topics:
        meta = consumer.list_topics(t, timeout=timeout).topics.get(t)
        counts[t] = 0 if meta is None or meta.error is not None else len(meta.partitions)
    return counts
