"""Exceptions raised by the Kafka connectors."""

from __future__ import annotations

from rivermark.errors import RivermarkError

__all__ = [
    "DeadLetterError",
    "KafkaCommitError",
    "KafkaCommitTimeoutError",
    "KafkaConnectorError",
    "KafkaDeliveryError",
    "KafkaDeliveryTimeoutError",
    "KafkaFencedError",
    "KafkaGroupInUseError",
    "KafkaTopicError",
    "KafkaUnreachableError",
]


class KafkaConnectorError(RivermarkError):
    """The Kafka client reported an error the connector cannot handle itself."""


class KafkaDeliveryError(KafkaConnectorError):
    """The broker did not acknowledge a produced record.

    ``record`` is the value that was being produced; ``kafka_error`` the
    ``confluent_kafka.KafkaError`` from the delivery callback.
    """

    def __init__(self, message: str, record: object = None, kafka_error: object = None) -> None:
        super().__init__(message)
        self.record = record
        self.kafka_error = kafka_error


class DeadLetterError(KafkaConnectorError):
    """A failed record could not be written to its dead-letter topic (not acknowledged)."""


class KafkaCommitError(KafkaConnectorError):
    """An exactly-once sink could not commit an epoch's transaction in time."""


class KafkaFencedError(KafkaCommitError):
    """The sink's producer failed for good: fenced by a newer producer with its transactional id.

    Kafka then refuses every write and commit of this producer; the job
    stops, and a run resumes from its last checkpoint with a new producer.
    """


class KafkaTopicError(KafkaConnectorError):
    """A topic was recreated, or a partition's offsets went backwards, since the checkpoint."""


class KafkaGroupInUseError(KafkaConnectorError):
    """Another live job commits to the consumer group this source would read with."""


class KafkaUnreachableError(KafkaConnectorError):
    """The broker did not answer within one of the sink's deadlines.

    A job this ends exits with status 2, whichever deadline fired first and
    whatever wraps the error (a node's failure, a checkpoint's).
    """

    job_exit_code = 2


class KafkaDeliveryTimeoutError(KafkaDeliveryError, KafkaUnreachableError):
    """Records were not acknowledged within ``flush_timeout``: the broker was unreachable."""


class KafkaCommitTimeoutError(KafkaCommitError, KafkaUnreachableError):
    """A transactional call did not finish within its deadline: the broker was unreachable."""
