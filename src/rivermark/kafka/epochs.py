"""Exactly-once epochs of ``to_kafka``: transactions, the marker, and resolving a restored epoch.

A part of :class:`~rivermark.kafka.sink.ToKafka` (the protocol is described
there): committing an epoch's transaction together with the marker offset,
running transactional calls within ``commit_timeout``, and telling whether a
restored epoch committed (from the marker group and the epoch's first record)
so that the sink can roll it forward when it did not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from rivermark.kafka.errors import KafkaCommitError, KafkaCommitTimeoutError
from rivermark.kafka.transactions import DeadlineExceeded, call_with_deadline, first_record_visible

logger = logging.getLogger(__name__)

__all__ = ["EpochRecords", "EpochTransactions", "encode"]


def encode(v: Any) -> Any:
    """A record value or key as Kafka bytes (``str`` as UTF-8, others via ``str``)."""
    if v is None or isinstance(v, (bytes, bytearray)):
        return v
    if isinstance(v, str):
        return v.encode()
    return str(v).encode()


def _joined(parts: list[Any]) -> tuple[bytes, list[int]]:
    """``parts`` (bytes or None) as one blob and their lengths (-1: None)."""
    return b"".join(p for p in parts if p is not None), [-1 if p is None else len(p) for p in parts]


def _split(blob: bytes, lengths: list[int]) -> list[bytes | None]:
    """The parts :func:`_joined` made, back."""
    out: list[bytes | None] = []
    at = 0
    for n in lengths:
        if n < 0:
            out.append(None)
        else:
            out.append(blob[at : at + n])
            at += n
    return out


class EpochRecords:
    """The records of the open epoch as they were produced (value and key bytes).

    What an exactly-once sink writes into each checkpoint, to produce again
    if the epoch's transaction is found aborted after a restart.  The
    checkpoint holds the values as one blob and their lengths (the keys
    likewise, when a record had one): written as a list of small tuples, a
    checkpoint of 60,000 records cost four times as much.

    >>> r = EpochRecords(); r.add(b"a", None); r.add(b"bc", b"k"); len(r)
    2
    >>> list(EpochRecords.restored(r.state()))
    [(b'a', None), (b'bc', b'k')]
    >>> EpochRecords.restored({"records": [("x", None)]})  # written by an earlier release
    [('x', None)]
    """

    __slots__ = ("values", "keys")

    def __init__(self) -> None:
        self.values: list[Any] = []
        #: the keys, once a record had one (None before: every key so far is None)
        self.keys: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def add(self, value: Any, key: Any) -> None:
        self.values.append(value)
        if key is not None or self.keys is not None:
            if self.keys is None:
                self.keys = [None] * (len(self.values) - 1)
            self.keys.append(key)

    def state(self) -> dict[str, object]:
        """The records as the checkpoint holds them."""
        values, lengths = _joined(self.values)
        state: dict[str, object] = {"values": values, "lengths": lengths}
        if self.keys is not None:
            state["keys"], state["key_lengths"] = _joined(self.keys)
        return state

    @staticmethod
    def restored(state: dict[str, Any]) -> list[tuple[Any, Any]]:
        """The ``(value, key)`` pairs of a checkpoint's state (also of the older list form)."""
        if "records" in state:
            return [(x, k) for x, k in state["records"]]
        values = _split(state["values"], state["lengths"])
        if "keys" not in state:
            return [(v, None) for v in values]
        return list(zip(values, _split(state["keys"], state["key_lengths"]), strict=True))


