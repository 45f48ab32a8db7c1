from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
from pathlib import Path

import pytest

from rivermark.checkpoint import (
    CheckpointCorruptError,
    CheckpointLockedError,
    Job,
    LocalDirectoryStore,
    Manifest,
)

from .conftest import build


def _write(store: LocalDirectoryStore, epoch: int, blob: bytes = b"abc") -> None:
    store.write_checkpoint(
        Manifest(epoch, 1.0, {"acc": "A()"}, positions={"s": epoch}), {"acc": blob}
    )


def test_layout_is_readable(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path)
    _write(store, 42)
    d = tmp_path / "checkpoints" / "000000000042"
    assert (d / "state" / "acc.pkl").read_bytes() == b"abc"
    m = json.loads((d / "manifest.json").read_text())
    assert m["epoch"] == 42 and m["positions"] == {"s": 42}
    assert m["state"]["acc"]["size"] == 3
    assert store.verify(42).epoch == 42
    assert store.read_state(42, "acc") == b"abc"


def test_torn_write_is_no_checkpoint(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path)
    _write(store, 1)
    torn = tmp_path / "checkpoints" / "000000000002"
    (torn / "state").mkdir(parents=True)
    (torn / "state" / "acc.pkl").write_bytes(b"half")
    (torn / "manifest.json.tmp").write_text("{")
    assert store.list_epochs() == [1]
    _write(store, 3)
    store.prune(keep=10)
    assert not torn.exists()
    assert store.list_epochs() == [1, 3]


def test_a_file_named_like_a_checkpoint_is_a_leftover_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rivermark.cli import main

    source, _, first, holder = build(300, stop_at=100)
    holder["job"] = Job(source, checkpoint=tmp_path, every=None)
    holder["job"].run()
    store = LocalDirectoryStore(tmp_path)
    newest = store.list_epochs()[-1]
    stray = store.epoch_dir(newest + 1)
    stray.write_text("x")  # a file, where the next checkpoint's directory goes
    assert store.list_epochs()[-1] == newest and store.list_incomplete() == [stray]
    assert main(["checkpoints", "verify", str(tmp_path)]) == 0
    assert f"{newest + 1:>12}  not a checkpoint: {stray} has no manifest" in capsys.readouterr().out
    # the next run skips its number, resumes exactly, and deletes it after a newer checkpoint
    source, _, second, _ = build(300)
    job = Job(source, checkpoint=tmp_path, every=None)
    job.run()
    assert job.restored_epoch == newest
    assert second == list(itertools.accumulate(range(300)))
    assert not stray.exists() and store.list_epochs()[-1] > newest + 1


@pytest.mark.parametrize("damage", ["checksum", "missing", "truncated", "manifest"])
def test_damaged_newest_falls_back_with_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    source, acc, results, _ = build(300)
    Job(source, checkpoint=tmp_path, every=None).run()
    store = LocalDirectoryStore(tmp_path)
    epochs = store.list_epochs()
    assert len(epochs) == 2  # the start checkpoint and the final one
    newest = store.epoch_dir(epochs[-1])
    state = newest / "state" / "sum.pkl"
    if damage == "checksum":
        data = bytearray(state.read_bytes())
        data[-2] ^= 0xFF
        state.write_bytes(bytes(data))
    elif damage == "missing":
        state.unlink()
    elif damage == "truncated":
        state.write_bytes(state.read_bytes()[:-1])
    else:
        (newest / "manifest.json").write_text('{"epoch": 2, "ti')
    with pytest.raises(CheckpointCorruptError):
        store.verify(epochs[-1])
    source, acc, results, _ = build(300)
    job = Job(source, checkpoint=tmp_path, every=None)
    with caplog.at_level(logging.WARNING):
        job.run()
    assert job.restored_epoch == epochs[0]
    assert any(
        r.levelno == logging.WARNING and str(epochs[-1]) in r.getMessage() for r in caplog.records
    )
    # fell back to the start checkpoint: everything is replayed once
    assert results[-1] == sum(range(300))
    assert len(results) == 300


def test_retention_keeps_newest(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path)
    for e in range(1, 8):
        _write(store, e)
        store.prune(keep=3)
    assert store.list_epochs() == [5, 6, 7]


def test_job_keep_prunes(tmp_path: Path) -> None:
    source, acc, results, _ = build(3000)
    Job(source, checkpoint=tmp_path, every=None, every_batches=200, keep=2).run()
    assert len(LocalDirectoryStore(tmp_path).list_epochs()) == 2


def test_second_lock_names_holder(tmp_path: Path) -> None:
    first = LocalDirectoryStore(tmp_path)
    first.lock()
    try:
        with pytest.raises(CheckpointLockedError, match=f"pid={os.getpid()} host="):
            LocalDirectoryStore(tmp_path).lock()
    finally:
        first.unlock()
    second = LocalDirectoryStore(tmp_path)
    second.lock()
    second.unlock()


