"""``rivermark.checkpoint.read``: a checkpoint's state and positions as Python objects."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    Job,
    LocalDirectoryStore,
    read,
)
from rivermark.checkpoint.tools.frames import keyed_dict, keyed_frame

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
    assert sorted(got.state["firsts"]["seen"].index) == [0, 1, 2, 3, 4]  # keys of a set
    counts = dict(Counter(v % 3 for v in values))
    # keyed state of scalars as a Series indexed by key; as a dict without pandas
    assert got.state["freq"]["counts"].to_dict() == counts
    assert got.state["freq"]["counts"].dtype == "int64"
    assert read(tmp_path, as_pandas=False).state["freq"] == {"counts": counts}
    # an older epoch, by number
    first = read(tmp_path, epoch=store.list_epochs()[0])
    assert first.state["sum"]["state"] < sum(values)


def test_read_state_restores_a_fresh_node(tmp_path: Path) -> None:
    Job(_graph(list(range(12))), checkpoint=tmp_path, every=None).run()
    got = read(tmp_path, as_pandas=False)
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


@pytest.mark.parametrize(
    "values, kind, dtype",
    [
        ({"a": 1, "b": 2}, "Series", "int64"),
        ({"a": 1.5, "b": float("nan")}, "Series", "float64"),
        ({"a": True, "b": False}, "Series", "bool"),
        # ints and floats would come back as floats: the objects themselves
        ({"a": 1, "b": 2.5, "c": None}, "Series", "object"),
        ({("x", 1): 1, ("y", 2): 3}, "Series", "int64"),
        ({}, "Series", "object"),
        ({"a": {"n": 1, "s": "x"}, "b": {"n": 2, "s": "y"}}, "DataFrame", None),
        ({"a": {"n": 1}, "b": {"n": 2.5}}, "DataFrame", None),
    ],
)
def test_keyed_state_as_pandas_gives_back_exactly_what_it_was(
    values: dict[Any, Any], kind: str, dtype: str | None
) -> None:
    form = keyed_frame(values)
    assert type(form).__name__ == kind
    if dtype is not None:
        assert form.dtype == dtype
    back = keyed_dict(form)
    assert list(back.items()) == list(values.items()) or (  # NaN != NaN
        str(back) == str(values)
    )
    assert [type(v) for v in back.values()] == [type(v) for v in values.values()]


@pytest.mark.parametrize(
    "values",
    [
        {"a": (1, 2)},
        {"a": [1]},
        {"a": {"n": 1}, "b": {"m": 2}},
        {"a": {1: 2}},
        {"a": 1, "b": "x", "c": (1,)},
    ],
    ids=["tuples", "lists", "records-of-other-keys", "non-string-fields", "a-tuple-among-scalars"],
)
def test_keyed_state_that_is_neither_scalars_nor_records_stays_a_dict(
    values: dict[Any, Any],
) -> None:
    assert keyed_frame(values) is values
