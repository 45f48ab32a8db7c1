"""Dead-letter handler: send records that failed to a Kafka topic, acknowledged.

``dead_letter(topic, producer_config)`` returns an ``on_error`` callable.
When a node's function raises on a record, the handler produces that record
to ``topic`` and **waits for the broker's acknowledgement** before it
returns; only then does the record count as completed (its source may
commit past it, and a checkpoint barrier, which waits for the emit of the
record to end, includes it).  Dead-lettered records are rare, so the handler
trades a round trip per failed record for having no write in flight at a
barrier or at stop.

A write that fails (the topic is missing, the record is larger than the
topic's ``max.message.bytes``, the broker is unreachable for
``ack_timeout`` seconds) raises :class:`~rivermark.kafka.errors.DeadLetterError`
from the node: the record is not completed, the job stops with its last
checkpoint intact and nothing is committed past the record; a rerun
processes it again.

Format of a dead-letter record:

* value: the failed record as it was at the node that raised: ``bytes``
  unchanged, ``None`` stays a null value, ``str`` as UTF-8, anything else
  its ``repr()`` (header ``error.record.encoding`` says which: ``bytes``,
  ``null``, ``utf-8``, ``repr``); a ``{"key": k, "value": v}`` record (a
  source with ``keys=True``) is written with key ``k`` and value ``v``;
* key: the input record's key (from a ``from_kafka`` source), else None;
* headers: ``source.topic``, ``source.partition``, ``source.offset`` (the
  record's offset; for a batched source the batch's first offset, with
  ``source.offset.end``, the offset after its last record), when the record
  came from a Kafka source; ``error.type``, ``error.message``,
  ``error.traceback``.

Delivery guarantee: a dead-letter write is at-least-once across a crash (a
record dead-lettered after the last checkpoint is processed again by the
rerun and dead-lettered again); it is not part of an exactly-once sink's
transaction.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from rivermark.core.origin import describe_origin, record_origin
from rivermark.errors import ConfigurationError
from rivermark.kafka.errors import DeadLetterError

logger = logging.getLogger(__name__)

__all__ = ["dead_letter"]


def dead_letter(
    topic: str, producer_config: dict[str, object], ack_timeout: float = 30.0
) -> Callable[[object, BaseException], None]:
    """An ``on_error`` callable that writes the failed record to ``topic`` (see module docs).

    >>> handler = dead_letter("dlq", {"bootstrap.servers": "127.0.0.1:1"})
    >>> handler.topic, handler.count
    ('dlq', 0)
    """
    if not isinstance(topic, str) or not topic:
        raise ConfigurationError(f"dead_letter: topic must be a non-empty string, got {topic!r}")
    if not isinstance(producer_config, dict) or "bootstrap.servers" not in producer_config:
        raise ConfigurationError(
            f"dead_letter: producer_config must be a dict with 'bootstrap.servers', got {producer_config!r}"
        )
    if (
        isinstance(ack_timeout, bool)
        or not isinstance(ack_timeout, (int, float))
        or ack_timeout <= 0
    ):
        raise ConfigurationError(
            f"dead_letter: ack_timeout must be a number of seconds > 0, got {ack_timeout!r}"
        )
    return _DeadLetter(topic, dict(producer_config), float(ack_timeout))


def _encode(value: object) -> tuple[bytes | None, str]:
    if value is None:
        return None, "null"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), "bytes"
    if isinstance(value, str):
        return value.encode(), "utf-8"
    return repr(value).encode(), "repr"


class _DeadLetter:
    def __init__(self, topic: str, config: dict[str, object], ack_timeout: float) -> None:
        self.topic = topic
        self.config = config
        self.config.setdefault("linger.ms", 0)
        self.ack_timeout = ack_timeout
        self.producer: Any = None
        self.count = 0

    def __call__(self, record: Any, exc: BaseException) -> None:
        if self.producer is None:
            import confluent_kafka as ck

            self.producer = ck.Producer(self.config)
        origin = record_origin.get() or {}
        key: Any = origin.get("key")
        payload = record
        if isinstance(record, dict) and set(record) == {"key", "value"}:
            key, payload = record["key"], record["value"]
        value, encoding = _encode(payload)
        if key is not None and not isinstance(key, (bytes, bytearray)):
            key = _encode(key)[0]
        headers: list[tuple[str, bytes]] = []
        if origin:
            headers += [
                ("source.topic", str(origin.get("topic")).encode()),
                ("source.partition", str(origin.get("partition")).encode()),
                ("source.offset", str(origin.get("offset")).encode()),
            ]
            if origin.get("end") is not None:
                headers.append(("source.offset.end", str(origin["end"]).encode()))
        headers += [
            ("error.type", type(exc).__name__.encode()),
            ("error.message", str(exc).encode()),
            ("error.traceback", "".join(traceback.format_exception(exc)).encode()),
            ("error.record.encoding", encoding.encode()),
        ]
        self._write(value, key, headers, exc)
        self.count += 1
        logger.info(
            "dead-letter topic %r acknowledged a failed record%s: %r",
            self.topic,
            f" ({describe_origin()})" if origin else "",
            exc,
        )

    def _write(
        self, value: object, key: object, headers: list[tuple[str, bytes]], exc: BaseException
    ) -> None:
        outcome: list[Any] = []

        def on_delivery(err: object, msg: object) -> None:
            outcome.append(err)

        where = describe_origin()
        what = f"the failed record ({where})" if where else "a failed record"
        remedy = (
            "the record is not completed and the job stops; fix the dead-letter topic "
            "and run again (a checkpointed job resumes from its last checkpoint and "
            "processes the record again)"
        )
        try:
            self.producer.produce(
                self.topic, value=value, key=key, headers=headers, on_delivery=on_delivery
            )
        except Exception as e:  # BufferError, KafkaException (e.g. larger than message.max.bytes)
            raise DeadLetterError(
                f"dead_letter: writing {what} to topic {self.topic!r} failed: {e}; {remedy}"
            ) from exc
        left = self.producer.flush(self.ack_timeout)
        if left or not outcome:
            raise DeadLetterError(
                f"dead_letter: topic {self.topic!r} did not acknowledge {what} within "
                f"{self.ack_timeout:g}s (is the broker reachable?); {remedy}"
            ) from exc
        if outcome[0] is not None:
            raise DeadLetterError(
                f"dead_letter: topic {self.topic!r} refused {what}: {outcome[0].str()}; {remedy}"
            ) from exc

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for the dead-letter records to be acknowledged; return how many are left.

        Every write is acknowledged before the handler returns, so this
        returns 0 unless called while a write is under way.
        """
        return 0 if self.producer is None else int(self.producer.flush(timeout))
