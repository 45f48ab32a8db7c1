"""``from_kafka_batched(..., dask=True)`` on a real broker and a LocalCluster of worker processes.

The job process emits only offset ranges; each partition's batch is read on
a worker.  Tested: the batches hold the same records as the local source's;
the reading happens in the worker processes; transaction markers and
aborted records (gaps in the offsets) are handled; a checkpointed job keeps
the state and the offsets in step, and resumes exactly after a stop or a
SIGKILL of the job process.
"""

from __future__ import annotations

import os
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import confluent_kafka as ck
import pytest
from distributed import Client, LocalCluster

from rivermark import Job, Stream
from rivermark.checkpoint import LocalDirectoryStore
from rivermark.checkpoint.state import codec
from rivermark.dask.errors import KafkaRangeReadError
from rivermark.dask.kafka import KafkaRange, KafkaRangeSource, read_kafka_range
from rivermark.kafka.topic_ids import offsets_of
from rivermark.testing.crash import run_uncrashed, run_with_crashes

from .helpers import produce, wait_for

# the workers cannot import this test module: ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = [pytest.mark.kafka, pytest.mark.dask]


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
        )
    c = Client(cluster)
    try:
        c.wait_for_workers(2)
        yield c
    finally:
        c.close()
        cluster.close()


def params(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group, **extra}


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> dict[int, list[bytes]]:
    """Write ``p<partition>-<i>`` records; the records per partition, in order."""
    written = {}
    for p in range(partitions):
        values = [f"p{p}-{i}".encode() for i in range(per_partition)]
        produce(bootstrap, topic, values, partition=p)
        written[p] = values
    return written


def source_of(stream: Stream) -> KafkaRangeSource:
    node = stream
    while node.upstreams:
        node = node.upstreams[0]
    assert isinstance(node, KafkaRangeSource)
    return node


def idle_consumers() -> int:
    from rivermark.dask import kafka

    return sum(len(v) for v in kafka._idle.values())


