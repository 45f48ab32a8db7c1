"""How a job starts: no valid checkpoint is a refusal; starting over is explicit."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rivermark import RivermarkError, Stream
from rivermark.checkpoint import (
    Job,
    LocalDirectoryStore,
    NoValidCheckpointError,
    UnaccountedOutputError,
)
from rivermark.errors import ConfigurationError

N = 300
EXPECTED = "".join(f"{sum(range(i + 1))}\n" for i in range(N))


def _graph(out: Path, mode: str = "a") -> Stream:
    source = Stream.from_iterable(list(range(N)), name="numbers")
    source.accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_textfile(out, mode=mode)
    return source


def _run(ckpt: Path, out: Path, **kwargs: Any) -> Job:
    job = Job(_graph(out, kwargs.pop("mode", "a")), checkpoint=ckpt, every=None, **kwargs)
    job.run()
    return job


def _damage_all(ckpt: Path) -> list[int]:
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    for e in epochs:
        (store.epoch_dir(e) / "manifest.json").write_text("{not json")
    return epochs


def test_no_checkpoint_verifies_refuses_and_changes_nothing(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    _run(ckpt, out)
    epochs = _damage_all(ckpt)
    assert len(epochs) == 2
    before = out.read_bytes()
    with pytest.raises(NoValidCheckpointError) as info:
        _run(ckpt, out)
    msg = str(info.value)
    assert isinstance(info.value, RivermarkError)
    assert set(info.value.damaged) == set(epochs)
    for e in epochs:
        assert f"{e:012d}" in msg
    assert "not valid JSON" in msg and "--from-scratch" in msg and "good copy" in msg
    assert out.read_bytes() == before
    assert LocalDirectoryStore(ckpt).list_epochs() == epochs  # nothing moved or deleted


def test_from_scratch_sets_aside_and_starts_sinks_over(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    _run(ckpt, out)
    epochs = _damage_all(ckpt)
    job = _run(ckpt, out, from_scratch=True)
    assert job.restored_epoch is None
    assert out.read_text() == EXPECTED  # emptied, then written once
    aside = list(ckpt.glob("set-aside-*"))
    assert len(aside) == 1
    assert sorted(p.name for p in aside[0].iterdir()) == [f"{e:012d}" for e in epochs]
    store = LocalDirectoryStore(ckpt)
    # new epochs continue after the set-aside ones, and they verify
    assert min(store.list_epochs()) > max(epochs)
    for e in store.list_epochs():
        store.verify(e)
    # and the next run resumes normally from them
    newest = store.list_epochs()[-1]
    assert _run(ckpt, out).restored_epoch == newest
    assert out.read_text() == EXPECTED


def test_damaged_newest_still_falls_back(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    _run(ckpt, out)
    store = LocalDirectoryStore(ckpt)
    first, newest = store.list_epochs()
    (store.epoch_dir(newest) / "manifest.json").write_text("[]")
    assert _run(ckpt, out).restored_epoch == first
    assert out.read_text() == EXPECTED


def test_output_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    out.write_text("earlier run\n")
    with pytest.raises(UnaccountedOutputError) as info:
        _run(ckpt, out)
    assert f"{str(out)!r} already holds 12 bytes" in str(info.value)
    assert "--from-scratch" in str(info.value)
    assert out.read_text() == "earlier run\n"
    assert LocalDirectoryStore(ckpt).list_epochs() == []
    _run(ckpt, out, from_scratch=True)
    assert out.read_text() == EXPECTED


def test_output_without_a_checkpoint_is_fine_for_mode_w_and_empty_files(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    _run(tmp_path / "c1", out, mode="w")
    assert out.read_text() == EXPECTED
    out.write_text("")
    _run(tmp_path / "c2", out)
    assert out.read_text() == EXPECTED


class _PlainCheckpointedSink(Stream):
    """Implements the checkpoint contract but not start_over()."""

    def pre_commit(self, epoch: int) -> Any:
        return None

    def commit(self, epoch: int, handle: Any) -> None:
        pass

    def restore(self, handle: Any) -> None:
        pass


def test_from_scratch_refuses_a_sink_that_cannot_start_over(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    _run(ckpt, out)
    epochs = _damage_all(ckpt)
    source = Stream.from_iterable([1], name="numbers")
    _PlainCheckpointedSink(source, name="plain")
    with pytest.raises(ConfigurationError, match=re.escape("cannot start its output over")):
        Job(source, checkpoint=ckpt, every=None, from_scratch=True).run()
    assert LocalDirectoryStore(ckpt).list_epochs() == epochs


def test_a_changed_graph_names_from_scratch_which_then_works(tmp_path: Path) -> None:
    from rivermark.checkpoint import CheckpointMismatchError

    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    _run(ckpt, out)

    def changed() -> Stream:
        source = Stream.from_iterable(list(range(N)), name="numbers")
        source.accumulate(lambda a, x: a + x, start=0, name="total").sink_to_textfile(out)
        return source

    with pytest.raises(CheckpointMismatchError, match=re.escape("run with --from-scratch")):
        Job(changed(), checkpoint=ckpt, every=None).run()
    Job(changed(), checkpoint=ckpt, every=None, from_scratch=True).run()
    assert out.read_text() == EXPECTED
