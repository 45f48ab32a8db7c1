"""A Kafka source's offset commits to its consumer group, and their repair.

Offsets are committed asynchronously (a commit never holds the event loop).
What the group holds in the end is not always the newest offset sent:

* an asynchronous commit can fail after it was sent (the broker restarts,
  the group coordinator moves); librdkafka reports the failure to the
  consumer's ``on_commit`` callback and does not try again;
* a commit that librdkafka held back while no coordinator was known is sent
  when one is found, possibly *after* a newer commit of the same partition
  made meanwhile: the broker applies both, the older one last, and both
  report success.  The group's offset has then moved backwards.

In both cases the source sends no newer offset for a partition that has no
more records, so its group offset would stay behind for good (lag tools read
it, and a restart without a checkpoint replays from it).

:class:`GroupCommits` keeps, per partition, the newest offset sent, how many
commits of it are unanswered, and the offset of the last commit the broker
confirmed (callbacks come in the order the coordinator applied the commits).
When no commit of a partition is unanswered and the last one applied is not
the newest sent, :meth:`GroupCommits.due` gives the newest back to commit
again, at most once a :data:`RETRY_EVERY` seconds.

The callback runs on whichever thread is inside a consumer call (the event
loop's or the waiting thread's, never both at once: see :mod:`.waiting`);
the answers it reads are handed over to the loop through a deque.
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

#: seconds between two repairs of commits the group does not hold
RETRY_EVERY = 1.0


class GroupCommits:
    """The offsets a source sent to its group, and those to send again (see the module docs)."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: the newest offset sent (or to send) per partition
        self.sent: dict[TP, int] = {}
        #: per partition, the offset of the last commit the broker applied
        self._applied: dict[TP, int] = {}
        #: per partition, how many commits were sent and not answered
        self._unanswered: dict[TP, int] = {}
        #: answers from the callback: (partition, offset, applied), or None for
        #: a failed request that named no partition (every commit then counts as lost)
        self._answers: deque[list[tuple[TP, int, bool]] | None] = deque()
        self._retry_at = 0.0

    def callback(self, user: Callable[[Any, Any], None] | None) -> Callable[[Any, Any], None]:
        """The consumer's ``on_commit`` callback (calling ``user``'s, given in the config, first)."""

        def on_commit(err: Any, partitions: Any) -> None:
            if user is not None:
                user(err, partitions)
            if partitions is None:
                if err is not None:
                    self._answers.append(None)
                return
            answer = [
                ((tp.topic, tp.partition), tp.offset, err is None and tp.error is None)
                for tp in partitions
            ]
            if not all(ok for _, _, ok in answer):
                logger.debug("%s: an offset commit failed (%s); it is sent again", self.name, err)
            self._answers.append(answer)

        return on_commit

    def _read_answers(self) -> None:
        while self._answers:
            answer = self._answers.popleft()
            if answer is None:
                self._unanswered.clear()
                continue
            for tp, offset, applied in answer:
                left = self._unanswered.get(tp, 0)
                if left > 1:
                    self._unanswered[tp] = left - 1
                else:
                    self._unanswered.pop(tp, None)
                if applied:
                    self._applied[tp] = offset

    def record(self, offsets: dict[TP, int]) -> None:
        """``offsets`` were sent."""
        self._read_answers()
        for tp, offset in offsets.items():
            self.sent[tp] = offset
            self._unanswered[tp] = self._unanswered.get(tp, 0) + 1

    def unsent(self, offsets: dict[TP, int]) -> None:
        """``offsets`` could not be sent: they are given back by :meth:`due`."""
        self.sent.update(offsets)

    def confirmed(self, offsets: dict[TP, int]) -> None:
        """``offsets`` were committed synchronously, and the broker applied them."""
        self._read_answers()
        self.sent.update(offsets)
        self._applied.update(offsets)

    def forget(self, partitions: list[TP]) -> None:
        """Stop repairing ``partitions`` (given up: their new owner commits them)."""
        for tp in partitions:
            self.sent.pop(tp, None)
            self._applied.pop(tp, None)
            self._unanswered.pop(tp, None)

    def settled(self) -> bool:
        """Whether the group holds the newest offset sent of every partition."""
        self._read_answers()
        return not self._unanswered and all(
            self._applied.get(tp) == offset for tp, offset in self.sent.items()
        )

    def due(self, now: float | None = None, at_once: bool = False) -> dict[TP, int]:
        """The newest offsets the group does not hold, to commit again now.

        Only partitions without an unanswered commit; looked at once a
        :data:`RETRY_EVERY` seconds (an empty dict in between) unless ``at_once``.
        """
        now = time.monotonic() if now is None else now
        if now < self._retry_at and not at_once:
            return {}
        self._retry_at = now + RETRY_EVERY
        self._read_answers()
        return {
            tp: offset
            for tp, offset in self.sent.items()
            if tp not in self._unanswered and self._applied.get(tp) != offset
        }


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
