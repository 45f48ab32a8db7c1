"""An input topic deleted and recreated is noticed by its topic id, not only by its offsets.

The recreated topics here hold MORE records than the checkpointed offsets,
so the offsets never go backwards: only the id shows that the topic changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, JobFailedError, LocalDirectoryStore
from rivermark.cli import main
from rivermark.kafka import KafkaTopicError
from rivermark.kafka.topic_ids import TOPIC_IDS_KEY, split_position
from rivermark.testing.kafka_broker import create_topic

from .helpers import delete_topic, produce, run_in_thread, wait_for

pytestmark = pytest.mark.kafka

APP = """
import os
import rivermark.kafka
from rivermark import Stream

src = Stream.from_kafka_batched(
    os.environ["TID_TOPIC"],
    {"bootstrap.servers": os.environ["TID_BOOTSTRAP"], "group.id": os.environ["TID_GROUP"]},
    poll_interval=0.05,
    stop_at_end=True,
    allow_offset_reset=os.environ.get("TID_ALLOW") == "1",
)

def write(value):
    with open(os.environ["TID_OUT"], "a") as f:
        f.write(value.decode() + "\\n")

src.flatten().sink(write)
"""


def _recreate(bootstrap: str, topic: str, n: int) -> None:
    delete_topic(bootstrap, topic)
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [f"new{i}" for i in range(n)])


def _topic_id(store: LocalDirectoryStore, topic: str) -> str:
    (position,) = store.read_manifest(store.list_epochs()[-1]).positions.values()
    return split_position(position)[1][topic]


def test_a_resumed_run_refuses_a_recreated_topic_and_reads_it_from_its_start_when_allowed(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, [f"old{i}" for i in range(30)])
    app, out, ckpt = tmp_path / "app.py", tmp_path / "out.txt", tmp_path / "ckpt"
    app.write_text(APP)
    for name, value in [
        ("TID_TOPIC", topic),
        ("TID_BOOTSTRAP", bootstrap),
        ("TID_GROUP", group),
        ("TID_OUT", str(out)),
    ]:
        monkeypatch.setenv(name, value)
    run = ["run", f"{app}:src", "--checkpoint", str(ckpt), "--every", "0.2s"]
    assert main(run) == 0  # a bounded read: ends with its final checkpoint
    assert out.read_text().split() == [f"old{i}" for i in range(30)]
    store = LocalDirectoryStore(ckpt)
    old_id = _topic_id(store, topic)
    epochs = store.list_epochs()

    _recreate(bootstrap, topic, 50)  # the checkpointed offset 30 is inside the new topic
    capsys.readouterr()
    assert main(run) == 2  # refused at start, as a configuration error
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert f"input topic {topic!r} was deleted and recreated" in err
    assert f"its offsets are of topic id {old_id!r}" in err
    (new_id,) = re.findall(r"now has id '([^']+)'", err)
    assert new_id != old_id
    assert "allow_offset_reset=True" in err
    assert out.read_text().split() == [f"old{i}" for i in range(30)]  # nothing read
    assert store.list_epochs() == epochs  # and no checkpoint written

    monkeypatch.setenv("TID_ALLOW", "1")
    assert main(run) == 0
    assert out.read_text().split() == [f"old{i}" for i in range(30)] + [
        f"new{i}" for i in range(50)
    ]
    (position,) = store.read_manifest(store.list_epochs()[-1]).positions.values()
    assert split_position(position) == ({f"{topic}:0": 50}, {topic: new_id})
    # the checkpoint shows the id next to the offsets
    capsys.readouterr()
    assert main(["checkpoints", "show", str(ckpt)]) == 0
    shown = capsys.readouterr().out
    assert f"topic {topic} partition 0: offset 50 is the next to read" in shown
    assert f"topic {topic}: topic id {new_id!r}" in shown


def test_a_topic_recreated_while_running_is_refused(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, [f"old{i}" for i in range(20)])
    params = {"bootstrap.servers": bootstrap, "group.id": group}
    src = Stream.from_kafka_batched(topic, params, poll_interval=0.05, metadata_refresh=0.2)
    seen: list[bytes] = []
    src.flatten().sink(seen.append)
    job = Job(src, checkpoint=str(tmp_path / "ckpt"), every="0.2s")
    t, errors = run_in_thread(job)
    try:
        wait_for(lambda: len(seen) == 20, what="the old records")
        wait_for(lambda: TOPIC_IDS_KEY in src.position(), what="the topic's id")
        _recreate(bootstrap, topic, 60)
        t.join(90)
        assert not t.is_alive()
    finally:
        job.stop()
    (err,) = errors
    assert isinstance(err, JobFailedError)
    assert isinstance(src.failure, KafkaTopicError)
    assert f"input topic {topic!r} was deleted and recreated" in str(src.failure)
    # nothing of the new topic was read as if it continued the old one
    assert seen == [f"old{i}".encode() for i in range(20)]


def test_a_position_without_topic_ids_restores_and_records_them(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic()
    produce(bootstrap, topic, [f"r{i}" for i in range(10)])
    src = Stream.from_kafka_batched(
        topic, {"bootstrap.servers": bootstrap, "group.id": group}, poll_interval=0.05
    )
    seen: list[bytes] = []
    src.flatten().sink(seen.append)
    src.seek({f"{topic}:0": 4})  # a checkpoint written before topic ids were recorded
    src.start()
    try:
        wait_for(lambda: len(seen) == 6, what="the records after offset 4")
        offsets, ids = split_position(src.position())
    finally:
        src.stop()
    assert seen == [f"r{i}".encode() for i in range(4, 10)]
    assert offsets == {f"{topic}:0": 10} and list(ids) == [topic] and ids[topic]
