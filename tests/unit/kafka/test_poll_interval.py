"""The Kafka sources read ``poll_interval`` with the one interval parser of rivermark.core.timeutil."""

from __future__ import annotations

import datetime
import re

import pytest

from rivermark import ConfigurationError, Stream

CONF = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


@pytest.mark.parametrize(
    ("given", "seconds"),
    [(0, 0.0), ("0s", 0.0), ("250ms", 0.25), (datetime.timedelta(milliseconds=20), 0.02)],
)
def test_poll_interval_spellings(given: object, seconds: float) -> None:
    assert Stream.from_kafka_batched("t", CONF, poll_interval=given).poll_interval == seconds
    assert Stream.from_kafka("t", CONF, poll_interval=given).poll_interval == seconds


@pytest.mark.parametrize("given", [-1, "soon", float("inf"), True])
def test_a_bad_poll_interval_is_one_line_naming_the_option(given: object) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("poll_interval must be a number of")):
        Stream.from_kafka_batched("t", CONF, poll_interval=given)
