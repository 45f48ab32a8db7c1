"""What bounds the memory of RocksDB keyed state: freed checkpoints, the key cache, the options."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job
from rivermark.checkpoint.protocol import cycle
from rivermark.checkpoint.state.rocks.mapping import Frozen


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
    src = Stream.from_iterable(keys, name="keys")
    src.accumulate(count, start=KeyedState(), name="counts")
    job = Job(
        src,
        checkpoint=str(tmp_path / "ckpt"),
        every=None,
        every_batches=500,
        keep=2,
        state=state,
        state_dir=tmp_path / "state",
    )
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        job.run()
        alive = [o for o in gc.get_objects() if isinstance(o, (cycle._Pending, Frozen))]  # noqa: SLF001
    finally:
        if was:
            gc.enable()
        job.state_backend.close()
    assert len(job.checkpoints) >= 6
    assert alive == []
