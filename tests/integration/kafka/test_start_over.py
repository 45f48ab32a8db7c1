"""An exactly-once Kafka sink starting over: a new epoch sequence, old epochs not recommitted."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import confluent_kafka as ck
import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore, NoValidCheckpointError

from .helpers import consume_all

pytestmark = pytest.mark.kafka


def _marker_epoch(bootstrap: str, topic: str, txid: str) -> int:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rivermark-eos.{txid}"})
    try:
        (tp,) = c.committed([ck.TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        c.close()


def _job(bootstrap: str, out: str, txid: str, items: list[int], ckpt: Path, **kw: bool) -> Job:
    source = Stream.from_iterable(items, name="numbers")
    source.map(str).to_kafka(
        out, {"bootstrap.servers": bootstrap}, exactly_once=True, transactional_id=txid, name="k"
    )
    return Job(source, checkpoint=ckpt, every=None, exactly_once=True, **kw)


def test_from_scratch_starts_a_new_epoch_sequence(
    bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    out, txid, ckpt = new_topic(), f"tx-{uuid.uuid4().hex[:8]}", tmp_path / "ckpt"
    _job(bootstrap, out, txid, list(range(40)), ckpt).run()
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    assert _marker_epoch(bootstrap, out, txid) == epochs[-1]
    for e in epochs:
        (store.epoch_dir(e) / "manifest.json").write_text("{")
    with pytest.raises(NoValidCheckpointError, match="--from-scratch"):
        _job(bootstrap, out, txid, list(range(100, 130)), ckpt).run()

    # start over, stopped at once: the sink's start_over() has run, nothing new is committed
    job = _job(bootstrap, out, txid, list(range(100, 130)), ckpt, from_scratch=True)
    sink = job.sinks[0]
    sink.start_over()
    assert _marker_epoch(bootstrap, out, txid) == 0  # the old sequence is not mistaken for new
    sink.close()

    job = _job(bootstrap, out, txid, list(range(100, 130)), ckpt, from_scratch=True)
    job.run()
    new_epochs = LocalDirectoryStore(ckpt).list_epochs()
    assert min(new_epochs) > max(epochs)
    assert _marker_epoch(bootstrap, out, txid) == new_epochs[-1]
    msgs = consume_all(bootstrap, out, expected=70, committed_only=True)
    got = Counter(m.value().decode() for m in msgs)
    # the earlier run's committed records stay once; the new run's appear once
    assert got == Counter(str(i) for i in [*range(40), *range(100, 130)])
