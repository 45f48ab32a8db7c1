"""``rivermark replay`` of a Kafka job against the real broker.

A live job (a real ``rivermark run`` process) reads a topic of two
partitions and writes two topics (one exactly-once, one at-least-once),
checkpointing as it goes.  A replay of a changed app from one of its
checkpoints reads the same input range from the checkpointed offsets, up to
a later checkpoint's offsets or the input's end, and writes what its Kafka
sinks would have produced to files; the live output topics, the live
consumer group and the live checkpoints are left as they were.
``--diff`` compares the side outputs with the records the live job committed
to its topics for the same input.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.kafka.sink import ToKafka
from rivermark.kafka.topic_ids import offsets_of
from rivermark.testing.kafka_broker import create_topic

from .helpers import committed, produce

pytestmark = pytest.mark.kafka

#: records per input partition; partition p holds the values 2*i + p
N = 300

APP = """\
from rivermark import Stream


def scale(x):
    return {scale}


def number(seen, x):  # counts the records of x's input partition (x % 2)
    seen = dict(seen)
    seen[x % 2] = seen.get(x % 2, 0) + 1
    return seen, (x % 2, seen[x % 2], x)


def show(t):
    return f"{{t[0]}}:{{t[1]}}:{{scale(t[2])}}"


source = Stream.from_kafka_batched(
    {inp!r}, {{"bootstrap.servers": {bs!r}, "group.id": {group!r}}},
    poll_interval=0.05, max_batch_size=20, stop_at_end=True, name="in",
)
numbered = source.flatten().map(int).accumulate(number, start={{}}, returns_state=True, name="numbered")
lines = numbered.map(show)
lines.to_kafka({every!r}, {{"bootstrap.servers": {bs!r}}}, exactly_once=True, name="every")
lines.filter(lambda s: s.startswith("0:")).to_kafka({zeros!r}, {{"bootstrap.servers": {bs!r}}}, name="zeros")
"""

OLD = "x"
NEW = "x * 10 if x % 7 == 0 else x"


def old_scale(x: int) -> int:
    return x


def new_scale(x: int) -> int:
    return x * 10 if x % 7 == 0 else x


def rivermark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rivermark", *args], capture_output=True, text=True, timeout=300
    )


class Live:
    """The live job's topics, group, checkpoints, and the two versions of its app."""

    def __init__(self, root: Path, bootstrap: str) -> None:
        tag = uuid.uuid4().hex[:10]
        self.bootstrap = bootstrap
        self.inp, self.every, self.zeros = f"in-{tag}", f"every-{tag}", f"zeros-{tag}"
        self.group = f"g-{tag}"
        create_topic(bootstrap, self.inp, partitions=2)
        create_topic(bootstrap, self.every, partitions=2)
        create_topic(bootstrap, self.zeros, partitions=1)
        for p in (0, 1):
            produce(bootstrap, self.inp, [2 * i + p for i in range(N)], partition=p)
        self.ck = root / "live-ck"
        fill = dict(
            inp=self.inp, bs=bootstrap, group=self.group, every=self.every, zeros=self.zeros
        )
        self.app, self.new = root / "app.py", root / "new_app.py"
        self.app.write_text(APP.format(scale=OLD, **fill))
        self.new.write_text(APP.format(scale=NEW, **fill))

    def run(self) -> None:
        res = rivermark(
            "run", f"{self.app}:source", "-c", str(self.ck), "--every-batches", "3", "-q",
            "--keep", "100",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr

    def offsets(self, epoch: int) -> dict[int, int]:
        """The input offsets of checkpoint ``epoch``, by partition."""
        position = LocalDirectoryStore(self.ck).read_manifest(epoch).positions["in"]
        return {int(k.rpartition(":")[2]): int(v) for k, v in offsets_of(position).items()}

    def pick(self) -> tuple[int, int]:
        """Two checkpoints part way through the input, with records of both partitions between."""
        inside = [
            e
            for e in LocalDirectoryStore(self.ck).list_epochs()
            if 0 < sum(self.offsets(e).values()) < 2 * N
        ]
        assert len(inside) >= 4, inside
        e1 = inside[1]
        start = self.offsets(e1)
        e2 = next(e for e in inside if all(self.offsets(e)[p] > start[p] for p in (0, 1)))
        return e1, e2

    def untouched(self) -> dict[str, Any]:
        """What a replay must leave as it is: the output topics' end offsets, the group's
        committed offsets, the checkpoint files."""
        c = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "watermarks"})
        try:
            ends = {
                (t, p): c.get_watermark_offsets(ck.TopicPartition(t, p), timeout=10)
                for t, parts in ((self.every, 2), (self.zeros, 1))
                for p in range(parts)
            }
        finally:
            c.close()
        files = {
            str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in self.ck.rglob("*")
            if p.is_file()
        }
        return {"ends": ends, "group": committed(self.bootstrap, self.group, self.inp, 2), **files}


