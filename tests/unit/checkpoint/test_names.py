"""User-given names as file names: nothing a node id holds leaves the store or the state directory."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore, open_store
from rivermark.checkpoint.errors import CheckpointCorruptError
from rivermark.checkpoint.stores.manifest import Manifest, sha256_of
from rivermark.checkpoint.stores.names import MAX_LEN, checked_relative, file_name, name_of
from rivermark.checkpoint.stores.objectstore import ObjectStore

#: names a user can give a node that are no plain file name
HOSTILE = [
    "../../../x",
    "clicks/per-minute",
    "n" * 300,
    "é" * 200,  # 2 bytes each, 6 characters encoded
    "..",
    ".hidden",
    "a\\b",
    "100%",
    "tab\there",
]


def add(acc: int, x: int) -> int:
    return acc + x


def count(acc: KeyedState, w: Any) -> KeyedState:
    acc[w] = acc.get(w, 0) + 1
    return acc


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_file_name_is_one_safe_component_reversible_and_injective() -> None:
    rng = random.Random(7)
    alphabet = "ab./%~\\:-_é\x00 " + chr(0x1F600)
    names = set(HOSTILE) | {"counts", "map-1:parse", "%2F", "%", "~", "a~b"}
    names |= {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(3000)}
    names |= {"x" * n for n in (MAX_LEN - 1, MAX_LEN, MAX_LEN + 1, 1000)}
    seen: dict[str, str] = {}
    for name in names:
        enc = file_name(name)
        assert enc not in seen, (name, seen.get(enc))
        seen[enc] = name
        assert re.fullmatch(r"[A-Za-z0-9_%-][A-Za-z0-9_.%~-]*", enc), enc
        assert len(enc.encode()) <= MAX_LEN
        if "~" in enc:
            assert len(name) > 40 and name_of(enc) is None  # found through the manifest
        else:
            assert name_of(enc) == name
    # plain names are their own file names, as they were before the encoding
    assert file_name("counts") == "counts" and file_name("words-1.v2") == "words-1.v2"


@pytest.mark.parametrize("kind", ["directory", "object"])
@pytest.mark.parametrize("name", HOSTILE)
def test_a_node_named_anything_checkpoints_inside_the_store_and_resumes(
    tmp_path: Path, kind: str, name: str
) -> None:
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    location = str(work / "ckpt") if kind == "directory" else f"file://{work}/ckpt"
    before = _files(tmp_path)
    outs: list[list[int]] = []
    for items in ([1, 2, 3], [1, 2, 3, 4, 5]):
        src = Stream.from_iterable(items, name="src")
        out: list[int] = []
        src.accumulate(add, start=0, name=name).sink(out.append)
        Job(src, checkpoint=location, every=None).run()
        outs.append(out)
    assert outs == [[1, 3, 6], [10, 15]]  # the second run resumed from the first's state
    new = _files(tmp_path) - before
    assert new and all(p.is_relative_to(work / "ckpt") for p in new), sorted(map(str, new))
    store = open_store(location)
    epoch = store.list_epochs()[-1]
    entry = store.read_manifest(epoch).state[name]
    assert entry["file"].count("/") == 1  # state/<one component>
    assert store.verify(epoch).state[name] == entry


def test_a_rocksdb_node_named_anything_keeps_its_state_in_one_directory(tmp_path: Path) -> None:
    sd = tmp_path / "state"
    names = ["../../../x", "clicks/per-minute", "k" * 300]
    for rnd in (1, 2):
        src = Stream.from_iterable(["a", "b", "a"] * rnd, name="words")
        nodes = [src.accumulate(count, start=KeyedState(), name=n) for n in names]
        job = Job(src, checkpoint=str(tmp_path / "ckpt"), every=None, state="rocksdb", state_dir=sd)
        job.run()
        for n in nodes:
            assert dict(n.state) == {"a": 2 * rnd, "b": rnd}
        if rnd == 2:
            assert all(job.state_backend.restores[n].local for n in names)
        job.state_backend.close()
    outside = [p for p in _files(tmp_path) if not p.is_relative_to(sd)]
    assert all(p.is_relative_to(tmp_path / "ckpt") for p in outside)
    assert sorted(p.name for p in sd.iterdir() if p.is_dir()) == sorted(map(file_name, names))


def _as_old_code_wrote(store_root: Path, objects: bool, nid: str) -> None:
    """Rename every state file of ``nid`` to the name the earlier code gave it.

    The earlier code wrote ``state/<node id>.pkl`` (a directory) and
    ``state/<node id>.<writer>.pkl`` (an object store) with the id as it is,
    and recorded that name in the manifest; nothing else differed.
    """
    for manifest_path in sorted(store_root.glob("checkpoints/*/manifest.json")):
        d = manifest_path.parent
        m = Manifest.from_json(manifest_path.read_bytes())
        entry = m.state[nid]
        new = entry["file"]
        writer = new.rsplit(".", 2)[-2] if objects else None
        old = f"state/{nid}.{writer}.pkl" if objects else f"state/{nid}.pkl"
        assert new != old
        (d / old).parent.mkdir(parents=True, exist_ok=True)
        os.rename(d / new, d / old)
        entry["file"] = old
        manifest_path.write_text(m.to_json())


@pytest.mark.parametrize(
    ("kind", "nid"),
    [("directory", "accumulate-1:add"), ("object", "clicks/per-minute"), ("object", "a b:c")],
)
def test_checkpoints_of_the_earlier_layout_still_restore(
    tmp_path: Path, kind: str, nid: str
) -> None:
    root = tmp_path / "ckpt"
    location = str(root) if kind == "directory" else f"file://{root}"

    def run(items: list[int]) -> list[int]:
        src = Stream.from_iterable(items, name="src")
        out: list[int] = []
        src.accumulate(add, start=0, name=nid).sink(out.append)
        Job(src, checkpoint=location, every=None).run()
        return out

    assert run([1, 2, 3]) == [1, 3, 6]
    _as_old_code_wrote(root, kind == "object", nid)
    store = open_store(location)
    assert all(
        not store.read_manifest(e).state[nid]["file"].startswith(f"state/{file_name(nid)}")
        for e in store.list_epochs()
    )
    assert store.verify(store.list_epochs()[-1])
    assert run([1, 2, 3, 4]) == [10]  # resumed from the old file's state
    # the next checkpoints are in the new layout; retention removes the old ones
    newest = open_store(location).read_manifest(open_store(location).list_epochs()[-1])
    assert newest.state[nid]["file"].startswith(f"state/{file_name(nid)}.")


@pytest.mark.parametrize("kind", ["directory", "object"])
@pytest.mark.parametrize("file", ["../../../outside.pkl", "/etc/outside.pkl", "state//x.pkl"])
def test_a_manifest_naming_a_state_file_outside_the_checkpoint_is_refused(
    tmp_path: Path, kind: str, file: str
) -> None:
    root = tmp_path / "store" / "deep"
    store = LocalDirectoryStore(root) if kind == "directory" else ObjectStore(f"file://{root}")
    store.write_checkpoint(Manifest(1, 0.0, {"n": "A()"}), {"n": b"state"})
    secret = b"someone else's file"
    target = tmp_path / "outside.pkl"
    target.write_bytes(secret)
    d = root / "checkpoints" / "000000000001"
    m = Manifest.from_json((d / "manifest.json").read_bytes())
    m.state["n"] = {"file": file, "size": len(secret), "sha256": sha256_of(secret)}
    (d / "manifest.json").write_text(m.to_json())
    with pytest.raises(
        CheckpointCorruptError, match=re.escape(f"is {file!r}, outside the checkpoint")
    ):
        store.load_checkpoint(1)


def test_checked_relative_keeps_paths_inside() -> None:
    assert checked_relative("n", "state/a/b.pkl") == "state/a/b.pkl"
    for bad in ("..", "state/../../x", "/x", "state/./x", "a\0b"):
        with pytest.raises(CheckpointCorruptError):
            checked_relative("n", bad)


def test_the_hash_of_a_long_name_is_of_the_whole_name() -> None:
    a, b = "p" * 200 + "1", "p" * 200 + "2"
    assert file_name(a) != file_name(b)
    assert file_name(a).endswith(hashlib.sha256(a.encode()).hexdigest()[:32])
    assert json.dumps(file_name(a)).strip('"') == file_name(a)
