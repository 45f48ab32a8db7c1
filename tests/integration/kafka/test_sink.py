from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from rivermark import Stream
from rivermark.core.refs import RefCounter
from rivermark.kafka import KafkaDeliveryError, dead_letter
from rivermark.testing import WaitTimeout, wait_for_async, wait_progress
from rivermark.testing.kafka_broker import KafkaBroker, restart_broker

from .helpers import committed, consume_all, produce, wait_for

pytestmark = pytest.mark.kafka


def test_to_kafka_completes_records_only_after_ack(
    bootstrap: str, new_topic: Callable[..., str]
) -> None:
    out = new_topic()
    src = Stream()
    sink = src.to_kafka(out, {"bootstrap.servers": bootstrap, "linger.ms": 50}, key=lambda x: x[:1])
    done: list[int] = []
    acked_at_completion: list[int] = []

    def completed(i: int) -> Callable[[], None]:
        def cb() -> None:
            done.append(i)
            acked_at_completion.append(sink.delivered)

        return cb

    async def feed() -> None:
        for i in range(200):
            ref = RefCounter(initial=1, callback=completed(i))
            res = src.emit(f"v{i}", metadata=[{"ref": ref}])
            ref.release()
            if res:
                await asyncio.gather(*res)
        assert len(done) < 200  # linger.ms: not all acknowledged yet, so not all completed
        await wait_for_async(lambda: not sink.in_flight, interval=0.01)

    asyncio.run_coroutine_threadsafe(feed(), sink.loop).result(30)
    assert sorted(done) == list(range(200))
    # the j-th completion happened after at least j acknowledgements
    assert all(a >= j + 1 for j, a in enumerate(acked_at_completion))
    msgs = consume_all(bootstrap, out, expected=200)
    assert sorted(m.value() for m in msgs) == sorted(f"v{i}".encode() for i in range(200))
    assert {m.key() for m in msgs} == {b"v"}
    sink.stop()


def test_a_delivery_error_fails_the_node_and_completes_no_record() -> None:
    src = Stream()
    sink = src.to_kafka("x", {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 300})
    ref_done: list[str] = []

    async def feed() -> None:
        for x in ("a", "b"):
            ref = RefCounter(initial=1, callback=lambda x=x: ref_done.append(x))
            src.emit(x, metadata=[{"ref": ref}])
            ref.release()
            await wait_for_async(lambda: not sink.in_flight, interval=0.01)

    asyncio.run_coroutine_threadsafe(feed(), sink.loop).result(30)
    assert isinstance(sink.failure, KafkaDeliveryError)
    assert "the broker was unreachable: record 'a'" in str(sink.failure)
    assert ref_done == []  # a failed record never counts as completed, nor any after it
    sink.stop()


def test_pipeline_kafka_to_kafka_with_dead_letters(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    inp, out, dlq = new_topic(), new_topic(), new_topic()
    produce(bootstrap, inp, [json.dumps({"n": i}) if i % 10 else "not json" for i in range(100)])
    handler = dead_letter(dlq, {"bootstrap.servers": bootstrap})
    src = Stream.from_kafka_batched(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, poll_interval=0.05
    )
    src.flatten().map(json.loads, on_error=handler).map(lambda d: str(d["n"] * 2)).to_kafka(
        out, {"bootstrap.servers": bootstrap}
    )
    src.start()
    try:
        wait_for(lambda: committed(bootstrap, group, inp, 1)[0] == 100, what="all input completed")
    finally:
        src.stop()
    assert handler.flush() == 0
    assert sorted(int(m.value()) for m in consume_all(bootstrap, out, expected=90)) == sorted(
        2 * i for i in range(100) if i % 10
    )
    bad = consume_all(bootstrap, dlq, expected=10)
    assert [m.value() for m in bad] == [b"not json"] * 10
    headers = dict(bad[0].headers())
    assert headers["error.type"] == b"JSONDecodeError"
    assert b"Expecting value" in headers["error.message"]


def test_broker_restart_mid_run_loses_nothing(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], group: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    inp, out = new_topic(partitions=2), new_topic()
    produce(bootstrap, inp, range(500))
    src = Stream.from_kafka_batched(
        inp,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        max_batch_size=50,
    )
    sink = src.flatten().to_kafka(out, {"bootstrap.servers": bootstrap})
    src.start()
    try:
        wait_for(lambda: src.records_emitted >= 100, what="some batches")
        broker = restart_broker(kafka_broker)
        assert broker.bootstrap == bootstrap
        produce(bootstrap, inp, range(500, 1000))
        # waits as long as the deliveries move (a loaded machine reconnects slowly)
        try:
            wait_progress(lambda: sink.delivered, 1000, 240, "records delivered")
        except WaitTimeout as e:
            raise AssertionError(
                f"{e}: the source emitted {src.records_emitted} records; the group holds "
                f"{committed(bootstrap, group, inp, 2)}, the source sent {src._commits.sent}"
            ) from None
    finally:
        src.stop()
    vals: Any = sorted(int(m.value()) for m in consume_all(bootstrap, out, expected=1000))
    assert set(vals) == set(range(1000))  # at-least-once: nothing lost
