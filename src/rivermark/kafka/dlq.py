"""Dead-letter helper: send records that failed to a Kafka topic."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["dead_letter"]


def dead_letter(
    topic: str, producer_config: dict[str, Any]
) -> Callable[[Any, BaseException], None]:
    """An ``on_error`` callable that produces the failed record to ``topic``.

    The error goes into headers: ``error.type``, ``error.message`` and
    ``error.traceback``.  The producer is created on first use and flushed
    by ``handler.flush()``.

    >>> handler = dead_letter("dlq", {"bootstrap.servers": "127.0.0.1:1"})
    >>> handler.topic
    'dlq'
    """
    if not isinstance(topic, str) or not topic:
        raise ConfigurationError(f"dead_letter: topic must be a non-empty string, got {topic!r}")
    if not isinstance(producer_config, dict) or "bootstrap.servers" not in producer_config:
        raise ConfigurationError(
            f"dead_letter: producer_config must be a dict with 'bootstrap.servers', got {producer_config!r}"
        )
    return _DeadLetter(topic, dict(producer_config))


class _DeadLetter:
    def __init__(self, topic: str, config: dict[str, Any]) -> None:
        self.topic = topic
        self.config = config
        self.producer: Any = None
        self.count = 0

    def __call__(self, record: Any, exc: BaseException) -> None:
        if self.producer is None:
            import confluent_kafka as ck

            self.producer = ck.Producer(self.config)
        if isinstance(record, (bytes, bytearray)):
            value: Any = record
        elif isinstance(record, str):
            value = record.encode()
        else:
            value = repr(record).encode()
        headers = [
            ("error.type", type(exc).__name__.encode()),
            ("error.message", str(exc).encode()),
            ("error.traceback", "".join(traceback.format_exception(exc)).encode()),
        ]
        self.producer.produce(self.topic, value=value, headers=headers)
        self.producer.poll(0)
        self.count += 1
        logger.info("sent a failed record to dead-letter topic %r: %r", self.topic, exc)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for the dead-letter records to be acknowledged; return how many are left."""
        return 0 if self.producer is None else int(self.producer.flush(timeout))
