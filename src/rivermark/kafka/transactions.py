"""Helpers of the exactly-once sink: calls with a deadline, and "did epoch e commit?".

``call_with_deadline`` runs a blocking confluent-kafka call in a helper
thread and gives up after a deadline the caller enforces: librdkafka does not
honour the timeout of some transactional calls once the transaction
coordinator has gone away (``send_offsets_to_transaction`` was seen to block
for about ten minutes), and the job must neither hang nor ignore a stop.

``first_record_visible`` answers "did the transaction holding the record at
``topic[partition]@offset`` commit?" by reading that offset with
``read_committed``: a committed record is returned at exactly that offset; an
aborted one is skipped.  The exactly-once sink stores the offset of the first
acknowledged record of each epoch in the checkpoint's handle, so recovery can
tell a committed epoch from an aborted one from the output itself, which
lives as long as the output topic's retention (unlike a consumer group's
committed offsets, which expire after ``offsets.retention.minutes``).

>>> call_with_deadline("adding", lambda: 1 + 1, 5.0)
2
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

__all__ = ["DeadlineExceeded", "call_with_deadline", "first_record_visible"]

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The call did not return within its deadline (it may still be running)."""


def call_with_deadline(what: str, call: Callable[[], T], deadline: float) -> T:
    """Run ``call`` in a daemon thread; its result, its exception, or :class:`DeadlineExceeded`."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    t = threading.Thread(target=target, name=f"rivermark-kafka-{what}", daemon=True)
    t.start()
    t.join(deadline)
    if t.is_alive():
        raise DeadlineExceeded(f"{what} did not return within {deadline:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def first_record_visible(
    consumer: Any, topic: str, partition: int, offset: int, timeout: float = 30.0
) -> bool | None:
    """Whether the record at ``topic[partition]@offset`` is committed (read_committed).

    True: a ``read_committed`` read from ``offset`` returns that very offset.
    False: the read skips it (its transaction was aborted).  None: unknown
    (the offset is below the log start, i.e. deleted by retention, or the
    read found nothing before ``timeout``).  ``consumer`` must be created with
    ``isolation.level=read_committed`` and ``enable.partition.eof=True``.

    A ``read_committed`` read ends at the partition's last stable offset: the
    first record of a transaction still open there.  Other producers write
    the same partitions (the other tasks of a partitioned job), so an open
    transaction may begin at or below ``offset``; an end of the read there
    says nothing about the record, and the read waits for that transaction to
    end (within ``timeout``) instead of taking the end for a skip.
    """
    import confluent_kafka as ck

    tp = ck.TopicPartition(topic, partition, offset)
    try:
        low, _high = consumer.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)
    except ck.KafkaException as e:
        logger.warning("cannot read the watermarks of %s[%d]: %s", topic, partition, e)
        return None
    if offset < low:
        return None
    consumer.assign([tp])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is None:
                return bool(msg.offset() == offset)
            if err.code() == ck.KafkaError._PARTITION_EOF:
                if msg.offset() > offset:
                    return False  # read past the record: it was skipped
                continue  # an open transaction holds the end below the record
            if not err.retriable():
                logger.warning("reading %s[%d]@%d failed: %s", topic, partition, offset, err)
                return None
        return None
    finally:
        consumer.unassign()
