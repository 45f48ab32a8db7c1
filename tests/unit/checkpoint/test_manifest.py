"""The manifest checks itself (checksum, schema, format) and every Store inherits the checks."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import rivermark
from rivermark.checkpoint import (
    CheckpointCorruptError,
    LocalDirectoryStore,
    Manifest,
    ManifestError,
    ManifestFormatError,
    Store,
)
from rivermark.checkpoint.stores.manifest import FORMAT_VERSION, sha256_of


def _manifest() -> Manifest:
    return Manifest(
        epoch=7,
        time=12.5,
        fingerprint={"sum": "Accumulate()"},
        positions={"src": {2: 10, 10: 4}},
        sinks={"out": {"path": "o.txt", "length": 99}},
        state={"sum": {"file": "state/sum.pkl", "size": 3, "sha256": sha256_of(b"abc")}},
    )


def _edit(edit: Any) -> str:
    d = json.loads(_manifest().to_json())
    edit(d)
    return json.dumps(d)


def test_round_trip_with_int_keys_keeps_the_checksum() -> None:
    text = _manifest().to_json()
    d = json.loads(text)
    assert d["format"] == FORMAT_VERSION == 4 and re.fullmatch(r"[0-9a-f]{64}", d["checksum"])
    m = Manifest.from_json(text)
    assert m.positions == {"src": {"2": 10, "10": 4}} and m.epoch == 7
    assert Manifest.from_json(m.to_json()).to_json() == text


def _set(path: tuple[str, ...], value: Any) -> Any:
    def edit(d: dict[str, Any]) -> None:
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value

    return edit


def _drop(path: tuple[str, ...]) -> Any:
    def edit(d: dict[str, Any]) -> None:
        for k in path[:-1]:
            d = d[k]
        del d[path[-1]]

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set(("epoch",), 8), "checksum mismatch"),
        (_set(("sinks", "out", "length"), 98), "checksum mismatch"),
        (_set(("positions", "src", "2"), 11), "checksum mismatch"),
        (_set(("fingerprint", "sum"), "Other()"), "checksum mismatch"),
        (_set(("checksum",), "0" * 64), "checksum mismatch"),
        (_drop(("checksum",)), "no 'checksum' field"),
        (_drop(("state",)), "no 'state' field"),
        (_drop(("sinks",)), "no 'sinks' field"),
        (_drop(("positions",)), "no 'positions' field"),
        (_drop(("state", "sum", "file")), "state entry 'sum' has no 'file'"),
        (_drop(("state", "sum", "sha256")), "state entry 'sum' has no 'sha256'"),
        (_set(("state", "sum", "size"), "3"), "'size' must be an integer >= 0, got '3'"),
        (_set(("state", "sum"), [1]), "state entry 'sum' must be an object"),
        (_set(("positions",), []), "'positions' must be an object, got list"),
        (_set(("epoch",), "7"), "'epoch' must be an integer >= 0, got '7'"),
        (_set(("time",), None), "'time' must be a number, got None"),
        (_set(("format",), "2"), "'format' must be an integer, got '2'"),
    ],
)
def test_edited_removed_or_retyped_fields_are_damage(edit: Any, message: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        Manifest.from_json(_edit(edit))


def test_unknown_format_is_refused_with_a_message() -> None:
    with pytest.raises(ManifestFormatError, match=re.escape("manifest format 6 is not one")):
        Manifest.from_json(_edit(_set(("format",), 6)))


@pytest.mark.parametrize(
    "text",
    # (the last two: nested deeper than Python's stack, which the parser would
    # otherwise report as a RecursionError)
    ["", "{", "[]", "null", '"x"', b"\xff\xfe", "[" * 100_000 + "]" * 100_000,
     '{"a":' * 100_000 + "1" + "}" * 100_000],
)  # fmt: skip
def test_not_a_manifest(text: str | bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_json(text)


def test_a_manifest_nested_too_deeply_is_a_damaged_checkpoint_and_recovery_falls_back(
    tmp_path: Path,
) -> None:
    from rivermark import Stream
    from rivermark.checkpoint import Job

    ckpt = tmp_path / "ck"

    def run(n: int) -> list[int]:
        src = Stream.from_iterable(range(n), name="src")
        got: list[int] = []
        src.accumulate(lambda a, b: a + b, start=0, name="total").sink(got.append)
        Job(src, checkpoint=str(ckpt)).run()
        return got

    run(3)
    run(6)
    store = LocalDirectoryStore(ckpt)
    newest = store.list_epochs()[-1]
    (ckpt / "checkpoints" / f"{newest:012d}" / "manifest.json").write_text("[" * 100_000)
    with pytest.raises(CheckpointCorruptError, match="nested too deeply"):
        store.verify(newest)
    # resumed from the first run's last checkpoint (after 0..2): 3..5 again
    assert run(6) == [6, 10, 15]


def test_format_1_without_checksum_is_read() -> None:
    d = json.loads(_manifest().to_json())
    del d["checksum"]
    d["format"] = 1
    assert Manifest.from_json(json.dumps(d)).epoch == 7
    d["epoch"] = "x"
    with pytest.raises(ManifestError, match="'epoch' must be an integer"):
        Manifest.from_json(json.dumps(d))


def _store_with_two(tmp_path: Path) -> LocalDirectoryStore:
    store = LocalDirectoryStore(tmp_path)
    for e in (1, 2):
        store.write_checkpoint(Manifest(e, 0.0, {}, positions={"s": e}), {"acc": b"v%d" % e})
    return store


def test_epoch_must_match_its_directory(tmp_path: Path) -> None:
    store = _store_with_two(tmp_path)
    # a valid manifest (checksum and all) copied into another checkpoint's directory
    older = store.epoch_dir(1) / "manifest.json"
    (store.epoch_dir(2) / "manifest.json").write_bytes(older.read_bytes())
    with pytest.raises(CheckpointCorruptError, match="the manifest says epoch 1.*epoch 2"):
        store.verify(2)
    assert store.verify(1).positions == {"s": 1}


def test_state_file_path_outside_the_checkpoint_is_damage(tmp_path: Path) -> None:
    store = _store_with_two(tmp_path)
    m = store.read_manifest(2)
    m.state["acc"]["file"] = "../000000000001/state/acc.pkl"
    (store.epoch_dir(2) / "manifest.json").write_text(m.to_json())
    with pytest.raises(CheckpointCorruptError, match="outside the checkpoint"):
        store.verify(2)


def test_missing_manifest_or_state_is_damage_not_a_crash(tmp_path: Path) -> None:
    store = _store_with_two(tmp_path)
    (store.epoch_dir(2) / "state" / "acc.pkl").unlink()
    with pytest.raises(CheckpointCorruptError, match="'state/acc.pkl' of 'acc' missing"):
        store.load_checkpoint(2)
    manifest, blobs = store.load_checkpoint(1)
    assert blobs == {"acc": b"v1"} and manifest.epoch == 1


def test_read_only_open_creates_nothing(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path / "none", create=False)
    assert store.list_epochs() == [] and store.list_incomplete() == []
    assert not (tmp_path / "none").exists()


def test_every_store_in_the_package_inherits_the_integrity_checks() -> None:
    for info in pkgutil.walk_packages(rivermark.__path__, "rivermark."):
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional dependency that is not installed
            continue

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    stores = [c for c in subclasses(Store) if c.__module__.startswith("rivermark.")]
    assert {c.__name__ for c in stores} >= {"LocalDirectoryStore", "DaskDatasetStore"}
    for cls in stores:
        for name in ("load_manifest", "load_checkpoint", "verify"):
            assert getattr(cls, name) is getattr(Store, name), (cls, name)


class _MemoryStore(Store):
    """A store with only the raw operations, as a new store would be written."""

    def __init__(self) -> None:
        self.manifests: dict[int, str] = {}
        self.blobs: dict[tuple[int, str], bytes] = {}
        self.offline = False

    def list_epochs(self) -> list[int]:
        return sorted(self.manifests)

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        for nid, blob in states.items():
            self.blobs[manifest.epoch, nid] = blob
            manifest.state[nid] = {"file": nid, "size": len(blob), "sha256": sha256_of(blob)}
        self.manifests[manifest.epoch] = manifest.to_json()

    def read_manifest(self, epoch: int) -> Manifest:
        if self.offline:
            raise rivermark.RivermarkError("store offline")
        return Manifest.from_json(self.manifests[epoch])

    def read_state(self, epoch: int, node_id: str) -> bytes:
        return self.blobs[epoch, node_id]

    def delete(self, epoch: int) -> None:
        del self.manifests[epoch]

    def lock(self) -> None:
        pass

    def unlock(self) -> None:
        pass


def test_a_new_store_gets_every_check() -> None:
    store = _MemoryStore()
    for e in (1, 2):
        store.write_checkpoint(Manifest(e, 0.0, {}), {"acc": b"x" * e})
    assert store.load_checkpoint(2)[1] == {"acc": b"xx"}
    store.manifests[2] = store.manifests[1]
    with pytest.raises(CheckpointCorruptError, match="says epoch 1"):
        store.verify(2)
    store.manifests[2] = store.manifests[2].replace('"format": 4', '"format": 7')
    with pytest.raises(ManifestFormatError, match="checkpoint 2 in .*format 7"):
        store.verify(2)
    store.blobs[1, "acc"] = b"y"
    with pytest.raises(CheckpointCorruptError, match="checksum mismatch"):
        store.verify(1)
    del store.blobs[1, "acc"]
    with pytest.raises(CheckpointCorruptError, match="missing or unreadable"):
        store.verify(1)
    del store.manifests[1]
    with pytest.raises(CheckpointCorruptError, match="manifest unreadable"):
        store.verify(1)
    # a store that cannot be reached is not a damaged checkpoint
    store.offline = True
    with pytest.raises(rivermark.RivermarkError, match="store offline") as info:
        store.verify(2)
    assert not isinstance(info.value, CheckpointCorruptError)


def test_the_run_that_wrote_it_is_covered_by_the_checksum_and_checked() -> None:
    m = _manifest()
    m.run = {"started": 11.0, "resumed_from": 6}
    text = m.to_json()
    assert Manifest.from_json(text).run == {"started": 11.0, "resumed_from": 6}
    assert Manifest.from_json(_manifest().to_json()).run is None  # optional
    edited = json.loads(text)
    edited["run"]["resumed_from"] = 5
    with pytest.raises(ManifestError, match="checksum mismatch"):
        Manifest.from_json(json.dumps(edited))


def _rechecked(d: dict[str, Any]) -> str:
    """``d`` as a manifest whose checksum matches its (edited) content."""
    body = {k: v for k, v in d.items() if k != "checksum"}
    d["checksum"] = sha256_of(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    return json.dumps(d)


def test_timing_is_taken_when_the_manifest_is_written_and_checked() -> None:
    m = _manifest()
    calls = []
    m.timer = lambda: calls.append(1) or {"duration": 0.25, "pause": 0.0312345678}
    text = m.to_json()
    assert calls == [1]  # asked once, at serialisation
    assert Manifest.from_json(text).timing == {"duration": 0.25, "pause": 0.031235}
    assert Manifest.from_json(_manifest().to_json()).timing is None  # optional
    edited = json.loads(text)
    edited["timing"]["duration"] = 9.0
    with pytest.raises(ManifestError, match="checksum mismatch"):
        Manifest.from_json(json.dumps(edited))


def test_counts_are_covered_by_the_checksum_and_checked() -> None:
    m = _manifest()
    m.counts = {"src": [10, 10], "acc": [10, 9]}
    text = m.to_json()
    assert Manifest.from_json(text).counts == {"src": [10, 10], "acc": [10, 9]}
    assert Manifest.from_json(_manifest().to_json()).counts is None
    # errors raised, skipped, handled and late records after in and out
    m.counts = {"src": [10, 10, 0, 0, 0, 0], "acc": [10, 7, 1, 1, 1, 4]}
    assert Manifest.from_json(m.to_json()).counts == m.counts


#: an optional field of a manifest given a value of the wrong shape (its checksum
#: matching), and the words of the refusal
MALFORMED = [
    ("run", {"started": 11.0}, "'run' must be"),
    ("run", {"started": "x", "resumed_from": None}, "'run' must be"),
    ("run", {"started": 1.0, "resumed_from": 7}, "'run' must be"),
    ("run", [1], "'run' must be"),
    ("timing", {"duration": 1.0}, "'timing' must be"),
    ("timing", {"duration": -1.0, "pause": 0.0}, "'timing' must be"),
    ("timing", {"duration": "1", "pause": 0}, "'timing' must be"),
    ("counts", {"src": [1]}, "'counts' must map"),
    ("counts", {"src": [1, 2, 3]}, "'counts' must map"),
    ("counts", {"src": [1, -2]}, "'counts' must map"),
    ("counts", {"src": [1.5, 2]}, "'counts' must map"),
    ("counts", {"src": "12"}, "'counts' must map"),
    ("counts", [1, 2], "'counts' must map"),
]


@pytest.mark.parametrize("field, bad, words", MALFORMED)
def test_an_optional_field_of_the_wrong_shape_is_refused(field: str, bad: Any, words: str) -> None:
    d = json.loads(_manifest().to_json())
    d[field] = bad
    with pytest.raises(ManifestError, match=re.escape(words)):
        Manifest.from_json(_rechecked(d))
