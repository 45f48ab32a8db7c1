"""``timestamps=True`` on the Kafka sources: the option's checks and the time conversion."""

from __future__ import annotations

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.kafka.partitioned import PartitionSource
from rivermark.kafka.records import record_time as _record_time

CONF = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


class _Message:
    def __init__(self, kind: int, ms: int) -> None:
        self._ts = (kind, ms)

    def timestamp(self) -> tuple[int, int]:
        return self._ts


def test_batched_sources_refuse_record_timestamps_naming_the_remedy() -> None:
    with pytest.raises(
        ConfigurationError, match=r"from_kafka_batched: timestamps=True .* from_kafka\("
    ):
        Stream.from_kafka_batched("t", CONF, timestamps=True)
    assert Stream.from_kafka("t", CONF, timestamps=True).record_timestamps is True
    assert Stream.from_kafka("t", CONF).record_timestamps is False
    assert PartitionSource("t", 0, CONF, batched=False, timestamps=True).record_timestamps is True


def test_record_time_is_epoch_seconds_and_none_without_a_timestamp() -> None:
    assert _record_time(_Message(1, 1_700_000_000_123)) == 1_700_000_000.123
    assert _record_time(_Message(2, 5_000)) == 5.0  # broker (append) time
    assert _record_time(_Message(0, -1)) is None  # no timestamp
