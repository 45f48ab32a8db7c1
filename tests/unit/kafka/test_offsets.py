from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rivermark import Stream
from rivermark.errors import ConfigurationError
from rivermark.kafka import KafkaBatchedSource, OffsetTracker, ToKafka, dead_letter


def test_prefix_waits_for_earlier_batch() -> None:
    t = OffsetTracker()
    t.started("t", 0, 0, 10)
    t.started("t", 0, 10, 20)
    t.started("t", 0, 20, 30)
    t.finished("t", 0, 20, 30)
    t.finished("t", 0, 10, 20)
    assert t.committable() == {}
    assert t.in_flight() == 1
    t.finished("t", 0, 0, 10)
    assert t.committable() == {("t", 0): 30}
    assert t.in_flight() == 0


def test_gaps_between_offsets_do_not_block() -> None:
    # transaction markers leave gaps: batch [0, 5) then [6, 9)
    t = OffsetTracker()
    t.started("t", 0, 0, 5)
    t.started("t", 0, 6, 9)
    t.finished("t", 0, 0, 5)
    assert t.committable() == {("t", 0): 5}
    t.finished("t", 0, 6, 9)
    assert t.committable() == {("t", 0): 9}


def test_partitions_are_independent_and_reset() -> None:
    t = OffsetTracker()
    t.reset("a", 0, 100)
    t.started("a", 0, 100, 110)
    t.started("b", 3, 0, 1)
    t.finished("b", 3, 0, 1)
    assert t.committable() == {("b", 3): 1}
    assert t.low_watermark("a", 0) == 100
    t.finished("a", 0, 100, 110)
    t.finished("a", 0, 100, 110)  # duplicate completion is ignored
    assert t.committable() == {("a", 0): 110}


def test_empty_range_rejected() -> None:
    with pytest.raises(ValueError):
        OffsetTracker().started("t", 0, 5, 5)


@given(st.integers(min_value=1, max_value=40), st.randoms(use_true_random=False))
def test_commit_never_passes_an_unfinished_range(n: int, rnd: random.Random) -> None:
    t = OffsetTracker()
    ranges = [(i * 3, i * 3 + 3) for i in range(n)]
    for s, e in ranges:
        t.started("t", 0, s, e)
    order = list(ranges)
    rnd.shuffle(order)
    finished: set[int] = set()
    last = 0
    for s, e in order:
        t.finished("t", 0, s, e)
        finished.add(s)
        c = t.committable().get(("t", 0))
        if c is not None:
            assert c >= last
            last = c
        # everything below the committable offset is finished, the next one is not
        for rs, _ in ranges:
            if rs < last:
                assert rs in finished
        if last < n * 3:
            assert last in {r[0] for r in ranges} and last not in finished
    assert last == n * 3


def test_config_validation_messages() -> None:
    with pytest.raises(ConfigurationError, match="group.id"):
        KafkaBatchedSource("t", {"bootstrap.servers": "x:1"})
    with pytest.raises(ConfigurationError, match="max_batch_size"):
        KafkaBatchedSource("t", {"bootstrap.servers": "x:1", "group.id": "g"}, max_batch_size=0)
    with pytest.raises(ConfigurationError, match="topics"):
        KafkaBatchedSource([], {"bootstrap.servers": "x:1", "group.id": "g"})
    with pytest.raises(ConfigurationError, match="bootstrap.servers"):
        Stream().to_kafka("out", {})
    with pytest.raises(ConfigurationError, match="topic"):
        dead_letter("", {"bootstrap.servers": "x:1"})


def test_source_copies_config_and_seeks() -> None:
    conf = {"bootstrap.servers": "x:1", "group.id": "g"}
    before = dict(conf)
    src = Stream.from_kafka_batched(["a", "b"], conf, poll_interval="250ms")
    assert conf == before
    assert src.consumer_params["enable.auto.commit"] is False
    assert src.poll_interval == 0.25
    src.seek({"a:0": 3, "b:1": 7})
    assert src.position() == {"a:0": 3, "b:1": 7}


def test_sink_copies_config() -> None:
    conf = {"bootstrap.servers": "x:1"}
    sink = Stream().to_kafka("out", conf, exactly_once=True, name="s")
    assert conf == {"bootstrap.servers": "x:1"}
    assert isinstance(sink, ToKafka)
    sink.job_id = "j1"
    assert sink._txid() == "rivermark-j1-s"
