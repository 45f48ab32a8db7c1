"""Reading RocksDB state without a job: its files checked, opened read-only, then removed."""

from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore, read
from rivermark.checkpoint.errors import CheckpointCorruptError, UntrustedStateError
from rivermark.checkpoint.state.rocks.reading import read_rocks_state


def count(acc: KeyedState, w: Any) -> KeyedState:
    acc[w] = acc.get(w, 0) + 1
    return acc


class Opaque:
    """A value only pickle can write."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.n == self.n


def _keep(acc: KeyedState, x: int) -> KeyedState:
    acc[x] = Opaque(x)
    return acc


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory the reader works in (empty when it is done)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _run(tmp_path: Path, items: list[Any], fn: Any = count, **kw: Any) -> Path:
    ckpt = tmp_path / "ckpt"
    src = Stream.from_iterable(items, name="words")
    src.accumulate(fn, start=KeyedState(), name="counts")
    job = Job(src, checkpoint=ckpt, every=None, state="rocksdb", state_dir=tmp_path / "state", **kw)
    job.run()
    job.state_backend.close()
    return ckpt


def _sst(ckpt: Path) -> tuple[LocalDirectoryStore, Any, str, dict[str, Any]]:
    store = LocalDirectoryStore(ckpt)
    m = store.load_manifest(store.list_epochs()[-1])
    name, info = next((n, i) for n, i in m.files["counts"]["state"].items() if n.endswith(".sst"))
    return store, m, name, info


def test_the_keys_are_read_and_the_temporary_directory_is_removed(
    tmp_path: Path, private_tmp: Path
) -> None:
    words = [f"w{i % 500}" for i in range(3000)]
    ckpt = _run(tmp_path, words)
    got = read(ckpt, as_pandas=False).state["counts"]
    assert got == {"state": {f"w{i}": 6 for i in range(500)}}
    assert list(private_tmp.iterdir()) == []


def test_a_damaged_sst_file_is_refused_naming_it(tmp_path: Path, private_tmp: Path) -> None:
    ckpt = _run(tmp_path, [f"w{i % 50}" for i in range(200)])
    store, m, name, info = _sst(ckpt)
    path = ckpt / "shared" / info["sha256"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size: only its sha256 tells
    path.chmod(0o600)
    path.write_bytes(bytes(data))
    message = (
        f"{store.describe(m.epoch)}: file {name!r} of the RocksDB state 'state' of "
        f"'counts' ({info['sha256'][:16]}) does not match its sha256 in the manifest"
    )
    with pytest.raises(CheckpointCorruptError, match=re.escape(message)):
        read(ckpt)
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/escaped", ".hidden", "a/b"])
def test_a_file_name_that_is_not_one_plain_name_is_refused_before_anything_is_written(
    tmp_path: Path, private_tmp: Path, name: str
) -> None:
    # the manifest's own check refuses such names; the reader does not rely on it
    ckpt = _run(tmp_path, ["a", "b", "a"])
    store, m, sst, info = _sst(ckpt)
    files = {n: i for n, i in m.files["counts"]["state"].items() if n != sst}
    forged = dataclasses.replace(m, files={"counts": {"state": {name: info, **files}}})
    blob = store.read_state(m.epoch, "counts")
    with pytest.raises(CheckpointCorruptError, match=re.escape(f"names a file {name!r}")):
        read_rocks_state(store, forged, "counts", blob)
    assert list(private_tmp.iterdir()) == []
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped").exists()


def test_pickled_values_are_loaded_only_from_a_trusted_store(
    tmp_path: Path, private_tmp: Path
) -> None:
    ckpt = _run(tmp_path, [1, 2], fn=_keep)
    with pytest.raises(UntrustedStateError, match="unpickling runs code"):
        read(ckpt, as_pandas=False)
    got = read(ckpt, as_pandas=False, trust_store=True).state["counts"]
    assert got == {"state": {1: Opaque(1), 2: Opaque(2)}}
    assert list(private_tmp.iterdir()) == []


def test_show_lists_each_mapping_with_its_files_and_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rivermark.cli import main

    ckpt = _run(tmp_path, [f"w{i % 50}" for i in range(200)])
    store, m, _, _ = _sst(ckpt)
    files = m.files["counts"]["state"]
    assert main(["checkpoints", "show", str(ckpt)]) == 0
    out = capsys.readouterr().out
    total = sum(i["size"] for i in files.values())
    assert f"    'state' in RocksDB: {len(files)} files, {total:,} bytes\n" in out, out
