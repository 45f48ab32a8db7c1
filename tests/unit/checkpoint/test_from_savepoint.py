"""Starting a job from a savepoint: into its own location, into an empty one, refusals."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.protocol.recovery import parse_savepoint_spec
from rivermark.errors import ConfigurationError
from rivermark.testing import run_in_thread, wait_for

from .counting import count, records, reference


class Running:
    """A job fed by ``emit`` running in a thread."""

    def __init__(self, out: Path, **job: object) -> None:
        self.root = Stream(name="manual")
        self.acc = self.root.accumulate(count, start=KeyedState(), name="counts")
        self.acc.map(len).sink_to_textfile(str(out))
        self.job = Job(self.root, every=None, **job)  # type: ignore[arg-type]
        self.thread, self.raised = run_in_thread(self.job)
        wait_for(lambda: self.job.running or not self.thread.is_alive(), timeout=60)

    def feed(self, recs: list[int]) -> None:
        for x in recs:
            self.root.emit(x)

    def stop(self, savepoint: bool = False) -> None:
        self.job.stop(savepoint=savepoint)
        self.thread.join(60)
        assert not self.thread.is_alive() and self.raised == [] and self.job.ended_by is None


def refused(out: Path, match: str, **job: object) -> None:
    root = Stream(name="manual")
    root.accumulate(count, start=KeyedState(), name="counts").map(len).sink_to_textfile(str(out))
    with pytest.raises(ConfigurationError, match=match) as info:
        Job(root, every=None, **job).run()  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_the_spec_names_a_location_and_an_epoch() -> None:
    assert parse_savepoint_spec("a/b") == ("a/b", None)
    assert parse_savepoint_spec("a/b@12") == ("a/b", 12)
    assert parse_savepoint_spec("s3://bucket/p@3") == ("s3://bucket/p", 3)
    assert parse_savepoint_spec("a/checkpoints/000000000004") == ("a", 4)
    with pytest.raises(ConfigurationError, match="after '@' must be an epoch"):
        parse_savepoint_spec("a/b@latest")


def test_into_an_empty_location_the_savepoint_is_copied_and_the_output_is_exact(
    tmp_path: Path,
) -> None:
    out, first, second = tmp_path / "out.txt", tmp_path / "one", tmp_path / "two"
    part1, part2 = records(3000), records(2000, 3000)
    r = Running(out, checkpoint=first)
    r.feed(part1)
    r.stop(savepoint=True)
    sp = r.job.last_savepoint
    assert sp is not None
    before = LocalDirectoryStore(first).list_epochs()
    r = Running(out, checkpoint=second, from_savepoint=str(first))
    assert r.job.restored_epoch == sp
    copied = LocalDirectoryStore(second)
    assert copied.list_epochs() == [sp]
    m = copied.verify(sp)
    assert m.savepoint and m.positions == LocalDirectoryStore(first).read_manifest(sp).positions
    r.feed(part2)
    r.stop()
    state, text = reference(part1 + part2)
    assert out.read_text() == text and dict(r.acc.state) == state
    # the source location is untouched
    assert LocalDirectoryStore(first).list_epochs() == before
    # the new location's later checkpoints (deltas on the copy) resume as any
    last = copied.list_epochs()[-1]
    assert last > sp and copied.read_manifest(last).chains["counts"]["base"] == sp
    r = Running(out, checkpoint=second)
    assert r.job.restored_epoch == last and dict(r.acc.state) == state
    r.stop()
    # the same command again (a restart under a supervisor): it goes on from the
    # newest checkpoint of the new location, not from the savepoint again
    newest = copied.list_epochs()[-1]
    r = Running(out, checkpoint=second, from_savepoint=str(first))
    assert r.job.restored_epoch == newest and dict(r.acc.state) == state
    r.stop()
    assert out.read_text() == text


def test_in_its_own_location_newer_checkpoints_are_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    part1, later, part2 = records(2000), records(700, 2000), records(1500, 2000)
    r = Running(out, checkpoint=ckpt)
    r.feed(part1)
    sp = r.job.savepoint()
    r.feed(later)
    newer = [r.job.checkpoint()]
    r.stop()
    newer.append(r.job.epoch)
    store = LocalDirectoryStore(ckpt)
    assert store.list_epochs()[-3:] == [sp, *newer]
    with caplog.at_level(logging.INFO, logger="rivermark"):
        r = Running(out, checkpoint=ckpt, from_savepoint=f"{ckpt}@{sp}")
    lines = [x.getMessage() for x in caplog.records if "set aside" in x.getMessage()]
    assert len(lines) == 1 and f"{newer[0]}, {newer[1]}" in lines[0], lines
    assert r.job.restored_epoch == sp and store.list_epochs()[-1] == sp
    r.feed(part2)
    r.stop()
    # the next checkpoints do not reuse the epochs set aside
    assert store.list_epochs()[-1] > newer[1]
    state, text = reference(part1 + part2)
    assert out.read_text() == text and dict(r.acc.state) == state


def test_refusals_are_one_line(tmp_path: Path) -> None:
    out, ckpt, other = tmp_path / "out.txt", tmp_path / "ckpt", tmp_path / "other"
    r = Running(out, checkpoint=ckpt)
    r.feed(records(100))
    plain = r.job.checkpoint()
    r.stop()
    refused(out, "holds no savepoint", checkpoint=other, from_savepoint=str(ckpt))
    refused(
        out,
        f"checkpoint {plain} in .* is not a savepoint",
        checkpoint=other,
        from_savepoint=f"{ckpt}@{plain}",
    )
    refused(out, "holds no checkpoint 999", checkpoint=other, from_savepoint=f"{ckpt}@999")
    r = Running(out, checkpoint=ckpt)
    r.stop(savepoint=True)
    r = Running(tmp_path / "out2.txt", checkpoint=other)
    r.stop()
    refused(out, re.escape("already holds checkpoints"), checkpoint=other, from_savepoint=str(ckpt))
    refused(
        out, "exclude each other", checkpoint=other, from_savepoint=str(ckpt), from_scratch=True
    )


def test_into_an_empty_object_store_location_and_back(tmp_path: Path) -> None:
    out, first, bucket = tmp_path / "out.txt", tmp_path / "one", tmp_path / "bucket"
    part1, part2, part3 = records(1500), records(1000, 1500), records(800, 2500)
    r = Running(out, checkpoint=first)
    r.feed(part1)
    r.stop(savepoint=True)
    url = f"file://{bucket}"
    r = Running(out, checkpoint=url, from_savepoint=str(first))
    assert r.job.restored_epoch is not None
    r.feed(part2)
    r.stop(savepoint=True)
    sp = r.job.last_savepoint
    # and from the object store into an empty local directory
    r = Running(out, checkpoint=tmp_path / "three", from_savepoint=f"{url}@{sp}")
    assert r.job.restored_epoch == sp
    r.feed(part3)
    r.stop()
    state, text = reference(part1 + part2 + part3)
    assert out.read_text() == text and dict(r.acc.state) == state


def test_a_savepoint_signed_with_another_key_is_refused(tmp_path: Path) -> None:
    out, first = tmp_path / "out.txt", tmp_path / "one"
    r = Running(out, checkpoint=first, checkpoint_key="k" * 32)
    r.feed(records(300))
    r.stop(savepoint=True)
    with pytest.raises(Exception, match="none of this job's keys") as info:
        root = Stream(name="manual")
        root.accumulate(count, start=KeyedState(), name="counts").map(len).sink_to_textfile(
            str(out)
        )
        Job(
            root,
            checkpoint=tmp_path / "two",
            every=None,
            from_savepoint=str(first),
            checkpoint_key="q" * 32,
        ).run()
    assert "\n" not in str(info.value)
    assert not LocalDirectoryStore(tmp_path / "two").list_epochs()
    # with the key that signed it, it restores, and the copy is signed with it
    r = Running(
        out, checkpoint=tmp_path / "two", from_savepoint=str(first), checkpoint_key="k" * 32
    )
    assert r.job.restored_epoch is not None
    r.stop()
    assert LocalDirectoryStore(tmp_path / "two").read_manifest(r.job.restored_epoch).signature
