"""RocksDB state stays fast at any key order: its table options, lookups, the key cache."""

from __future__ import annotations

import random
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import LocalDirectoryStore
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.rocks.local import Home
from rivermark.checkpoint.state.rocks.mapping import (
    FROZEN_GROWTH,
    WRITE_CHUNK,
    RocksSettings,
    evict_step,
    open_db,
)
from rivermark.checkpoint.state.rocks.writes import store_error, write
from rivermark.errors import StateStoreError


def _options_file(db_dir: Path) -> dict[str, str]:
    """The table options RocksDB itself wrote into the database's OPTIONS file."""
    newest = max(db_dir.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    out: dict[str, str] = {}
    for line in newest.read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep:
            out[name] = value
    return out


def test_the_table_options_partition_the_index_and_filters(tmp_path: Path) -> None:
    """The options that keep scattered keys fast, as RocksDB applied them.

    A whole bloom filter and index per SST file (RocksDB's default) is one
    block that outgrows a shard of the block cache at a few million keys;
    every lookup then reads it again from disk (25 times slower).
    """
    db = open_db(tmp_path / "db", RocksSettings(cache=32 << 20))
    db.close()
    o = _options_file(tmp_path / "db")
    assert o["index_type"] == "kTwoLevelIndexSearch"
    assert o["partition_filters"] == "true"
    assert o["metadata_block_size"] == "4096"
    assert o["pin_top_level_index_and_filter"] == "true"
    assert o["cache_index_and_filter_blocks"] == "true"
    assert o["cache_index_and_filter_blocks_with_high_priority"] == "true"
    assert o["pin_l0_filter_and_index_blocks_in_cache"] == "true"
    assert o["filter_policy"] == "bloomfilter"
    assert o["whole_key_filtering"] == "true"
    assert o["block_size"] == "4096"
    assert o["no_block_cache"] == "false"
    # a new key (a miss) skips the search of the memtables' skip lists
    assert o["memtable_whole_key_filtering"] == "true"
    assert float(o["memtable_prefix_bloom_size_ratio"]) == 0.1


def _lookups(tmp_path: Path, n: int) -> tuple[float, float]:
    """Blocks and bytes read into the block cache per lookup in a store of ``n`` scattered keys."""
    settings = RocksSettings(cache=8 << 20, statistics=True)  # 16 shards of 512 KiB
    db = open_db(tmp_path / f"db-{n}", settings)
    rng = random.Random(n)
    keys = list(range(n))
    rng.shuffle(keys)
    pack = codec.pack

    def fill(batch: Any, part: list[int]) -> None:
        for k in part:
            batch.put(pack(k * 7919), pack(k))

    for i in range(0, n, 20_000):
        write(db, partial(fill, part=keys[i : i + 20_000]), settings.write_options(), "db")
    db.flush(True)
    db.compact_range(None, None)  # one sorted run: files of every size up to the target
    before = settings.statistics_counts()
    lookups = 4000
    for _ in range(lookups):
        db.get(pack(rng.randrange(2 * n) * 7919))  # half of them absent
    after = settings.statistics_counts()
    db.close()

    def grew(name: str) -> int:
        return after.get(name, 0) - before.get(name, 0)

    blocks = grew("rocksdb.block.cache.miss")
    read = sum(
        grew(f"rocksdb.block.cache.{kind}.bytes.insert") for kind in ("index", "filter", "data")
    )
    return blocks / lookups, read / lookups


def test_a_lookup_reads_a_bounded_number_of_blocks_as_the_store_grows(tmp_path: Path) -> None:
    small_blocks, small_bytes = _lookups(tmp_path, 100_000)
    big_blocks, big_bytes = _lookups(tmp_path, 800_000)
    # at most a filter partition, an index partition and a data block per lookup,
    # each about 4 KiB, at any size (a whole filter of 800,000 keys is ~1 MB)
    assert big_blocks <= 3, (small_blocks, big_blocks)
    assert big_bytes <= 3 * 4096 * 1.5, (small_bytes, big_bytes)
    assert big_bytes <= 4 * max(small_bytes, 1024), (small_bytes, big_bytes)


def test_a_full_key_cache_writes_a_few_keys_at_a_time_not_all(tmp_path: Path) -> None:
    settings = RocksSettings(cache=16 << 20, limit=4096, statistics=True)
    m = Home(tmp_path / "h", settings).open(codec.reader())
    step = evict_step(4096)
    assert step == 64
    for i in range(4096):
        m[i] = i
    written = settings.statistics_counts()["rocksdb.number.keys.written"]
    m[5000] = 1  # the cache is full: the oldest keys leave it, written
    grew = settings.statistics_counts()["rocksdb.number.keys.written"] - written
    assert grew == step + 1, grew  # the keys that left, and the number of keys
    assert m.cached() == 4096 - step + 1
    # a key that left the cache is read back with one lookup, its value intact
    assert m[0] == 0 and m[4095] == 4095 and len(m) == 4097
    rng = random.Random(5)
    expect = {i: i for i in range(4096)} | {5000: 1}
    for _ in range(20_000):
        k = rng.randrange(10_000)
        m[k] = expect[k] = m.get(k, 0) + 1
        assert m.cached() <= 4096
    assert dict(m.items()) == expect and len(m) == len(expect)


def test_keys_that_arrive_before_the_worker_wrote_the_barrier_wait_in_memory(
    tmp_path: Path,
) -> None:
    """Nothing after a barrier reaches the database before its RocksDB checkpoint."""
    home = Home(tmp_path / "h", RocksSettings(cache=16 << 20, limit=100))
    home.store = LocalDirectoryStore(tmp_path / "ckpt")
    m = home.open(codec.reader())
    for i in range(100):
        m[i] = i
    cp = home.take(1, 0)
    for i in range(100, 490):  # more than the limit: the cache grows instead
        m[i] = i
    assert not cp.made and m.cached() == 390
    for i in range(490, 520):  # FROZEN_GROWTH times the limit: the checkpoint is made first
        m[i] = i
    assert FROZEN_GROWTH == 4
    assert cp.made and len(m) == 520
    copy = open_db(cp.directory, home.settings)
    assert sum(1 for _ in copy.keys()) == 100  # noqa: SIM118 - an Rdict, not a dict
    copy.close()


def test_the_worker_writes_a_barrier_in_small_batches_so_the_loop_runs_between(
    tmp_path: Path,
) -> None:
    """rocksdict holds the GIL while RocksDB writes: one batch of a barrier's 10,000
    changed keys would stop the record loop for the whole write."""
    settings = RocksSettings(cache=16 << 20, limit=20_000, statistics=True)
    home = Home(tmp_path / "h", settings)
    home.store = LocalDirectoryStore(tmp_path / "ckpt")
    m = home.open(codec.reader())
    for i in range(10_000):
        m[i * 7919] = i
    cp = home.take(1, 0)
    before = settings.statistics_counts()
    home.make(cp)
    after = settings.statistics_counts()
    writes = after["rocksdb.write.self"] - before["rocksdb.write.self"]
    keys = after["rocksdb.number.keys.written"] - before["rocksdb.number.keys.written"]
    assert keys == 10_001  # every key, and the number of keys
    assert writes >= 10_000 // WRITE_CHUNK, writes  # batches of at most WRITE_CHUNK keys
    assert keys / writes <= WRITE_CHUNK + 1
    copy = open_db(cp.directory, home.settings)
    assert sum(1 for _ in copy.keys()) == 10_000  # noqa: SIM118 - an Rdict, not a dict
    copy.close()
    assert [m[i * 7919] for i in (0, 4999, 9999)] == [0, 4999, 9999] and len(m) == 10_000


@pytest.mark.parametrize(
    ("raised", "line"),
    [
        (
            Exception(
                "IO error: No space left on device: While appending to file: /s/db/000013.sst: "
                "No space left on device"
            ),
            "the RocksDB state in '/s/db' cannot be written: no space left on the device "
            "(ENOSPC); free disk space there, or give the job a state_dir on a larger disk "
            "(Job(state_dir=...), --state-dir) and run again: the job resumes from its last "
            "complete checkpoint",
        ),
        (
            Exception("IO error: Permission denied\nmore"),
            "the RocksDB state in '/s/db' cannot be written: IO error: Permission denied; fix "
            "the cause",
        ),
    ],
)
def test_a_failed_write_is_one_line_naming_the_state_directory(raised: Any, line: str) -> None:
    with pytest.raises(StateStoreError, match=re.escape(line)):
        raise store_error("/s/db", raised)


def test_a_failed_state_write_is_never_dropped_by_an_error_policy() -> None:
    """The store failed, not the record: ``on_error="skip"`` does not hide it."""

    def full(acc: int, x: int) -> int:
        raise store_error("/s/db", Exception("IO error: No space left on device"))

    src = Stream.from_iterable([1], name="xs")
    counts = src.accumulate(full, start=0, on_error="skip", name="counts")
    out = counts.sink_to_list()
    with pytest.raises(StateStoreError, match=re.escape("no space left on the device (ENOSPC)")):
        src.emit(1)
    assert out == [] and counts.errors_skipped == 0


def test_the_key_cache_and_its_changes_stay_out_of_the_garbage_collector(
    tmp_path: Path,
) -> None:
    """Keys and values that are numbers, strings or bytes leave the mapping's containers
    untracked: no collection walks them (a set of 500,000 keys costs one 25 ms)."""
    import gc

    home = Home(tmp_path / "h", RocksSettings(cache=16 << 20, limit=1_000))
    home.store = LocalDirectoryStore(tmp_path / "ckpt")
    m = home.open(codec.reader())
    for i in range(1_500):  # new keys: each looked up (absent) first, evictions too
        m[i * 7919] = m.get(i * 7919, 0) + 1
    m["name"] = "text"
    m[b"raw"] = 2.5
    del m[7919]
    assert "gone" not in m  # a key looked up and absent is cached too
    containers = {"cache": m._cache, "changes": m._dirty}  # noqa: SLF001 - what is pinned
    assert len(containers["cache"]) > 100 and len(containers["changes"]) > 100
    assert [name for name, c in containers.items() if gc.is_tracked(c)] == []
    cp = home.take(1, 0)  # the barrier hands both over
    handed = {"values": cp.frozen.values, "changes": cp.frozen.dirty}
    m[1] = 1
    assert [name for name, c in handed.items() if gc.is_tracked(c)] == []
    assert not gc.is_tracked(m._cache) and not gc.is_tracked(m._dirty)  # noqa: SLF001
    home.upload(cp, home.store)
    assert m[7919 * 3] == 1 and 7919 not in m and m["name"] == "text"
    home.close()