class EpochTransactions:
    """The exactly-once epochs of a ``to_kafka`` sink (a part of ``ToKafka``)."""

    # what ToKafka has
    topic: str
    producer_config: dict[str, Any]
    flush_timeout: float
    commit_timeout: float
    producer: Any
    committed_epoch: int | None
    _marker_consumer: Any
    _stuck: bool
    _in_txn: bool
    _topic_id: str
    display_name: Callable[[], str]
    _txid: Callable[[], str]
    _ensure_producer: Callable[[], Any]
    _rolled: Callable[[Any, Any], None]

    def _marker_group(self) -> str:
        return f"rivermark-eos.{self._txid()}"

    def _marker(self) -> Any:
        if self._marker_consumer is None:
            import confluent_kafka as ck

            conf = {
                k: v
                for k, v in self.producer_config.items()
                if k.startswith(("bootstrap.", "security.", "sasl.", "ssl.", "client."))
            }
            conf.update(
                {
                    "group.id": self._marker_group(),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                }
            )
            self._marker_consumer = ck.Consumer(conf)
        return self._marker_consumer

    def _transactional(self, what: str, call: Callable[[], Any]) -> Any:
        """Run a transactional call, retrying retriable errors, within ``commit_timeout``.

        Past the deadline the producer is abandoned (the call may still be
        blocked inside librdkafka) and :class:`KafkaCommitError` says what to do.
        """
        import confluent_kafka as ck

        retriable_codes = {
            ck.KafkaError.NOT_COORDINATOR,
            ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            ck.KafkaError.COORDINATOR_NOT_AVAILABLE,
            ck.KafkaError._TIMED_OUT,
            ck.KafkaError._TRANSPORT,
        }
        deadline = time.monotonic() + self.commit_timeout
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise DeadlineExceeded(what)
                return call_with_deadline(what, call, left)
            except DeadlineExceeded:
                self._stuck = True
                raise KafkaCommitTimeoutError(
                    f"{self.display_name()}: the broker was unreachable: {what} for topic "
                    f"{self.topic!r} did not finish within commit_timeout={self.commit_timeout:g}s; "
                    "the job stops. Run it again when the broker is back: it resumes exactly "
                    "from its last checkpoint"
                ) from None
            except ck.KafkaException as e:
                err = e.args[0] if e.args else None
                retriable = err is not None and (err.retriable() or err.code() in retriable_codes)
                if retriable and time.monotonic() >= deadline:
                    raise KafkaCommitTimeoutError(
                        f"{self.display_name()}: the broker was unreachable: {what} for topic "
                        f"{self.topic!r} kept failing ({err.str() if err is not None else e}) "
                        f"for commit_timeout={self.commit_timeout:g}s; the job stops. Run it "
                        "again when the broker is back: it resumes exactly from its last "
                        "checkpoint"
                    ) from None
                if not retriable:
                    raise KafkaCommitError(
                        f"{self.display_name()}: {what} for topic {self.topic!r} failed: "
                        f"{err.str() if err is not None else e}; the job stops. Run it again: "
                        "it resumes exactly from its last checkpoint"
                    ) from None
                attempt += 1
                logger.info("%s: %s failed (%s), retrying", self.display_name(), what, err)
                time.sleep(min(0.05 * attempt, 0.5))

    def _read_committed_epoch(self) -> int:
        import confluent_kafka as ck

        marker = self._marker()
        tps = self._transactional(
            "reading the committed epoch",
            lambda: marker.committed([ck.TopicPartition(self.topic, 0)], timeout=30),
        )
        off = tps[0].offset
        return off if off >= 0 else -1

    def _commit_epoch(self, epoch: int) -> None:
        import confluent_kafka as ck

        producer = self._ensure_producer()
        left = producer.flush(self.flush_timeout)
        if left:
            raise KafkaCommitTimeoutError(
                f"{self.display_name()}: the broker was unreachable: {left} records of epoch "
                f"{epoch} not acknowledged within {self.flush_timeout:g}s; the job stops. Run it "
                "again when the broker is back: it resumes exactly from its last checkpoint"
            )
        group = self._marker().consumer_group_metadata()
        timeout = max(1.0, self.commit_timeout / 2)
        self._transactional(
            f"committing epoch {epoch} (send_offsets_to_transaction)",
            lambda: producer.send_offsets_to_transaction(
                [ck.TopicPartition(self.topic, 0, epoch)], group, timeout
            ),
        )
        self._transactional(
            f"committing epoch {epoch} (commit_transaction)",
            lambda: producer.commit_transaction(timeout),
        )
        self._in_txn = False
        self.committed_epoch = epoch

    def _recreated(self, epoch: int, handle: dict[str, object]) -> str | None:
        """What it means when the output topic is not the one epoch ``epoch`` was written to."""
        old = handle.get("topic_id")
        if not isinstance(old, str) or not old or not self._topic_id or old == self._topic_id:
            return None
        logger.warning(
            "%s: cannot tell whether epoch %d committed: the output topic %r was deleted and "
            "recreated since the checkpoint (topic id %r, now %r), and its marker and the "
            "epoch's first record went with the old topic. Rolling forward: epoch %d's records "
            "are produced into the new topic, which holds none of the earlier epochs' output",
            self.display_name(),
            epoch,
            self.topic,
            old,
            self._topic_id,
            epoch,
        )
        return f"unknown: output topic recreated (topic id {old!r}, now {self._topic_id!r})"

    def _epoch_outcome(self, epoch: int, handle: dict[str, Any], marker: int) -> tuple[bool, str]:
        """Whether restored epoch ``epoch`` committed, and what is known about it."""
        recreated = self._recreated(epoch, handle)
        if recreated is not None:
            return False, recreated
        if marker >= epoch:
            return True, f"the marker group {self._marker_group()!r} has epoch {marker}"
        first = handle.get("first")
        if not first:
            return False, (
                f"the marker group {self._marker_group()!r} has epoch {marker} and the epoch's "
                "handle names no record"
            )
        part, off = int(first[0]), int(first[1])
        where = f"{self.topic}[{part}]@{off}"
        visible = call_with_deadline(
            "reading back the epoch's first record",
            lambda: first_record_visible(self._marker(), self.topic, part, off),
            self.commit_timeout + 35,
        )
        if visible is True:
            return True, (
                f"its first record {where} is committed (the marker group "
                f"{self._marker_group()!r} has epoch {marker}: expired or never written)"
            )
        if visible is False:
            return False, f"its first record {where} was aborted (marker group: epoch {marker})"
        logger.warning(
            "%s: cannot tell whether epoch %d committed: the marker group %r has epoch %d "
            "(expired after offsets.retention.minutes?) and its first record %s is no longer "
            "readable (output retention?); rolling forward, so its records MAY APPEAR TWICE",
            self.display_name(),
            epoch,
            self._marker_group(),
            marker,
            where,
        )
        return False, f"unknown: marker group epoch {marker}, first record {where} gone"

    def _init_transactions(self) -> Any:
        """The producer, its transactions initialised (this fences an older incarnation)."""
        producer = self._ensure_producer()
        self._transactional(
            "init_transactions", lambda: producer.init_transactions(self.flush_timeout)
        )
        self._in_txn = False
        return producer

    def _roll_forward(self, epoch: int, records: list[tuple[Any, Any]], known: str) -> None:
        # an outcome that could not be told is not called "did not commit"
        outcome = (
            "whether its transaction committed is unknown"
            if known.startswith("unknown")
            else "its transaction did not commit"
        )
        logger.warning(
            "%s: epoch %d was checkpointed but %s (%s); rolling forward: producing its %d "
            "records again",
            self.display_name(),
            epoch,
            outcome,
            known,
            len(records),
        )
        producer = self.producer
        producer.begin_transaction()
        for x, key in records:
            # counted in the restored handle already; only where they land is noted
            while True:
                try:
                    producer.produce(self.topic, value=encode(x), key=key, on_delivery=self._rolled)
                    break
                except BufferError:  # more records than the producer's queue holds
                    producer.poll(0.05)
            producer.poll(0)
        self._commit_epoch(epoch)