def test_job_refuses_locked_directory(tmp_path: Path) -> None:
    holder = LocalDirectoryStore(tmp_path)
    holder.lock()
    try:
        source, *_ = build(10)
        with pytest.raises(CheckpointLockedError, match="in use by another job"):
            Job(source, checkpoint=tmp_path, every=None).run()
    finally:
        holder.unlock()


#: per epoch, each node's delta-chain link: three nodes compacting at different epochs
_CHAINS = {
    3: {"a": (None, 3), "b": (None, 3), "c": (None, 3)},
    4: {"a": (3, 3), "b": (3, 3), "c": (3, 3)},
    5: {"a": (4, 3), "b": (None, 5), "c": (4, 3)},
    6: {"a": (5, 3), "b": (5, 5), "c": (None, 6)},
    7: {"a": (None, 7), "b": (6, 5), "c": (6, 6)},
    8: {"a": (7, 7), "b": (None, 8), "c": (7, 6)},
    9: {"a": (8, 7), "b": (8, 8), "c": (None, 9)},
}


def test_retention_keeps_what_every_kept_checkpoint_needs_in_turn(tmp_path: Path) -> None:
    from rivermark.checkpoint.state import codec
    from rivermark.cli import main

    store = LocalDirectoryStore(tmp_path)
    for epoch in (1, 2):
        _write(store, epoch)
    for epoch, links in _CHAINS.items():
        chains = {n: {"parent": p, "base": b} for n, (p, b) in links.items()}
        m = Manifest(epoch, 1.0, {n: "A()" for n in links}, chains=chains)
        store.write_checkpoint(m, {n: codec.dumps(f"{n}{epoch}") for n in links})
    # 9 needs 7 and 8 (a's base is 7); 7 needs 5 (b's base) and 6; 6 needs 3 (a's base)
    assert store.prune(1) == [1, 2]
    assert store.list_epochs() == [3, 4, 5, 6, 7, 8, 9]
    assert main(["checkpoints", "verify", str(tmp_path)]) == 0


class CountingStore(LocalDirectoryStore):
    """A directory store that counts the manifest reads and shared listings retention makes."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads: list[int] = []
        self.listings = 0

    def read_manifest(self, epoch: int) -> Manifest:
        self.reads.append(epoch)
        return super().read_manifest(epoch)

    def list_shared(self) -> dict[str, int]:
        self.listings += 1
        return super().list_shared()


def _shared_manifest(store: LocalDirectoryStore, epoch: int, data: bytes) -> None:
    """A checkpoint naming one shared file (as RocksDB state does), the file written first."""
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    store.write_shared(digest, data)
    info = {"sha256": digest, "size": len(data)}
    m = Manifest(epoch, 1.0, {"acc": "A()"}, files={"acc": {"state": {"000001.sst": info}}})
    store.write_checkpoint(m, {"acc": b"abc"})


def test_retention_reads_no_manifest_the_store_wrote_itself(tmp_path: Path) -> None:
    # on an object store each read is two requests, after every checkpoint
    store = CountingStore(tmp_path)
    for e in range(1, 9):
        _write(store, e)
        store.prune(keep=3)
    assert store.list_epochs() == [6, 7, 8]
    assert store.reads == []
    # the shared area was listed once: empty, and no checkpoint since named a file
    assert store.listings == 1
    # another process (a restarted job) reads what it did not write
    other = CountingStore(tmp_path)
    _write(other, 9)
    other.prune(keep=3)
    assert other.list_epochs() == [7, 8, 9] and sorted(set(other.reads)) == [6, 7, 8]


def test_retention_sees_a_replaced_manifest(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    for e in range(1, 5):
        _write(store, e)
    # re-signing replaces a manifest: here with one whose delta chain reaches back to 2
    m = dataclasses.replace(store.read_manifest(4), chains={"acc": {"parent": 3, "base": 2}})
    store.replace_manifest(4, m.to_json(None).encode())
    store.reads.clear()
    assert store.prune(keep=1) == [1]
    assert 4 in store.reads and store.list_epochs() == [2, 3, 4]


def test_shared_files_are_collected_once_a_checkpoint_names_them(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    _write(store, 1)
    store.prune(keep=1)
    assert store.listings == 1 and store.list_shared() == {}
    _shared_manifest(store, 2, b"first")
    _shared_manifest(store, 3, b"second")
    store.prune(keep=1)
    # listed again (a manifest since named shared files): the file only 2 named is gone
    assert store.list_epochs() == [3]
    assert list(store.list_shared().values()) == [len(b"second")]
    assert store.reads == []