def expected(scale: Callable[[int], int], start: dict[int, int], end: dict[int, int]) -> list[str]:
    """The lines the app with ``scale`` writes for input offsets [start, end), by partition."""
    return [f"{p}:{i + 1}:{scale(2 * i + p)}" for p in (0, 1) for i in range(start[p], end[p])]


def of_partition(lines: list[str], p: int) -> list[str]:
    return [line for line in lines if line.startswith(f"{p}:")]


@pytest.fixture(scope="module")
def live(kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Live:
    job = Live(tmp_path_factory.mktemp("live"), kafka_broker.bootstrap)
    job.run()
    assert committed(job.bootstrap, job.group, job.inp, 2) == {0: N, 1: N}
    return job


def test_a_replay_reads_the_range_between_two_checkpoints_and_commits_nothing(
    live: Live, tmp_path: Path
) -> None:
    e1, e2 = live.pick()
    before = live.untouched()
    side = tmp_path / "side"
    res = rivermark(
        "replay", f"{live.new}:source", "--from", f"{live.ck}@{e1}", "--until", str(e2),
        "--output", str(side),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert live.untouched() == before  # no record produced, no offset committed, no file changed
    want = expected(new_scale, live.offsets(e1), live.offsets(e2))
    got = (side / "every.txt").read_text().splitlines()
    assert sorted(got) == sorted(want)
    # each input partition's records in their order (the partitions interleave as they come)
    for p in (0, 1):
        assert of_partition(got, p) == of_partition(want, p)
    assert (side / "zeros.txt").read_text().splitlines() == of_partition(want, 0)
    assert sorted(path.name for path in side.iterdir()) == ["every.txt", "zeros.txt"]

    res = rivermark(
        "replay", f"{live.new}:source", "--from", f"{live.ck}@{e2}", "--until", "end",
        "-o", str(tmp_path / "to-end"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = (tmp_path / "to-end" / "every.txt").read_text().splitlines()
    assert sorted(got) == sorted(expected(new_scale, live.offsets(e2), {0: N, 1: N}))
    assert live.untouched() == before


def test_diff_compares_with_what_the_live_job_committed_to_its_topics(
    live: Live, tmp_path: Path
) -> None:
    e1, e2 = live.pick()
    before = live.untouched()
    args = ["--from", f"{live.ck}@{e1}", "--until", str(e2), "--diff"]
    res = rivermark("replay", f"{live.new}:source", *args, "-o", str(tmp_path / "a"))
    assert res.returncode == 1, res.stdout + res.stderr
    start, end = live.offsets(e1), live.offsets(e2)
    old, new = expected(old_scale, start, end), expected(new_scale, start, end)
    gone = sorted(set(old) - set(new))
    came = sorted(set(new) - set(old))
    assert gone and all(int(line.split(":")[2]) % 7 == 0 for line in gone)
    shown = res.stdout.splitlines()
    removed = [line[1:] for line in shown if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in shown if line.startswith("+") and not line.startswith("+++")]
    assert sorted(removed) == sorted(gone + of_partition(gone, 0))
    assert sorted(added) == sorted(came + of_partition(came, 0))
    # the range reads two input partitions, whose records reach the sinks in the order
    # they happen to be read (a replay does not repeat it): compared as sorted records,
    # whether the producer put the range's output in one partition of "every" or in both
    (every,) = [h for h in shown if h.startswith(f"--- {live.every}[")]
    assert every.endswith(", sorted)"), every
    assert any(h.startswith(f"--- {live.zeros}[0] ") and h.endswith(", sorted)") for h in shown)

    res = rivermark("replay", f"{live.app}:source", *args, "-o", str(tmp_path / "b"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "every: the same as the live output" in res.stdout
    assert "zeros: the same as the live output" in res.stdout
    assert live.untouched() == before


def test_records_of_another_producer_in_the_range_are_not_taken_for_the_jobs(
    bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    out = new_topic()

    def meddle(x: int) -> int:
        if x == 25:  # between two checkpoints, someone else writes to the output topic
            produce(bootstrap, out, ["foreign"])
        return x

    source = Stream.from_iterable(list(range(60)), name="nums")
    sink = source.map(meddle).to_kafka(out, {"bootstrap.servers": bootstrap}, name="out")
    Job(source, checkpoint=tmp_path / "ck", every=None, every_batches=10).run()
    store = LocalDirectoryStore(tmp_path / "ck")
    handles = {e: store.read_manifest(e).sinks["out"] for e in store.list_epochs()}
    assert isinstance(sink, ToKafka)
    at = sorted(e for e, h in handles.items() if h["count"] in (10, 20, 30, 40))
    clean = sink.written_between(handles[at[2]], handles[at[3]])
    assert clean.text == "".join(f"{x}\n" for x in range(30, 40)) and clean.ordered
    with pytest.raises(
        ValueError, match=re.escape("holds 11 committed records, but the sink wrote 10")
    ):
        sink.written_between(handles[at[1]], handles[at[2]])
    with pytest.raises(ValueError, match="records no output offsets"):
        sink.written_between({"epoch": 1, "delivered": 0}, handles[at[2]])
