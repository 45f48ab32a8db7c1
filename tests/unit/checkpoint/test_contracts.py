"""What a job reads from sinks and stores it did not write: declared protocols, no probes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rivermark import Job, Stream
from rivermark.checkpoint import CheckpointWriteError
from rivermark.checkpoint.protocol.options import derive_job_id
from rivermark.checkpoint.state.views import unpicklable_part
from rivermark.checkpoint.stores.store import LocalDirectoryStore
from rivermark.core.refs import Metadata
from rivermark.sinks.base import CheckpointedSink, ClosingSink


class ListSink(Stream):
    """A checkpointed sink of our own: keeps records per epoch and counts its closes."""

    def __init__(self, upstream: Stream, **kwargs: Any) -> None:
        super().__init__(upstream, **kwargs)
        self.written: list[Any] = []
        self.closed = 0

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        self.written.append(x)

    def pre_commit(self, epoch: int) -> int:
        return len(self.written)

    def commit(self, epoch: int, handle: Any) -> None:
        pass

    def restore(self, handle: Any) -> None:
        del self.written[handle or 0 :]

    def close(self) -> None:
        self.closed += 1


def test_the_job_closes_a_sink_that_declares_close(tmp_path: Path) -> None:
    source = Stream.from_iterable([1, 2, 3], name="numbers")
    sink = ListSink(source.map(lambda x: x * 2))
    assert isinstance(sink, CheckpointedSink) and isinstance(sink, ClosingSink)
    Job(source, checkpoint=tmp_path / "ckpt", every=None).run()
    assert sink.written == [2, 4, 6]
    assert sink.closed >= 1


def test_a_failed_checkpoint_closes_the_sinks_and_names_the_unpicklable_part(
    tmp_path: Path,
) -> None:
    source = Stream.from_iterable([1, 2, 3], name="numbers")
    held = source.accumulate(
        lambda acc, x: {**acc, "gen": (i for i in range(x))}, start={}, name="held"
    )
    sink = ListSink(held)
    with pytest.raises(
        CheckpointWriteError, match=re.escape("state['state']['gen'] is a builtins.generator")
    ):
        Job(source, checkpoint=tmp_path / "ckpt", every=None).run()
    assert sink.closed >= 1


def test_the_unpicklable_part_is_found_inside_objects() -> None:
    class Holder:
        def __init__(self) -> None:
            self.fine = [1, 2]
            self.bad = {"gen": (i for i in range(2))}

    where, bad = unpicklable_part({"holder": Holder()})
    assert where == "state['holder'].bad['gen']" and type(bad).__name__ == "generator"


def test_the_job_id_derives_from_the_store_s_declared_directory(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path / "events")
    assert store.path == tmp_path / "events"
    assert re.fullmatch(r"events-[0-9a-f]{10}", derive_job_id(store))
    # the same directory named another way is the same job
    assert derive_job_id(LocalDirectoryStore(tmp_path / "x" / ".." / "events")) == (
        derive_job_id(store)
    )
