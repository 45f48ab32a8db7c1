"""The config ``to_kafka`` makes its producer with (no broker needed)."""

from __future__ import annotations

from rivermark import Stream
from rivermark.kafka.sink import ToKafka


def test_an_exactly_once_producer_lingers_longer_by_default_and_the_callers_linger_wins() -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    alo = ToKafka(Stream(), "out", conf).producer_settings()
    eos = ToKafka(Stream(), "out", conf, exactly_once=True).producer_settings()
    # records of an epoch are seen only when it commits: a longer linger delays no reader
    assert (alo["linger.ms"], eos["linger.ms"]) == (5, 50)
    assert eos["enable.idempotence"] is True and eos["transactional.id"]
    own = ToKafka(Stream(), "out", {**conf, "linger.ms": 1}, exactly_once=True)
    assert own.producer_settings()["linger.ms"] == 1
    assert conf == {"bootstrap.servers": "127.0.0.1:1"}  # the caller's dict is not changed
