"""A Kafka source's offset commits to its consumer group, and their retry.

Offsets are committed asynchronously (a commit never holds the event loop).
An asynchronous commit can fail after it was sent: the broker restarts, the
group coordinator moves.  librdkafka then reports the failure to the
consumer's ``on_commit`` callback and does not try again, and the source
sends no newer offset for a partition that has no more records, so its
group offset would stay behind for good (lag tools read it, and a restart
without a checkpoint replays from it).  :class:`GroupCommits` remembers the
newest offset sent per partition and which of them failed, and gives the
failed ones back to commit again, at most once a :data:`RETRY_EVERY`
seconds.  An offset that a newer one of its partition has overtaken is not
sent again (a group offset never moves backwards).

The callback runs on whichever thread is inside a consumer call (the event
loop's or the waiting thread's, never both at once: see :mod:`.waiting`);
the failures it records are handed over through a deque.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["RETRY_EVERY", "GroupCommits", "commit_once"]

logger = logging.getLogger(__name__)

TP = tuple[str, int]

#: seconds between two retries of failed asynchronous commits
RETRY_EVERY = 1.0


class GroupCommits:
    """The offsets a source sent to its group, and those to send again (see the module docs)."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: the newest offset sent per partition
        self.sent: dict[TP, int] = {}
        self._failed: deque[dict[TP, int]] = deque()
        self._retry_at = 0.0

    def callback(self, user: Callable[[Any, Any], None] | None) -> Callable[[Any, Any], None]:
        """The consumer's ``on_commit`` callback (calling ``user``'s, given in the config, first)."""

        def on_commit(err: Any, partitions: Any) -> None:
            if user is not None:
                user(err, partitions)
            failed = {
                (tp.topic, tp.partition): tp.offset
                for tp in partitions or ()
                if err is not None or tp.error is not None
            }
            if failed:
                logger.debug("%s: an offset commit failed (%s); it is sent again", self.name, err)
                self._failed.append(failed)

        return on_commit

    def record(self, offsets: dict[TP, int]) -> None:
        """``offsets`` were sent."""
        self.sent.update(offsets)

    def due(self, now: float | None = None) -> dict[TP, int]:
        """The failed offsets to commit again now (none before :data:`RETRY_EVERY` has passed)."""
        if not self._failed:
            return {}
        now = time.monotonic() if now is None else now
        if now < self._retry_at:
            return {}
        self._retry_at = now + RETRY_EVERY
        again: dict[TP, int] = {}
        while self._failed:
            for tp, offset in self._failed.popleft().items():
                if self.sent.get(tp) == offset:  # not overtaken by a newer commit
                    again[tp] = offset
        return again


def commit_once(consumer: Any, offsets: dict[TP, int], tag: str, name: str) -> None:
    """Commit ``offsets`` (with metadata ``tag``) synchronously through ``consumer``, then close it.

    For a source whose own consumer is gone (the final checkpoint of a source
    that ended); a failure is a WARNING naming the source.
    """
    import confluent_kafka as ck

    try:
        consumer.commit(
            offsets=[ck.TopicPartition(t, p, o, tag) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    except ck.KafkaException as e:
        logger.warning("%s: final commit failed: %s", name, e)
    finally:
        consumer.close()
