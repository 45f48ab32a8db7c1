"""The checkpoint history (``rivermark ui DIR``): one row per checkpoint, each manifest read once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rivermark import Job, Stream
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.store import LocalDirectoryStore
from rivermark.checkpoint.tools.inspection import (
    checkpoint_history,
    list_checkpoints,
    show_checkpoint,
)


class CountingStore(LocalDirectoryStore):
    """A real directory store that counts the manifests it reads, per epoch."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, create=False)
        self.reads: Counter[int] = Counter()

    def read_manifest(self, epoch: int) -> Manifest:
        self.reads[epoch] += 1
        return super().read_manifest(epoch)


def test_the_history_reads_each_manifest_once_and_keeps_a_damaged_row(tmp_path: Path) -> None:
    for part in ([1, 2, 3], [1, 2, 3, 4, 5]):
        source = Stream.from_iterable(part, name="numbers")
        source.accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
        Job(source, checkpoint=tmp_path, every=None).run()
    store = CountingStore(tmp_path)
    epochs = store.list_epochs()
    assert len(epochs) >= 3
    damaged = epochs[0]
    (store.epoch_dir(damaged) / "manifest.json").write_text("{not json")

    rows = checkpoint_history(store)

    assert [r["epoch"] for r in rows] == epochs
    assert store.reads == Counter(epochs)
    assert rows[0]["error"] and "positions" not in rows[0]
    newest = rows[-1]
    assert newest["error"] is None and newest["state"]["sum"] > 0
    shown = show_checkpoint(store, epochs[-1])
    # the same words as 'rivermark checkpoints show', and the rows of 'list'
    assert newest["positions"] == {
        sid: " / ".join(p["meaning"]) for sid, p in shown["positions"].items()
    }
    listed = {r["epoch"]: r for r in list_checkpoints(store)}
    assert all(
        {k: v for k, v in row.items() if k not in ("positions", "state")} == listed[row["epoch"]]
        for row in rows
    )
