"""Keyed state in RocksDB (``Job(state="rocksdb")``): the mapping, checkpoints, restores."""

from __future__ import annotations

import logging
import random
import re
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.errors import JobFailedError, ManifestError, UntrustedStateError
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.rocks import RocksKeyedState
from rivermark.checkpoint.state.rocks.local import Home
from rivermark.checkpoint.state.rocks.mapping import RocksSettings, open_db
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.errors import ConfigurationError, RivermarkError
from rivermark.state import KeyedStore


def count(acc: KeyedState, w: Any) -> KeyedState:
    acc[w] = acc.get(w, 0) + 1
    return acc


def _home(tmp_path: Path, limit: int = 7) -> Home:
    return Home(tmp_path / "h", RocksSettings(cache=16 << 20, limit=limit))


def test_the_mapping_behaves_as_a_dict_through_flushes(tmp_path: Path) -> None:
    m = _home(tmp_path).open(codec.reader())
    d: dict[Any, Any] = {}
    rng = random.Random(3)
    keys = [*range(30), "a", "b", (1, "x"), 2.5]
    for _ in range(3000):
        k = rng.choice(keys)
        op = rng.random()
        if op < 0.5:
            m[k] = d[k] = (m.get(k, (0,))[0] + 1,)
        elif op < 0.7 and k in d:
            del m[k]
            del d[k]
        elif op < 0.8:
            assert m.pop(k, None) == d.pop(k, None)
        else:
            assert (k in m) == (k in d) and m.get(k) == d.get(k)
        assert len(m) == len(d)
    assert dict(m.items()) == d and m == d and m.copy() == d
    assert sorted(m, key=repr) == sorted(d, key=repr)
    assert sorted(m.values()) == sorted(d.values())
    m.setdefault("new", 5)
    assert m["new"] == 5 and len(m) == len(d) + 1
    m.clear()
    assert len(m) == 0 and list(m) == [] and not m


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_both_backends_are_one_keyed_store_and_rocksdb_holds_no_dict(
    tmp_path: Path, backend: str
) -> None:
    """Operators and checkpoints see one interface; the RocksDB mapping is no ``dict``
    (whose methods would read an empty or partial container)."""
    store: KeyedStore = (
        KeyedState() if backend == "memory" else _home(tmp_path, limit=4).open(codec.reader())
    )
    assert isinstance(store, KeyedStore)
    assert isinstance(store, dict) == (backend == "memory")
    store.freeze = list
    for i in range(20):  # past the RocksDB cache's limit: most keys on disk
        store[i] = [i]
    store[3].append("x")
    store.touched(3)
    store.setdefault(20, [0])
    assert store.pop(0) == [0] and 0 not in store and len(store) == 20
    expect = {i: [i] for i in range(1, 21)} | {3: [3, "x"], 20: [0]}
    assert store.copy_all() == expect == dict(store.items()) == store.copy()
    assert sorted(store) == sorted(expect) and store == expect
    assert store.external == (backend == "rocksdb")
    if backend == "memory":
        assert store.pending_changes() == 20  # before the first checkpoint: all of it
    else:
        with pytest.raises(TypeError, match=re.escape("checkpointed as a RocksDB checkpoint")):
            store.take_delta()


def test_a_value_changed_in_place_and_touched_is_written(tmp_path: Path) -> None:
    m = _home(tmp_path, limit=4096).open(codec.reader())
    for i in range(50):
        buf = m.get(i % 5)
        if buf is None:
            buf = m[i % 5] = []
        buf.append(i)
        m.touched(i % 5)
    m.flush()
    assert m[0] == [0, 5, 10, 15, 20, 25, 30, 35, 40, 45]


def _graph(items: list[Any]) -> tuple[Stream, Stream, Stream, Stream, Any]:
    src = Stream.from_iterable(items, name="words")
    counts = src.accumulate(count, start=KeyedState(), name="counts")
    freq = src.frequencies(name="freq")
    firsts = src.unique(name="firsts").sink_to_list()
    groups = src.partition(3, key=lambda x: x % 5, name="groups").sink_to_list()
    return src, counts, freq, groups, firsts


