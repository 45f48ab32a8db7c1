"""sink_to_textfile and the checkpoint path: what a refused job leaves, what a restore discards."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.errors import CheckpointLockedError
from rivermark.errors import ConfigurationError


def job_over(lines: list[str], out: Path, ckpt: Path, mode: str = "a") -> Job:
    source = Stream.from_iterable(lines, name="lines")
    source.sink_to_textfile(str(out), mode=mode)
    return Job(source, checkpoint=ckpt, every=None)


@pytest.mark.parametrize("mode", ["a", "w"])
def test_a_job_refused_for_a_locked_checkpoint_leaves_its_output_alone(
    tmp_path: Path, mode: str
) -> None:
    ckpt = tmp_path / "ckpt"
    holder = LocalDirectoryStore(ckpt)
    holder.lock()  # another job holds the directory
    try:
        with pytest.raises(CheckpointLockedError):
            job_over(["a"], tmp_path / "new.txt", ckpt, mode).run()
        assert not (tmp_path / "new.txt").exists()
        existing = tmp_path / "existing.txt"
        existing.write_text("kept\n")
        with pytest.raises(CheckpointLockedError):
            job_over(["a"], existing, ckpt, mode).run()
        assert existing.read_text() == "kept\n"
    finally:
        holder.unlock()


def test_bytes_appended_after_a_finished_run_are_discarded_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    job_over(["a", "b"], out, ckpt).run()
    with out.open("a") as f:
        f.write("typed by hand\n")
    with caplog.at_level(logging.WARNING, logger="rivermark.sinks.textfile"):
        job_over(["a", "b"], out, ckpt).run()
    assert out.read_text() == "a\nb\n"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"truncating {str(out)!r} from 18 to the checkpoint's 4 bytes: 14 bytes after" in w
        for w in warnings
    ), warnings


def test_a_checkpoint_path_that_is_a_dangling_symlink_is_named_as_such(tmp_path: Path) -> None:
    link = tmp_path / "ckpt"
    os.symlink(tmp_path / "gone" / "ckpt", link)
    expected = (
        f"{str(link)!r} is a symbolic link to {str(tmp_path / 'gone' / 'ckpt')!r}, "
        "which does not exist"
    )
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        LocalDirectoryStore(link)
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        LocalDirectoryStore(link / "job1")
