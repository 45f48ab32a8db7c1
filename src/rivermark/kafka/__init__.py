"""Kafka connectors on confluent-kafka: sources, a sink and a dead-letter helper.

``Stream.from_kafka``, ``Stream.from_kafka_batched`` and ``.to_kafka`` are
registered when this package is imported (``import rivermark.kafka``).

>>> import rivermark.kafka
>>> from rivermark import Stream
>>> hasattr(Stream, "from_kafka_batched") and hasattr(Stream, "to_kafka")
True
"""

from __future__ import annotations

from rivermark.kafka.dlq import dead_letter
from rivermark.kafka.errors import (
    DeadLetterError,
    KafkaCommitError,
    KafkaConnectorError,
    KafkaDeliveryError,
    KafkaFencedError,
    KafkaGroupInUseError,
    KafkaTopicError,
)
from rivermark.kafka.offsets import OffsetTracker
from rivermark.kafka.partitioned import PartitionedJob, PartitionSource
from rivermark.kafka.sink import ToKafka
from rivermark.kafka.source import KafkaBatchedSource, KafkaSource, from_kafka, from_kafka_batched

__all__ = [
    "DeadLetterError",
    "KafkaBatchedSource",
    "KafkaCommitError",
    "KafkaConnectorError",
    "KafkaDeliveryError",
    "KafkaFencedError",
    "KafkaGroupInUseError",
    "KafkaSource",
    "KafkaTopicError",
    "OffsetTracker",
    "PartitionSource",
    "PartitionedJob",
    "ToKafka",
    "dead_letter",
    "from_kafka",
    "from_kafka_batched",
]
