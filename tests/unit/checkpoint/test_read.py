"""``rivermark.checkpoint.read``: a checkpoint's state and positions as Python objects."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    Job,
    LocalDirectoryStore,
    read,
)

from .conftest import total


def _graph(values: list[int]) -> Stream:
    source = Stream.from_iterable(values, name="numbers")
    source.accumulate(total, start=0, name="sum").sink_to_list(name="sums")
    source.map(lambda x: x % 5).unique(name="firsts").sink_to_list(name="firsts-out")
    source.map(lambda x: x % 3).frequencies(name="freq").sink_to_list(name="freq-out")
    return source


def test_read_resolves_delta_chains_and_gives_positions(tmp_path: Path) -> None:
    values = list(range(40))
    # several checkpoints: the keyed nodes' newest state is a delta on a base
    Job(_graph(values), checkpoint=tmp_path, every_batches=4).run()
    store = LocalDirectoryStore(tmp_path)
    newest = store.load_manifest(store.list_epochs()[-1])
    assert newest.chains["freq"]["parent"] is not None
    got = read(tmp_path)
    assert got.epoch == newest.epoch
    assert got.positions == {"numbers": len(values)}
    assert got.state["sum"] == {"state": sum(values)}
    assert sorted(got.state["firsts"]["seen"]) == [0, 1, 2, 3, 4]
    assert got.state["freq"] == {"counts": dict(Counter(v % 3 for v in values))}
    # an older epoch, by number
    first = read(tmp_path, epoch=store.list_epochs()[0])
    assert first.state["sum"]["state"] < sum(values)


def test_read_state_restores_a_fresh_node(tmp_path: Path) -> None:
    Job(_graph(list(range(12))), checkpoint=tmp_path, every=None).run()
    got = read(tmp_path)
    s = Stream()
    freq = s.frequencies()
    freq.set_state(got.state["freq"])
    out = freq.sink_to_list()
    s.emit(0)
    assert out == [{0: 5, 1: 4, 2: 4}]


def test_read_skips_a_damaged_newest_checkpoint(tmp_path: Path) -> None:
    Job(_graph(list(range(10))), checkpoint=tmp_path, every_batches=5).run()
    store = LocalDirectoryStore(tmp_path)
    epochs = store.list_epochs()
    (manifest,) = (tmp_path / "checkpoints").glob(f"*{epochs[-1]}/manifest.json")
    # an edited position: the manifest's checksum no longer matches
    text = manifest.read_text()
    manifest.write_text(text.replace('"numbers": 10', '"numbers": 9'))
    assert manifest.read_text() != text
    assert read(tmp_path).epoch == epochs[-2]
    with pytest.raises(CheckpointCorruptError):
        read(tmp_path, epoch=epochs[-1])


def test_read_names_a_missing_checkpoint(tmp_path: Path) -> None:
    Job(_graph([1]), checkpoint=tmp_path, every=None).run()
    with pytest.raises(CheckpointNotFoundError, match="has no checkpoint 99"):
        read(tmp_path, epoch=99)
