"""Kafka under faults, part 1: nothing is lost through a dead-letter topic, an
inherited skip, or a checkpoint that failed; failures name the record's position."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointWriteError, Job, JobFailedError, LocalDirectoryStore
from rivermark.errors import describe
from rivermark.kafka import DeadLetterError, KafkaTopicError, dead_letter
from rivermark.kafka.topic_ids import offsets_of
from rivermark.testing.kafka_broker import create_topic

from .helpers import committed, consume_all, produce, produce_records, run_in_thread, wait_for

pytestmark = pytest.mark.kafka


def _newest_position(ckpt: Path) -> dict[str, int]:
    store = LocalDirectoryStore(ckpt)
    (position,) = store.read_manifest(store.list_epochs()[-1]).positions.values()
    return offsets_of(position)


def test_a_dead_letter_write_the_broker_refuses_stops_the_job_with_nothing_committed_past_it(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp = new_topic()
    dlq = f"dlq-{uuid.uuid4().hex[:12]}"
    create_topic(bootstrap, dlq, 1, config={"max.message.bytes": "1000"})
    good = [json.dumps({"n": i}) for i in range(20)]
    produce(bootstrap, inp, [*good[:10], "x" * 5000, *good[10:]])  # offset 10: poison, too large
    seen: list[dict[str, int]] = []
    src = Stream.from_kafka(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, stop_at_end=True
    )
    src.map(json.loads, on_error=dead_letter(dlq, {"bootstrap.servers": bootstrap})).sink(
        seen.append
    )
    job = Job(src, checkpoint=str(tmp_path / "ckpt"), every_batches=3)
    with pytest.raises(JobFailedError):
        job.run()
    assert isinstance(src.failure, DeadLetterError)
    assert f"topic {inp!r} partition 0 offset 10" in str(src.failure)
    assert "MSG_SIZE_TOO_LARGE" in str(src.failure) or "too large" in str(src.failure)
    # neither a checkpoint nor the group went past the record that was not dead-lettered
    assert seen == [{"n": i} for i in range(10)]
    assert _newest_position(tmp_path / "ckpt")[f"{inp}:0"] <= 10
    assert 0 <= committed(bootstrap, group, inp, 1)[0] <= 10
    assert consume_all(bootstrap, dlq, timeout=3) == []


def test_dead_letter_records_keep_value_and_key_and_name_their_source(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp, dlq = new_topic(), new_topic(prefix="dlq")
    produce_records(
        bootstrap,
        inp,
        [(b"k0", b'{"n": 0}'), (b"k1", None), (b"k2", b"\xc3\x28"), (None, b'{"n": 3}')],
    )
    seen: list[dict[str, int]] = []
    handler = dead_letter(dlq, {"bootstrap.servers": bootstrap})
    src = Stream.from_kafka(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, stop_at_end=True
    )
    src.map(json.loads, on_error=handler).sink(seen.append)
    Job(src, checkpoint=str(tmp_path / "ckpt"), every=None).run()
    assert seen == [{"n": 0}, {"n": 3}]
    assert committed(bootstrap, group, inp, 1) == {0: 4}
    dead = consume_all(bootstrap, dlq, expected=2)
    assert [(m.key(), m.value()) for m in dead] == [(b"k1", None), (b"k2", b"\xc3\x28")]
    for m, offset in zip(dead, (1, 2)):
        h = dict(m.headers())
        assert h["source.topic"] == inp.encode()
        assert (h["source.partition"], h["source.offset"]) == (b"0", str(offset).encode())
        assert h["error.type"] in (b"TypeError", b"UnicodeDecodeError", b"JSONDecodeError")
        assert h["error.message"] and b"Traceback" in h["error.traceback"]
    assert dict(dead[0].headers())["error.record.encoding"] == b"null"
    assert dict(dead[1].headers())["error.record.encoding"] == b"bytes"


def test_a_user_function_error_names_topic_partition_and_offset(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp = new_topic()
    produce(bootstrap, inp, ['{"n": 0}', '{"n": 1}', "not json", '{"n": 3}'])
    src = Stream.from_kafka(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, stop_at_end=True
    )
    src.map(json.loads).sink(lambda x: None)
    with pytest.raises(JobFailedError):
        Job(src, checkpoint=str(tmp_path / "ckpt"), every=None).run()
    assert isinstance(src.failure, json.JSONDecodeError)  # the user function's own error
    assert f"(input topic {inp!r} partition 0 offset 2)" in describe(src.failure)


def test_a_sink_does_not_inherit_skip_a_delivery_failure_stops_the_job(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp = new_topic()
    out = f"small-{uuid.uuid4().hex[:12]}"
    create_topic(bootstrap, out, 1, config={"max.message.bytes": "200"})
    produce(bootstrap, inp, [json.dumps({"n": i, "pad": "x" * 300}) for i in range(50)] + ["bad"])
    src = Stream.from_kafka_batched(
        inp,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        stop_at_end=True,
    )
    parsed = src.flatten().map(json.loads, on_error="skip")
    sink = parsed.map(json.dumps).to_kafka(out, {"bootstrap.servers": bootstrap})
    assert parsed.on_error == "skip" and sink.on_error == "raise"
    job = Job(src, checkpoint=str(tmp_path / "ckpt"), every="0.2s")
    with pytest.raises(JobFailedError) as failed:
        job.run()
    message = str(failed.value)
    assert "\n" not in message and "did not acknowledge" in message and repr(out) in message
    # the failed batch was never completed: no checkpoint, no group offset past it
    assert _newest_position(tmp_path / "ckpt")[f"{inp}:0"] == 0
    assert committed(bootstrap, group, inp, 1)[0] in (0, -1001)
    assert consume_all(bootstrap, out, timeout=3) == []


def test_a_missing_output_topic_is_refused_at_start_in_one_line(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp = new_topic()
    produce(bootstrap, inp, ["a", "b"])
    out = f"missing-{uuid.uuid4().hex[:12]}"
    src = Stream.from_kafka_batched(
        inp,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        stop_at_end=True,
    )
    src.flatten().to_kafka(out, {"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})
    t, errors = run_in_thread(Job(src, checkpoint=str(tmp_path / "ckpt"), every=None))
    t.join(60)
    assert not t.is_alive()
    (err,) = errors
    assert isinstance(err, KafkaTopicError)
    assert f"output topic {out!r} does not exist" in str(err) and "\n" not in str(err)
    assert committed(bootstrap, group, inp, 1)[0] == -1001


def test_a_failed_checkpoint_commits_no_offsets_to_the_group(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp = new_topic()
    produce(bootstrap, inp, range(50))
    seen: list[bytes] = []
    src = Stream.from_kafka_batched(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, poll_interval=0.05
    )
    src.flatten().sink(seen.append)
    ckpt = tmp_path / "ckpt"
    job = Job(src, checkpoint=str(ckpt), every=None)
    t, errors = run_in_thread(job)
    try:
        wait_for(lambda: len(seen) == 50, what="the first 50 records")
        durable = job.checkpoint()
        wait_for(lambda: committed(bootstrap, group, inp, 1)[0] == 50, what="the durable commit")
        produce(bootstrap, inp, range(50, 80))
        wait_for(lambda: len(seen) == 80, what="30 more records")
        # the next checkpoint cannot be written: its directory's place holds a file
        store = LocalDirectoryStore(ckpt)
        store.epoch_dir(durable + 1).write_text("in the way")
        with pytest.raises(CheckpointWriteError, match="Not a directory"):
            job.checkpoint()
        t.join(30)
    finally:
        src.stop()
        wait_for(lambda: src.finished, what="the source to stop")
    assert len(errors) == 1
    # the group holds the last durable checkpoint's position, not the failed one's
    assert committed(bootstrap, group, inp, 1) == {0: 50}
    assert _newest_position(ckpt) == {f"{inp}:0": 50}


def test_records_the_output_topic_refuses_can_be_dead_lettered_with_their_origin(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp, dlq = new_topic(), new_topic(prefix="dlq")
    out = f"small-{uuid.uuid4().hex[:12]}"
    create_topic(bootstrap, out, 1, config={"max.message.bytes": "200"})
    big = {2, 5, 8}
    produce(bootstrap, inp, ["x" * 500 if i in big else f"v{i}" for i in range(10)])
    src = Stream.from_kafka(
        inp, {"bootstrap.servers": bootstrap, "group.id": group}, stop_at_end=True
    )
    # one record per produce request: the broker's size limit applies per record batch
    src.to_kafka(
        out,
        {"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0},
        on_error=dead_letter(dlq, {"bootstrap.servers": bootstrap}),
    )
    Job(src, checkpoint=str(tmp_path / "ckpt"), every=None).run()
    assert sorted(m.value() for m in consume_all(bootstrap, out, expected=7)) == sorted(
        f"v{i}".encode() for i in range(10) if i not in big
    )
    dead = consume_all(bootstrap, dlq, expected=3)
    assert sorted(int(dict(m.headers())["source.offset"]) for m in dead) == sorted(big)
    assert {dict(m.headers())["error.type"] for m in dead} == {b"KafkaDeliveryError"}
    assert committed(bootstrap, group, inp, 1) == {0: 10}
