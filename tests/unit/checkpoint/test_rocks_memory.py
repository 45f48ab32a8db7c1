"""What bounds the memory of RocksDB keyed state: freed checkpoints, the key cache, the options."""

from __future__ import annotations

import errno
import gc
import hashlib
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.protocol import cycle
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.rocks.local import Home
from rivermark.checkpoint.state.rocks.mapping import Frozen, RocksSettings, open_db
from rivermark.checkpoint.state.rocks.writes import write


def count(acc: KeyedState, w: Any) -> KeyedState:
    acc[w] = acc.get(w, 0) + 1
    return acc


@pytest.mark.parametrize("state", ["rocksdb", "memory"])
def test_a_written_checkpoint_is_freed_without_the_garbage_collector(
    tmp_path: Path, state: str
) -> None:
    """Each checkpoint's views (a RocksDB key cache handed over at the barrier: up to
    262,144 keys; a keyed delta) leave memory once it is written, by reference
    counting alone: a reference cycle kept every one of them until the garbage
    collector's next full collection, hundreds of MiB at 10M scattered keys."""
    keys = [i * 2654435761 % (1 << 32) for i in range(6000)]
    src = Stream.from_iterable(keys, name="freed-keys")
    src.accumulate(count, start=KeyedState(), name="freed-counts")
    job = Job(
        src,
        checkpoint=str(tmp_path / "ckpt"),
        every=None,
        every_batches=500,
        keep=2,
        state=state,
        state_dir=tmp_path / "state",
    )

    def views() -> list[object]:
        return [o for o in gc.get_objects() if isinstance(o, (cycle._Pending, Frozen))]  # noqa: SLF001

    was = gc.isenabled()
    gc.collect()
    # what another test's job still holds (on the same worker) is not this job's
    before = {id(o) for o in views()}
    gc.disable()
    try:
        job.run()
        alive = [
            o
            for o in views()
            if id(o) not in before
            and not (
                isinstance(o, cycle._Pending)  # noqa: SLF001
                and "freed-keys" not in o.manifest.fingerprint
            )
        ]
    finally:
        if was:
            gc.enable()
        job.state_backend.close()
    assert len(job.checkpoints) >= 6
    assert alive == []


def test_a_checkpoint_uploads_its_files_a_piece_at_a_time(tmp_path: Path) -> None:
    """A RocksDB state file goes to a directory store without being read whole: it is
    up to 64 MiB, and read whole it was that much more memory at each upload."""
    store = LocalDirectoryStore(tmp_path / "ckpt")
    # memtables of 8 MiB: the checkpoint's flush writes one file of about 6 MB
    home = Home(tmp_path / "h", RocksSettings(cache=64 << 20, limit=4096), store=store)
    m = home.open(codec.reader())
    m.update({i: os.urandom(1000) for i in range(6000)})  # incompressible
    cp = home.take(1, 0)
    tracemalloc.start()
    try:
        files, _ = home.upload(cp, store)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        home.close()
    ssts = {n: i for n, i in files.items() if n.endswith(".sst")}
    largest = max(i["size"] for i in ssts.values())
    assert largest > 5 << 20
    assert peak < 1 << 20, f"{peak} bytes allocated for a file of {largest}"
    for info in ssts.values():  # the store holds each file whole, under its digest
        held = store.read_shared(info["sha256"])
        assert len(held) == info["size"] and hashlib.sha256(held).hexdigest() == info["sha256"]


def test_the_memtables_are_charged_to_the_one_block_cache(tmp_path: Path) -> None:
    """``state_cache`` bounds the block cache and the memtables together: RocksDB
    charges every memtable's memory to the job's one block cache."""
    settings = RocksSettings(cache=32 << 20)
    db = open_db(tmp_path / "db", settings)
    try:
        write(db, _fill, settings.write_options(), "db")
        cache = settings._shared["cache"]  # noqa: SLF001 - the settings' one cache
        held = db.property_int_value("rocksdb.cur-size-all-mem-tables")
        assert held > 1 << 20  # the writes are in the memtable, not flushed
        assert cache.get_usage() >= held
    finally:
        db.close()


def _fill(batch: Any) -> None:
    for i in range(3000):
        batch.put(codec.pack(i), os.urandom(500))


def test_a_file_system_without_sendfile_stores_the_file_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel cannot copy between the two files (``sendfile`` refused with
    EINVAL), the file is stored whole all the same, a piece at a time.  No such file
    system here: ``sendfile`` is made to refuse."""

    def refused(*args: object) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    source = tmp_path / "000012.sst"
    data = os.urandom((8 << 20) + 12345)
    source.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    store = LocalDirectoryStore(tmp_path / "ckpt")
    monkeypatch.setattr(os, "sendfile", refused)
    tracemalloc.start()
    try:
        store.write_shared_file(digest, source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store.read_shared(digest) == data
    assert peak < 3 << 20  # two pieces at most, never the file
