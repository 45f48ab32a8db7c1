"""A Kafka source whose subscription changed between versions of the app, on the real broker.

A job reads one topic and stops with a savepoint; the next version reads a
second topic too and starts from that savepoint in a new location: the
first topic goes on from the savepoint's offsets, the added one starts as
on a first run (``auto.offset.reset``: its first record).  The version
after reads only the second topic, which meanwhile got a partition: the
removed topic's offsets are dropped and named, the new partition is read
from its first offset.  Each decision is one INFO line at start, and the
output equals a plain-Python reference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.protocol.upgrade import UpgradeRules, plan_restore
from rivermark.kafka.topic_ids import offsets_of
from rivermark.testing.kafka_broker import add_partitions

from .helpers import produce

pytestmark = pytest.mark.kafka


def count(seen: dict[str, int], value: bytes) -> tuple[dict[str, int], str]:
    """Numbers the records of each topic (the value's prefix): ``topic:n:value``."""
    topic = value.decode().rpartition("-")[0]
    seen = {**seen, topic: seen.get(topic, 0) + 1}
    return seen, f"{topic}:{seen[topic]}:{value.decode()}"


def app(bootstrap: str, group: str, topics: list[str], out: list[str]) -> Stream:
    source = Stream.from_kafka_batched(
        topics,
        {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05,
        stop_at_end=True,
        group_takeover=True,  # each version is a new job on the group
        name="in",
    )
    counted = source.flatten().accumulate(count, start={}, returns_state=True, name="counted")
    counted.sink(out.append)
    return source


def read(lines: list[str], topic: str) -> tuple[list[int], list[str]]:
    """The numbers given to ``topic``'s records in ``lines``, and its values, sorted."""
    mine = [line.split(":", 2) for line in lines if line.startswith(f"{topic}:")]
    return [int(n) for _, n, _ in mine], sorted(v for _, _, v in mine)


def numbers(after: int, n: int) -> list[int]:
    """What the count gives ``n`` records read after ``after`` others: after+1 ... after+n."""
    return list(range(after + 1, after + n + 1))


def decisions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if ": inputs: in: " in r.getMessage()]


def test_a_topic_added_and_one_removed_keep_the_others_offsets(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    one, two = new_topic(partitions=2, prefix="one"), new_topic(prefix="two")
    ones = [f"{one}-{i}" for i in range(30)]
    twos = [f"{two}-{i}" for i in range(15)]
    produce(bootstrap, one, ones[0:20:2], partition=0)
    produce(bootstrap, one, ones[1:20:2], partition=1)
    produce(bootstrap, two, twos)

    # version 1 reads `one` and stops with a savepoint
    out: list[str] = []
    jobs: list[Job] = []
    source = app(bootstrap, group, [one], out)
    source.sink(lambda _: len(out) == 20 and jobs[0].stop(savepoint=True))
    jobs.append(Job(source, checkpoint=tmp_path / "v1", every=None))
    jobs[0].run()
    assert read(out, one) == (numbers(0, 20), sorted(ones[:20]))
    v1 = LocalDirectoryStore(tmp_path / "v1")
    saved = v1.read_manifest(v1.list_epochs()[-1])
    assert saved.savepoint and offsets_of(saved.positions["in"]) == {f"{one}:0": 10, f"{one}:1": 10}

    produce(bootstrap, one, ones[20:30:2], partition=0)
    produce(bootstrap, one, ones[21:30:2], partition=1)
    # version 2 reads `two` too, from the savepoint, in a new location
    out2: list[str] = []
    source = app(bootstrap, group, [one, two], out2)
    plan = plan_restore(saved, source, UpgradeRules())
    assert [(d.action, d.node) for d in plan.decisions if d.action != "kept"] == [("inputs", "in")]
    with caplog.at_level(logging.INFO, logger="rivermark"):
        Job(source, checkpoint=tmp_path / "v2", every=None, from_savepoint=tmp_path / "v1").run()
    said = decisions(caplog)
    assert len(said) == 1 and f"topics added to the subscription: {two}" in said[0], said
    assert "auto.offset.reset='earliest'" in said[0], said
    # `one` on from its 20 records; `two` from its first record
    assert read(out2, one) == (numbers(20, 10), sorted(ones[20:30]))
    assert read(out2, two) == (numbers(0, 15), sorted(twos))

    # version 3 reads `two` only, which got a second partition meanwhile
    add_partitions(bootstrap, two, 2)
    more = [f"{two}-{i}" for i in range(15, 21)]
    produce(bootstrap, two, more[:3], partition=0)
    produce(bootstrap, two, more[3:], partition=1)
    caplog.clear()
    out3: list[str] = []
    with caplog.at_level(logging.INFO, logger="rivermark"):
        Job(app(bootstrap, group, [two], out3), checkpoint=tmp_path / "v2", every=None).run()
    said = decisions(caplog)
    assert len(said) == 1 and f"topics no longer read: {one}" in said[0], said
    assert f"({one}:0@15, {one}:1@15)" in said[0], said
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{two}[1] is not in the restored position" in m for m in messages), messages
    assert read(out3, two) == (numbers(15, 6), sorted(more)) and not read(out3, one)[0]
    v2 = LocalDirectoryStore(tmp_path / "v2")
    final = offsets_of(v2.read_manifest(v2.list_epochs()[-1]).positions["in"])
    assert final == {f"{two}:0": 18, f"{two}:1": 3}  # nothing of `one` any more