# ---------------------------------------------------------------- reading on workers
def test_batches_are_read_on_workers_and_hold_the_local_sources_records(
    client: Client, bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic(partitions=3)
    written = fill(bootstrap, topic, 3, 40)

    local = Stream.from_kafka_batched(topic, params(bootstrap, group + "-local"), poll_interval=0.05, max_batch_size=7)  # fmt: skip
    local_batches = local.sink_to_list()
    batches = Stream.from_kafka_batched(
        topic, params(bootstrap, group), poll_interval=0.05, max_batch_size=7, dask=True
    )
    src = source_of(batches)
    emitted: list[Any] = []
    src.sink(emitted.append)
    gathered = batches.gather().sink_to_list()
    local.start()
    batches.start()
    try:
        wait_for(lambda: sum(map(len, gathered)) == 120, what="120 records through Dask")
        wait_for(lambda: sum(map(len, local_batches)) == 120, what="120 records locally")
    finally:
        local.stop()
        src.stop()

    # the job process handled offsets only, every batch at most max_batch_size
    assert all(isinstance(r, KafkaRange) and 0 < len(r) <= 7 for r in emitted)
    assert len(gathered) == len(emitted)
    for p in range(3):
        ranges = [r for r in emitted if r.partition == p]
        assert [r.start for r in ranges] == list(range(0, 40, 7))
        got = [v for r, b in zip(emitted, gathered) if r.partition == p for v in b]
        local_got = [v for b in local_batches for v in b if v.startswith(f"p{p}-".encode())]
        assert got == local_got == written[p]
    # the reading consumers live in the worker processes, not here
    assert idle_consumers() == 0
    assert sum(client.run(idle_consumers).values()) >= 1
    assert src.position_now() == {f"{topic}:{p}": 40 for p in range(3)}


def test_keys_come_from_the_workers_too(
    client: Client, bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic(partitions=1)
    produce(bootstrap, topic, [f"v{i}" for i in range(10)], partition=0, key=lambda v: b"k" + v[1:].encode())  # fmt: skip
    batches = Stream.from_kafka_batched(
        topic, params(bootstrap, group), poll_interval=0.05, keys=True, dask=True
    )
    out = batches.gather().flatten().sink_to_list()
    batches.start()
    try:
        wait_for(lambda: len(out) == 10, what="10 records")
    finally:
        source_of(batches).stop()
    assert out == [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(10)]


def test_transaction_markers_and_aborted_records_leave_no_hole_and_no_hang(
    client: Client, bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    topic = new_topic(partitions=1)
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions()
    for batch, commit in (("a", True), ("b", False), ("c", True)):
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, f"{batch}{i}".encode(), partition=0)
        if commit:
            p.commit_transaction()
        else:
            p.flush()  # written, then aborted: the records stay in the log, skipped
            p.abort_transaction()
    # 12 records + 3 markers: offsets 0..14, the last one a marker
    batches = Stream.from_kafka_batched(
        topic,
        params(bootstrap, group, **{"isolation.level": "read_committed"}),
        poll_interval=0.05,
        max_batch_size=5,
        dask=True,
    )
    out = batches.gather().flatten().sink_to_list()
    src = source_of(batches)
    batches.start()
    try:
        wait_for(lambda: src.position_now() == {f"{topic}:0": 15}, what="offset 15")
        wait_for(lambda: len(out) == 8, what="the committed records")
    finally:
        src.stop()
    assert out == [b"a0", b"a1", b"a2", b"a3", b"c0", b"c1", b"c2", b"c3"]


def test_a_reused_consumer_reads_exactly_the_range_asked_for(
    bootstrap: str, new_topic: Callable[..., str], group: str
) -> None:
    # in this process: the worker function itself, with its consumer pool
    from rivermark.dask import kafka

    topic = new_topic(partitions=1)
    values = fill(bootstrap, topic, 1, 200)[0]
    conf = params(bootstrap, group)
    try:
        # out of order, so a consumer's prefetched records of an earlier range must not leak in
        for start, end in [(0, 10), (150, 160), (5, 8), (10, 200), (199, 200)]:
            assert read_kafka_range(KafkaRange(topic, 0, start, end, conf)) == values[start:end]
        assert idle_consumers() == 1, "the consumer was not reused"
        with pytest.raises(
            KafkaRangeReadError, match=r"reached offset 200 of \[200, 201\) in 1.0 s"
        ):
            read_kafka_range(KafkaRange(topic, 0, 200, 201, conf, read_timeout=1.0))
    finally:
        for consumers in kafka._idle.values():
            for c in consumers:
                c.close()
        kafka._idle.clear()


# ---------------------------------------------------------------- under a Job
def total_of(batch: list[bytes]) -> int:
    return sum(int(v.split(b"-")[1]) for v in batch)


def add(a: int, b: int) -> int:
    return a + b


def build_job_graph(topic: str, conf: dict[str, Any], out: Path) -> Stream:
    batches = Stream.from_kafka_batched(
        topic, conf, poll_interval=0.05, max_batch_size=5, dask=True, name="orders"
    )
    (
        batches.map(total_of)
        .accumulate(add, start=0, name="total")
        .gather(max_inflight=6)
        .map(str)
        .sink_to_textfile(str(out), name="out")
    )
    return batches


def test_checkpoints_keep_the_cluster_state_and_the_offsets_in_step(
    client: Client, bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=3)
    fill(bootstrap, topic, 3, 150)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out.txt"
    job = Job(build_job_graph(topic, params(bootstrap, group), out), checkpoint=str(ckpt), every="0.1s", keep=1000)  # fmt: skip
    t = threading.Thread(target=job.run, daemon=True)
    t.start()
    store = LocalDirectoryStore(ckpt)
    wait_for(lambda: len(store.list_epochs()) >= 4, what="four checkpoints")
    job.stop()
    t.join(60)

    def in_step(epoch: int) -> int:
        m = store.verify(epoch)
        pos = offsets_of(m.positions["orders"])
        total = codec.loads(store.read_state(epoch, "total"))["state"]
        # the state holds every record below the positions, and no other
        assert total == sum(sum(range(pos.get(f"{topic}:{p}", 0))) for p in range(3)), epoch
        return int(sum(pos.values()))

    seen = [in_step(e) for e in store.list_epochs()]
    assert any(0 < s < 450 for s in seen), seen

    # a new job resumes from the last checkpoint and ends with the exact total
    job = Job(build_job_graph(topic, params(bootstrap, group), out), checkpoint=str(ckpt), every="0.1s", keep=1000)  # fmt: skip
    t = threading.Thread(target=job.run, daemon=True)
    t.start()
    wait_for(lambda: in_step(store.list_epochs()[-1]) == 450, what="all 450 records")
    job.stop()
    t.join(60)
    assert out.read_text().splitlines()[-1] == str(3 * sum(range(150)))


APP = textwrap.dedent(
    """
    import sys
    from distributed import Client
    import rivermark.kafka
    from rivermark import Job, Stream

    def total_of(batch):
        return sum(int(v.split(b"-")[1]) for v in batch)

    def add(a, b):
        return a + b

    address, bootstrap, topic, group, ckpt, out = sys.argv[1:7]
    client = Client(address)
    batches = Stream.from_kafka_batched(
        topic, {"bootstrap.servers": bootstrap, "group.id": group},
        poll_interval=0.05, max_batch_size=5, dask=True, name="orders",
    )
    source = batches.upstreams[0].upstreams[0]
    (
        batches.map(total_of)
        .accumulate(add, start=0, name="total")
        .gather(max_inflight=6)
        .map(str)
        .sink_to_textfile(out, name="out")
    )
    job = Job(source, checkpoint=ckpt, every="0.1s", keep=3)

    def watch():
        # the topic is complete before the job starts: stop at its end
        from rivermark.testing import wait_for
        wait_for(lambda: source.partitions.offsets.get(f"{topic}:0") == 300, 600, "the end")
        job.stop()

    import threading
    threading.Thread(target=watch, daemon=True).start()
    job.run()
    client.close()
    """
)


@pytest.mark.crash
def test_job_process_killed_while_ranges_are_in_flight_gives_identical_output(
    client: Client, bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    fill(bootstrap, topic, 1, 300)
    app = tmp_path / "app.py"
    app.write_text(APP)

    def cmd(name: str) -> list[str]:
        return [sys.executable, str(app), client.scheduler.address, bootstrap, topic,
                f"g-{name}", str(tmp_path / f"{name}-ckpt"), str(tmp_path / f"{name}.txt")]  # fmt: skip

    run_uncrashed(cmd("clean"), timeout=180)
    reference = (tmp_path / "clean.txt").read_bytes()
    assert reference.splitlines()[-1] == str(sum(range(300))).encode()

    ckpt = tmp_path / "crashed-ckpt"

    def position() -> int:
        store = LocalDirectoryStore(ckpt) if (ckpt / "checkpoints").exists() else None
        epochs = store.list_epochs() if store else []
        if not store or not epochs:
            return 0
        return int(store.read_manifest(epochs[-1]).positions["orders"].get(f"{topic}:0", 0))

    baseline: dict[int, int] = {}
    at_kill: list[int] = []

    def progressed(pid: int) -> bool:
        try:
            pos = position()
        except (OSError, KeyError, ValueError):
            return False
        return pos >= baseline.setdefault(pid, pos) + 20

    report = run_with_crashes(
        cmd("crashed"),
        kills=3,
        min_delay=0.0,
        max_delay=0.1,
        timeout=240,
        seed=3,
        on_kill=lambda _: at_kill.append(position()),
        ready=progressed,
    )
    assert report.completed and report.kills == 3
    assert len(set(at_kill)) == 3 and max(at_kill) < 300, at_kill
    assert (tmp_path / "crashed.txt").read_bytes() == reference
    assert os.path.exists(ckpt / "job.json")
