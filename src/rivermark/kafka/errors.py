"""Exceptions raised by the Kafka connectors."""

from __future__ import annotations

from ..errors import RivermarkError

__all__ = ["KafkaConnectorError", "KafkaDeliveryError"]


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
