"""Kafka under faults, part 2: no duplicates after a moved checkpoint directory,
an expired epoch marker, or a second job on the same consumer group."""

from __future__ import annotations

import json
import re
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.kafka import KafkaGroupInUseError
from rivermark.kafka.sink import ToKafka
from rivermark.kafka.transactions import first_record_visible
from rivermark.testing.kafka_broker import create_topic

from .helpers import (
    committed,
    consume_all,
    delete_group,
    delete_topic,
    produce,
    run_in_thread,
    start_app,
    wait_for,
)

pytestmark = pytest.mark.kafka

KEYS = 10


def _eos_graph(bootstrap: str, inp: str, out: str, group: str) -> Stream:
    src = Stream.from_kafka_batched(
        inp,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        stop_at_end=True,
    )
    src.flatten().to_kafka(out, {"bootstrap.servers": bootstrap}, exactly_once=True)
    return src


def _counts(bootstrap: str, out: str, n: int) -> Counter[tuple[str, int]]:
    msgs = consume_all(bootstrap, out, expected=n, timeout=30, committed_only=True)
    return Counter(tuple(json.loads(m.value())) for m in msgs)  # type: ignore[misc]


def _expected(n: int) -> Counter[tuple[str, int]]:
    return Counter((str(k), c) for k in range(KEYS) for c in range(1, n // KEYS + 1))


def test_moving_the_checkpoint_directory_keeps_the_transactional_id(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp, out = new_topic(), new_topic(prefix="out")
    produce(bootstrap, inp, [f"a{i}" for i in range(200)])
    # every=None: the final checkpoint holds (and commits) all 200 records
    Job(_eos_graph(bootstrap, inp, out, group), checkpoint=str(tmp_path / "one"), every=None).run()
    (tmp_path / "one").rename(tmp_path / "two")
    produce(bootstrap, inp, [f"b{i}" for i in range(100)])
    Job(_eos_graph(bootstrap, inp, out, group), checkpoint=str(tmp_path / "two"), every=None).run()
    got = Counter(m.value() for m in consume_all(bootstrap, out, expected=300, committed_only=True))
    assert max(got.values()) == 1, "duplicates after the move"
    assert set(got) == {f"a{i}".encode() for i in range(200)} | {
        f"b{i}".encode() for i in range(100)
    }


def test_an_expired_epoch_marker_does_not_roll_forward_a_committed_epoch(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    n = 3000
    inp, out = new_topic(partitions=2, prefix="in"), new_topic(prefix="out")
    records = [json.dumps({"k": i % KEYS}) for i in range(n)]
    produce(bootstrap, inp, records[0::2], partition=0)
    produce(bootstrap, inp, records[1::2], partition=1)
    txid = f"tx-{out}"
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_TXID": txid,
        "FAULT_THROTTLE": "0.03",
        "FAULT_STOP_AT_END": "1",
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    # killed right after epoch 3's transaction (with its records) committed
    proc = start_app(ckpt, env, log, fault="after-sink-commit:3")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    # the broker forgets the marker after offsets.retention.minutes: delete it
    delete_group(bootstrap, f"rivermark-eos.{txid}")
    proc = start_app(ckpt, env, log)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    text = log.read_text()
    results = _counts(bootstrap, out, n)
    dup = {r: c for r, c in results.items() if c > 1}
    assert not dup, f"duplicates: {list(dup.items())[:5]}"
    assert results == _expected(n)
    assert "epoch 3 was checkpointed and committed (its first record" in text, text[-3000:]
    assert "rolling forward" not in text


def test_an_aborted_epoch_larger_than_the_producer_queue_is_rolled_forward(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    # rolling forward produces the epoch's records in one go: more of them than
    # the producer queues wait for room instead of failing the restart
    n, queue = 3000, 40
    inp, out = new_topic(prefix="in"), new_topic(prefix="out")
    produce(bootstrap, inp, [json.dumps({"k": i % KEYS}) for i in range(n)])
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_THROTTLE": "0.03",
        "FAULT_STOP_AT_END": "1",
        "FAULT_QUEUE": str(queue),
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    # killed with checkpoint 3 durable and its transaction not committed
    proc = start_app(ckpt, env, log, fault="after-manifest:3")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    proc = start_app(ckpt, env, log)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    text = log.read_text()
    rolled = re.findall(
        r"epoch 3 was checkpointed but its transaction did not commit .*; rolling forward: "
        r"producing its (\d+) records again",
        text,
    )
    assert rolled and int(rolled[0]) > queue, text[-3000:]
    results = _counts(bootstrap, out, n)
    assert not {r: c for r, c in results.items() if c > 1}
    assert results == _expected(n)


def test_an_aborted_epoch_is_rolled_forward_when_the_marker_expired(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    n = 3000
    inp, out = new_topic(prefix="in"), new_topic(prefix="out")
    produce(bootstrap, inp, [json.dumps({"k": i % KEYS}) for i in range(n)])
    txid = f"tx-{out}"
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_TXID": txid,
        "FAULT_THROTTLE": "0.03",
        "FAULT_STOP_AT_END": "1",
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    # killed with checkpoint 3 durable and its transaction not committed
    proc = start_app(ckpt, env, log, fault="after-manifest:3")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    delete_group(bootstrap, f"rivermark-eos.{txid}")
    proc = start_app(ckpt, env, log)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert _counts(bootstrap, out, n) == _expected(n)
    assert "epoch 3 was checkpointed but its transaction did not commit" in text, text[-3000:]
    assert "was aborted" in text
    # a replay's --diff does not take the output about the rolled-forward epoch for what
    # the sink wrote there; between two later checkpoints it reads it back exactly
    store = LocalDirectoryStore(ckpt)
    handles = {e: next(iter(store.read_manifest(e).sinks.values())) for e in store.list_epochs()}
    sink = ToKafka(Stream(), out, {"bootstrap.servers": bootstrap}, exactly_once=True)
    with pytest.raises(ValueError, match=r"holds 0 committed records, but the sink wrote \d+"):
        sink.written_between(handles[2], handles[3])  # epoch 3 as first written: aborted
    with pytest.raises(ValueError, match="other records lie in between"):
        sink.written_between(handles[3], handles[4])  # epoch 3 again, then epoch 4
    later = sorted(e for e in handles if e > 4)
    written = sink.written_between(handles[later[0]], handles[later[-1]])
    lines = written.text.splitlines()
    assert len(lines) == handles[later[-1]]["count"] - handles[later[0]]["count"] > 0


def test_a_recreated_output_topic_makes_the_epoch_unknown_not_aborted(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    n = 3000
    inp, out = new_topic(prefix="in"), new_topic(prefix="out")
    produce(bootstrap, inp, [json.dumps({"k": i % KEYS}) for i in range(n)])
    env = {
        "FAULT_BOOTSTRAP": bootstrap,
        "FAULT_IN": inp,
        "FAULT_OUT": out,
        "FAULT_GROUP": group,
        "FAULT_THROTTLE": "0.03",
        "FAULT_STOP_AT_END": "1",
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
    proc = start_app(ckpt, env, log, fault="after-manifest:3")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    # the output topic is deleted and created again: its offsets start at 0 again
    delete_topic(bootstrap, out)
    create_topic(bootstrap, out, partitions=1)
    proc = start_app(ckpt, env, log)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    text = log.read_text().split("--- run")[-1]
    assert "was aborted" not in text, text[-3000:]
    assert "cannot tell whether epoch 3 committed: the output topic" in text, text[-3000:]
    assert "deleted and recreated since the checkpoint" in text
    # the roll forward says the same: not known, rather than "did not commit"
    assert "epoch 3 was checkpointed but whether its transaction committed is unknown" in text
    assert "did not commit" not in text
    # the new topic holds epoch 3 (rolled forward) and everything after it, once:
    # per key a run of counts without a gap, up to the last one
    msgs = consume_all(bootstrap, out, timeout=60, committed_only=True)
    got = Counter(tuple(json.loads(m.value())) for m in msgs)
    assert got and max(got.values()) == 1, "duplicates"
    for k in range(KEYS):
        counts = sorted(c for key, c in got if key == str(k))
        assert counts and counts == list(range(counts[0], n // KEYS + 1)), (k, counts[:5])


def test_a_second_job_on_the_same_group_is_refused_at_start(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp = new_topic(partitions=2)
    produce(bootstrap, inp, range(100))
    params = {"bootstrap.servers": bootstrap, "group.id": group}
    first = Stream.from_kafka_batched(inp, params, poll_interval=0.05)
    seen: list[bytes] = []
    first.flatten().sink(seen.append)
    job = Job(first, checkpoint=str(tmp_path / "first"), every="0.2s")
    t, errors = run_in_thread(job)
    try:
        wait_for(lambda: len(seen) == 100, what="the first job's records")
        wait_for(
            lambda: sum(committed(bootstrap, group, inp, 2).values()) == 100,
            what="the first job's checkpoint in the group",
        )
        second = Stream.from_kafka_batched(inp, params, poll_interval=0.05)
        also: list[bytes] = []
        second.flatten().sink(also.append)
        t2, errors2 = run_in_thread(Job(second, checkpoint=str(tmp_path / "second"), every="0.2s"))
        t2.join(60)
        assert not t2.is_alive()
        (err,) = errors2
        assert isinstance(err, KafkaGroupInUseError)
        assert f"consumer group {group!r} is in use by another job" in str(err)
        assert "group_takeover=True" in str(err)
        assert also == []
        assert second.consumer is None  # closed at the refusal, not left connected
    finally:
        job.stop()
        t.join(30)
    assert errors == []
    # once the first job's last commit is old enough (or with group_takeover=True), it may go on
    third = Stream.from_kafka_batched(inp, params, poll_interval=0.05, group_takeover=True)
    third.flatten().sink(also.append)
    produce(bootstrap, inp, [f"new-{uuid.uuid4().hex[:4]}"])
    job3 = Job(third, checkpoint=str(tmp_path / "second"), every="0.2s")
    t3, errors3 = run_in_thread(job3)
    try:
        wait_for(lambda: len(also) == 1, what="the new record (from the group's offsets)")
    finally:
        job3.stop()
    t3.join(30)
    assert errors3 == []


def test_the_first_record_witness_waits_for_another_producers_open_transaction(
    bootstrap: str, new_topic: Callable[..., str]
) -> None:
    """A read_committed read ends below a transaction still open: the witness waits for
    it to end, and calls a record that is not yet decided unknown, never aborted."""
    import confluent_kafka as ck

    out = new_topic(prefix="out")
    offsets: dict[bytes, int] = {}

    def producer(txid: str) -> ck.Producer:
        p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txid})
        p.init_transactions(30)
        p.begin_transaction()
        return p

    def write(p: ck.Producer, value: bytes) -> None:
        p.produce(
            out,
            value=value,
            partition=0,
            on_delivery=lambda e, m: offsets.update({value: m.offset()}),
        )
        assert p.flush(30) == 0

    other = producer(f"other-{out}")  # another task's transaction, open, below ours
    write(other, b"open")
    ours = producer(f"ours-{out}")
    write(ours, b"epoch")
    ours.commit_transaction(30)
    assert offsets[b"open"] < offsets[b"epoch"]
    reader = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"witness-{out}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        # the open transaction hides the committed record, and its own record is
        # undecided: both unknown while it is open, neither aborted
        assert first_record_visible(reader, out, 0, offsets[b"epoch"], timeout=3) is None
        assert first_record_visible(reader, out, 0, offsets[b"open"], timeout=3) is None
        # it ends while the witness waits: the record is seen committed
        threading.Timer(1.0, lambda: other.abort_transaction(30)).start()
        assert first_record_visible(reader, out, 0, offsets[b"epoch"], timeout=60) is True
        assert first_record_visible(reader, out, 0, offsets[b"open"], timeout=60) is False
    finally:
        reader.close()