def _job(src: Stream, ckpt: Path, state_dir: Path, **kw: Any) -> Job:
    return Job(src, checkpoint=str(ckpt), every=None, state="rocksdb", state_dir=state_dir, **kw)


def test_metrics_read_from_another_thread_leave_a_partitions_groups_intact(
    tmp_path: Path,
) -> None:
    # the progress line and the metrics endpoint read every node's backlog from
    # their own thread while records flow: a partition's open groups in RocksDB
    # must not be written out (and the cache emptied) under the operator, or an
    # append lands in a list the mapping no longer holds and a record is lost
    n = 30_000
    src = Stream.from_iterable(range(n), name="nums")
    part = src.partition(3, key=lambda x: x % 11, name="groups")
    out = part.sink_to_list()
    job = _job(src, tmp_path / "ckpt", tmp_path / "state")
    done = threading.Event()
    reads: list[int | None] = []

    def read_metrics() -> None:
        while not done.is_set():
            if job.running:
                # what the metrics read of each node (job.metrics.read(): the backlog)
                reads.append(part.records_held())

    reader = threading.Thread(target=read_metrics, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the threads take turns often: the reads land mid-record
    reader.start()
    try:
        job.run()
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(interval)
    expected: list[tuple[int, ...]] = []
    groups: dict[int, list[int]] = {}
    for x in range(n):
        g = groups.setdefault(x % 11, [])
        g.append(x)
        if len(g) == 3:
            expected.append(tuple(g))
            g.clear()
    assert len(reads) > 100
    assert out == expected
    # the backlog the metrics show: the records in open groups
    held = sum(len(g) for g in groups.values())
    assert part.records_held() == held
    assert {m.id: m.backlog for m in job.metrics.read().nodes}["groups"] == held


def test_restarts_on_the_same_machine_use_the_local_checkpoint(tmp_path: Path) -> None:
    ckpt, sd = tmp_path / "ckpt", tmp_path / "state"
    src, counts, freq, groups, firsts = _graph([i % 300 for i in range(1000)])
    _job(src, ckpt, sd, state_cache="8MiB").run()
    assert isinstance(counts.state, RocksKeyedState) and len(counts.state) == 300
    assert counts.state[7] == 4 and dict(freq.counts.items()) == dict(counts.state.items())
    src, counts, freq, groups2, firsts2 = _graph([i % 400 for i in range(2000)])
    job = _job(src, ckpt, sd)
    job.run()
    assert all(r.local and r.bytes == 0 for r in job.state_backend.restores.values())
    assert set(job.state_backend.restores) == {"counts", "freq", "firsts", "groups"}
    assert len(counts.state) == 400 and counts.state[7] == 4 + 2 and counts.state[350] == 3
    # unique: only the keys 300..399 are new after the restore (the list is restored too)
    assert firsts2 == list(range(400))


def test_a_fresh_machine_fetches_and_a_damaged_local_state_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt, sd = tmp_path / "ckpt", tmp_path / "state"
    src, counts, *_ = _graph([i % 300 for i in range(1000)])
    _job(src, ckpt, sd).run()
    src, counts, *_ = _graph([i % 300 for i in range(1500)])
    job = _job(src, ckpt, tmp_path / "fresh")
    job.run()
    fetched = job.state_backend.restores["counts"]
    assert not fetched.local and fetched.bytes > 0 and fetched.damaged is None
    assert counts.state[7] == 5
    # damage one byte of an SST file of the local checkpoint the next run restores
    store = LocalDirectoryStore(ckpt)
    epoch = store.list_epochs()[-1]
    sst = next((tmp_path / "fresh" / "counts" / "state" / f"ckpt-{epoch:012d}").glob("*.sst"))
    data = bytearray(sst.read_bytes())
    data[len(data) // 2] ^= 0xFF
    sst.write_bytes(bytes(data))
    src, counts, *_ = _graph([i % 300 for i in range(1800)])
    job = _job(src, ckpt, tmp_path / "fresh")
    with caplog.at_level(logging.WARNING):
        job.run()
    info = job.state_backend.restores["counts"]
    assert (
        not info.local and info.damaged == f"{sst.name} does not match its sha256 in the manifest"
    )
    assert "does not hold checkpoint" in caplog.text and counts.state[7] == 6
    assert job.state_backend.restores["freq"].local  # the others were intact


def test_retention_keeps_every_file_a_kept_checkpoint_names(tmp_path: Path) -> None:
    ckpt, sd = tmp_path / "ckpt", tmp_path / "state"
    store = LocalDirectoryStore(ckpt)
    for n in range(1, 8):
        src, counts, *_ = _graph([(i * n) % 997 for i in range(300 * n)])
        _job(src, ckpt, sd, keep=2).run()
    epochs = store.list_epochs()
    assert len(epochs) == 2
    needed = set()
    for e in epochs:
        m = store.verify(e)
        assert m.format == 5 and set(m.files) == {"counts", "freq", "firsts", "groups"}
        needed |= set(m.shared_files())
    assert set(store.list_shared()) == needed
    # a file a kept checkpoint names, gone from the store: that checkpoint fails verification
    victim = next(iter(store.read_manifest(epochs[-1]).shared_files()))
    (ckpt / "shared" / victim).unlink()
    with pytest.raises(Exception, match="is missing"):
        store.verify(epochs[-1])


def test_verify_deep_finds_a_shared_file_altered_at_its_size(tmp_path: Path) -> None:
    from rivermark.checkpoint.tools.inspection import verify_checkpoints

    ckpt, sd = tmp_path / "ckpt", tmp_path / "state"
    src, *_ = _graph([i % 300 for i in range(1000)])
    _job(src, ckpt, sd).run()
    store = LocalDirectoryStore(ckpt)
    epoch = store.list_epochs()[-1]
    victim = ckpt / "shared" / next(iter(store.read_manifest(epoch).shared_files()))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size: what a job's start checks holds
    victim.write_bytes(bytes(data))
    assert verify_checkpoints(store, epoch)[0]["ok"]
    row = verify_checkpoints(store, epoch, deep=True)[0]
    assert not row["ok"] and row["problem"] == "damaged" and row["refused"]
    assert f"shared/{victim.name}) does not match its sha256" in row["error"]
    # a job that fetches it (a fresh state directory) refuses in one line
    src, *_ = _graph([i % 300 for i in range(1000)])
    with pytest.raises(RivermarkError, match="does not match its sha256"):
        _job(src, ckpt, tmp_path / "fresh").run()


def test_the_manifest_names_files_under_its_checksum() -> None:
    m = Manifest(3, 0.0, {}, state={"n": {"file": "state/n.pkl", "size": 1, "sha256": "0" * 64}})
    m.files = {"n": {"counts": {"000007.sst": {"sha256": "a" * 64, "size": 10}}}}
    text = m.to_json()
    assert Manifest.from_json(text).files == m.files and '"format": 5' in text
    with pytest.raises(ManifestError, match="checksum mismatch"):
        Manifest.from_json(text.replace('"size": 10', '"size": 11'))
    bad = Manifest(3, 0.0, {}, state=m.state)
    bad.files = {"n": {"counts": {"../x": {"sha256": "a" * 64, "size": 1}}}}
    with pytest.raises(
        ManifestError, match=re.escape("manifest file 'n/counts/../x': not a plain")
    ):
        Manifest.from_json(bad.to_json())


def test_switching_backends_keeps_the_state(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    src, counts, *_ = _graph([i % 50 for i in range(200)])
    Job(src, checkpoint=str(ckpt), every=None).run()  # in memory
    src, counts, *_ = _graph([i % 50 for i in range(300)])
    _job(src, ckpt, tmp_path / "s").run()
    assert isinstance(counts.state, RocksKeyedState) and counts.state[3] == 6
    src, counts, *_ = _graph([i % 50 for i in range(400)])
    Job(src, checkpoint=str(ckpt), every=None).run()  # back in memory
    assert type(counts.state) is KeyedState and counts.state[3] == 8


class Opaque:
    """A value only pickle can write."""

    def __init__(self, n: int) -> None:
        self.n = n


def test_pickled_values_of_an_unsigned_store_are_refused(tmp_path: Path) -> None:
    def keep(acc: KeyedState, x: int) -> KeyedState:
        acc.get(x)  # the second 2 reads what the first one wrote
        acc[x] = Opaque(x)
        return acc

    def graph(items: list[int]) -> tuple[Stream, Stream]:
        src = Stream.from_iterable(items, name="xs")
        return src, src.accumulate(keep, start=KeyedState(), name="objs")

    src, objs = graph([1, 2])
    _job(src, tmp_path / "ckpt", tmp_path / "s").run()
    assert objs.state[2].n == 2  # written and read by the same process
    # values are read when used: the first read of a pickled value stops the job
    src, objs = graph([1, 2, 2])
    with pytest.raises(JobFailedError, match="unpickling runs code") as failed:
        _job(src, tmp_path / "ckpt", tmp_path / "s").run()
    assert isinstance(failed.value.__cause__, UntrustedStateError)
    src, objs = graph([1, 2, 2])
    _job(src, tmp_path / "ckpt", tmp_path / "s", trust_store=True).run()
    assert objs.state[2].n == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"state": "disk"},
            "Job: state must be 'memory' (the default), 'rocksdb', or a dict of node ids "
            "to either, got 'disk'",
        ),
        (
            {"state": "rocksdb", "state_cache": "1MiB"},
            "Job: state_cache must be a number of bytes from 8 MiB to 1 TiB (e.g. '256MiB'), "
            "got '1MiB'",
        ),
        (
            {"state": "rocksdb", "state_cache": "1e999"},  # inf
            "Job: state_cache must be a number of bytes from 8 MiB to 1 TiB (e.g. '256MiB'), "
            "got '1e999'",
        ),
        (
            {"state": "rocksdb", "state_cache": 10**30},  # more than RocksDB's size_t
            "Job: state_cache must be a number of bytes from 8 MiB to 1 TiB (e.g. '256MiB'), "
            f"got {10**30}",
        ),
        (
            {"state": {"counts": "lmdb"}},
            "Job: state={'counts': 'lmdb'}: each node id maps to 'memory' or 'rocksdb', not "
            "{'counts': 'lmdb'}",
        ),
    ],
)
def test_bad_state_options_are_one_line(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    src, *_ = _graph([1])
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Job(src, checkpoint=str(tmp_path / "c"), **kwargs)


def test_a_node_id_that_is_not_in_the_graph_is_refused(tmp_path: Path) -> None:
    src, *_ = _graph([1])
    job = Job(src, checkpoint=str(tmp_path / "c"), state={"count": "rocksdb"})
    with pytest.raises(ConfigurationError, match=re.escape("names 'count', which is no stateful")):
        job.run()


def test_a_checkpoint_holds_the_state_of_its_barrier(tmp_path: Path) -> None:
    home = _home(tmp_path, limit=10)
    home.store = LocalDirectoryStore(tmp_path / "ckpt")
    m = home.open(codec.reader())
    for i in range(25):
        m[i] = i
    cp = home.take(1, 0)
    assert not cp.made and m[3] == 3  # read from what the barrier handed over
    for i in range(25, 70):  # the cache fills up: the checkpoint is made first
        m[i] = -i
    assert cp.made and len(m) == 70
    files, small = home.upload(cp, home.store)  # the worker finds it made
    assert set(small) < set(files) and any(n.endswith(".sst") for n in files)
    copy = tmp_path / "copy"
    shutil.copytree(cp.directory, copy)
    db = open_db(copy, home.settings)
    at_barrier = RocksKeyedState(db, str(copy), 100, codec.reader(), None)
    assert len(at_barrier) == 25 and dict(at_barrier.items()) == {i: i for i in range(25)}


def test_values_changed_in_place_after_the_barrier_stay_out_of_its_checkpoint(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, limit=1000)
    home.store = LocalDirectoryStore(tmp_path / "ckpt")
    m = home.open(codec.reader())
    m.freeze = list  # as partition(key=...) sets it
    m["k"] = [1]
    m.touched("k")
    cp = home.take(1, 0)
    buf = m.get("k")  # read back from what the barrier handed over
    buf.append(2)
    m.touched("k")
    home.upload(cp, home.store)
    copy = tmp_path / "copy"
    shutil.copytree(cp.directory, copy)
    at_barrier = RocksKeyedState(open_db(copy, home.settings), str(copy), 9, codec.reader(), None)
    assert at_barrier["k"] == [1] and m["k"] == [1, 2]


def test_a_home_removes_only_its_own_local_checkpoints_and_a_restore_the_earlier_owners(
    tmp_path: Path,
) -> None:
    store = LocalDirectoryStore(tmp_path / "ckpt")
    old, new = _home(tmp_path), _home(tmp_path)  # two owners of one node's directory
    old.store = new.store = store
    m = old.open(codec.reader())
    m.update({i: i for i in range(20)})
    cp = old.take(1, 0)
    old.upload(cp, store)
    # the next owner restores epoch 1 from the local checkpoint: its own database
    n = new.promote(1, codec.reader())
    assert dict(n.items()) == {i: i for i in range(20)} and new.live != old.live
    n[99] = 99
    mine = new.take(2, 1)
    new.upload(mine, store)
    # the old owner, which has not noticed yet, makes one more: it leaves the new one's alone
    m[50] = 50
    late = old.take(3, 1)
    old.upload(late, store)
    assert mine.directory.is_dir() and late.directory.is_dir()
    n[100] = 100
    newer = new.take(4, 2)
    new.upload(newer, store)  # removes its own older ones (not epoch 2: durable) only
    assert {p.name for p in tmp_path.joinpath("h").glob("ckpt-*")} == {
        "ckpt-000000000002", "ckpt-000000000003", "ckpt-000000000004",
    }  # fmt: skip
    assert len(n) == 22 and len(m) == 21
    # a restore removes what earlier owners left (the lock is the restorer's)
    again = _home(tmp_path)
    again.store = store
    assert len(again.promote(4, codec.reader())) == 22
    assert [p.name for p in tmp_path.joinpath("h").glob("ckpt-*")] == ["ckpt-000000000004"]
    for h in (old, new, again):
        h.close()
    assert not list(tmp_path.joinpath("h").glob("db*"))


def test_closing_the_backend_closes_the_databases_and_removes_their_live_directories(
    tmp_path: Path,
) -> None:
    src, counts, *_ = _graph([i % 30 for i in range(100)])
    job = _job(src, tmp_path / "ckpt", tmp_path / "s")
    job.run()
    assert counts.state[7] == 4  # readable after the run
    live = Path(counts.state.path)
    assert live.is_dir() and live.name.startswith("db-")
    job.state_backend.close()
    assert not list((tmp_path / "s").glob("*/*/db*"))
    with pytest.raises(RivermarkError, match="was closed .* read the state before closing"):
        counts.state[7]
    # the local checkpoint stays: the next run restores from it without a download
    src, counts, *_ = _graph([i % 30 for i in range(130)])
    job = _job(src, tmp_path / "ckpt", tmp_path / "s")
    job.run()
    assert job.state_backend.restores["counts"].local and counts.state[7] == 5


def test_the_docs_example_runs() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "checkpointing.md").read_text()
    section = doc.split("## Keyed state in RocksDB", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    exec(compile(code, "docs/checkpointing.md", "exec"), {})
