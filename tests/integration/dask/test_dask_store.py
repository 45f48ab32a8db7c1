"""``DaskDatasetStore``: the checkpoint Store contract on a real LocalCluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from distributed import Client

from rivermark import Job, Stream
from rivermark.checkpoint import CheckpointCorruptError, CheckpointLockedError, Manifest
from rivermark.checkpoint.state import codec
from rivermark.dask.store import DaskDatasetStore
from rivermark.errors import ConfigurationError

pytestmark = pytest.mark.dask


def new_store(client: Client, **kwargs: object) -> DaskDatasetStore:
    return DaskDatasetStore(client, prefix=f"test-{uuid.uuid4().hex[:12]}", **kwargs)  # type: ignore[arg-type]


def write(store: DaskDatasetStore, epoch: int, states: dict[str, bytes]) -> None:
    store.write_checkpoint(Manifest(epoch, 0.0, {"acc": "Accumulate"}, {"src": epoch * 10}), states)


def test_write_list_read_verify_prune(client: Client) -> None:
    store = new_store(client)
    assert store.list_epochs() == [] and store.latest_states() == {}
    for e in (1, 2, 3):
        write(store, e, {"acc": codec.dumps({"state": e})})
    assert store.list_epochs() == [1, 2, 3]
    m = store.verify(3)
    assert m.positions == {"src": 30}
    assert m.state["acc"]["file"] == store.state_name(3, "acc")
    assert codec.loads(store.read_state(2, "acc")) == {"state": 2}
    assert store.prune(2) == [1]
    assert store.list_epochs() == [2, 3]
    assert store.state_name(1, "acc") not in client.list_datasets()
    # any client of the cluster reads the newest state: what the streamz job published by hand
    assert DaskDatasetStore(client, prefix=store.prefix).latest_states() == {"acc": {"state": 3}}


def test_checkpoint_without_manifest_does_not_exist_and_is_pruned(client: Client) -> None:
    store = new_store(client)
    write(store, 1, {"acc": b"one"})
    # a torn write of epoch 2: state published, the writer died before the manifest
    client.publish_dataset(b"two", name=store.state_name(2, "acc"))
    assert store.list_epochs() == [1]
    assert [p.name for p in store.list_incomplete()] == ["000000000002"]
    write(store, 3, {"acc": b"three"})
    store.prune(10)
    assert store.list_incomplete() == []
    assert store.list_epochs() == [1, 3]


def test_damaged_checkpoint_fails_verification_and_readers_fall_back(client: Client) -> None:
    store = new_store(client)
    write(store, 1, {"acc": codec.dumps("good")})
    write(store, 2, {"acc": codec.dumps("newer")})
    client.publish_dataset(b"garbage", name=store.state_name(2, "acc"), override=True)
    with pytest.raises(CheckpointCorruptError, match="has 7 bytes, the manifest says"):
        store.verify(2)
    client.unpublish_dataset(store.state_name(2, "acc"))
    with pytest.raises(CheckpointCorruptError, match="missing or unreadable"):
        store.verify(2)
    assert store.latest_states() == {"acc": "good"}


def test_damaged_manifest_and_set_aside(client: Client) -> None:
    store = new_store(client)
    write(store, 1, {"acc": codec.dumps("one")})
    write(store, 2, {"acc": codec.dumps("two")})
    text = client.get_dataset(store.manifest_name(2)).replace('"epoch": 2', '"epoch": 1')
    client.publish_dataset(text, name=store.manifest_name(2), override=True)
    with pytest.raises(CheckpointCorruptError, match="checksum mismatch"):
        store.verify(2)
    where = store.set_aside([1, 2])
    assert store.list_epochs() == [] and store.list_incomplete() == []
    assert f"{where}/000000000001/manifest" in client.list_datasets()
    assert client.get_dataset(f"{where}/000000000002/state/acc") == codec.dumps("two")


def test_a_job_resumes_from_the_dataset_store(client: Client, tmp_path: Path) -> None:
    store = new_store(client)

    def build(items: list[int]) -> tuple[Stream, list[int]]:
        source = Stream.from_iterable(items, name="numbers")
        out: list[int] = []
        source.scatter().accumulate(lambda a, b: a + b, start=0, name="total").gather().sink(
            out.append
        )
        return source, out

    source, out = build(list(range(10)))
    Job(source, checkpoint=store, every=None).run()
    assert out[-1] == 45
    last = store.read_manifest(store.list_epochs()[-1])
    assert last.positions == {"numbers": 10}
    assert store.latest_states() == {"total": {"state": 45}}

    # more input: a new job on the same prefix restores the sum and the position
    source, out = build(list(range(15)))
    job = Job(source, checkpoint=DaskDatasetStore(client, prefix=store.prefix), every=None)
    job.run()
    assert job.restored_epoch == last.epoch
    assert out == [45 + 10, 45 + 10 + 11, 45 + 10 + 11 + 12, 45 + 10 + 11 + 12 + 13, 105]


def test_lock_refuses_a_second_job_and_frees_when_the_holder_dies(
    client: Client, tmp_path: Path
) -> None:
    store = new_store(client, lock_wait=0.2)
    store.lock()
    try:
        other = Client(client.scheduler.address, set_as_default=False)
        try:
            with pytest.raises(CheckpointLockedError, match=re.escape(store.prefix)) as info:
                DaskDatasetStore(other, prefix=store.prefix, lock_wait=0.2).lock()
            assert "is in use by another job (pid=" in str(info.value)
        finally:
            other.close()
    finally:
        store.unlock()
    assert store.holder() is None

    # a process that took the lock and died (SIGKILL) does not keep it
    script = textwrap.dedent(
        f"""
        import os, signal
        from distributed import Client
        from rivermark.dask.store import DaskDatasetStore
        client = Client({client.scheduler.address!r})
        DaskDatasetStore(client, prefix={store.prefix!r}).lock()
        print("locked", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.stdout == b"locked\n", proc.stderr.decode()[-2000:]
    store2 = DaskDatasetStore(client, prefix=store.prefix, lock_wait=10)
    store2.lock()  # waits until the scheduler has noticed the dead client
    assert f"pid={os.getpid()} " in (store2.holder() or "")
    store2.unlock()


def test_bad_arguments_are_configuration_errors(client: Client) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("prefix must be a non-empty string")):
        DaskDatasetStore(client, prefix="")
    with pytest.raises(ConfigurationError, match=re.escape("client must be a distributed.Client")):
        DaskDatasetStore("tcp://localhost:8786")
    with pytest.raises(ConfigurationError, match=re.escape("lock_wait must be a number")):
        DaskDatasetStore(client, lock_wait=-1)
