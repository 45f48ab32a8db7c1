"""from_textfile refuses to resume into an input that changed below its position."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.errors import ChangedFileError


def lines(a: int, b: int) -> str:
    return "".join(f"record {i}\n" for i in range(a, b))


def run_job(inp: Path, out: Path, ckpt: Path, **kwargs: object) -> None:
    source = Stream.from_textfile(str(inp), stop_at_eof=True, name="input", **kwargs)
    source.map(lambda line: line.rstrip("\n").upper()).sink_to_textfile(str(out))
    Job(source, checkpoint=ckpt, every=None).run()


def test_a_file_truncated_below_the_position_is_refused(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "ckpt"
    inp.write_text(lines(0, 100))
    run_job(inp, out, ckpt)
    size = inp.stat().st_size
    inp.write_text(lines(0, 10))  # truncated (e.g. rotated and started afresh)
    with pytest.raises(ChangedFileError) as info:
        run_job(inp, out, ckpt)
    msg = str(info.value)
    assert f"input file {str(inp)!r} has {inp.stat().st_size} bytes" in msg
    assert f"less than the checkpointed position {size}" in msg
    assert "on_changed='restart'" in msg
    assert out.read_text() == lines(0, 100).upper()


def test_a_replaced_file_at_least_as_long_is_refused(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "ckpt"
    inp.write_text(lines(0, 100))
    run_job(inp, out, ckpt)
    size = inp.stat().st_size
    inp.write_text(lines(500, 700))  # another file under the same name, longer
    with pytest.raises(ChangedFileError, match=re.escape(f"checkpointed position {size}")):
        run_job(inp, out, ckpt)
    assert out.read_text() == lines(0, 100).upper()


def test_an_appended_file_resumes_after_the_position(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "ckpt"
    inp.write_text(lines(0, 100))
    run_job(inp, out, ckpt)
    with inp.open("a") as f:
        f.write(lines(100, 150))
    run_job(inp, out, ckpt)
    assert out.read_text() == lines(0, 150).upper()


def test_on_changed_restart_reads_the_new_file_from_the_beginning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inp, out, ckpt = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "ckpt"
    inp.write_text(lines(0, 100))
    run_job(inp, out, ckpt, on_changed="restart")
    inp.write_text(lines(500, 520))
    with caplog.at_level(logging.WARNING):
        run_job(inp, out, ckpt, on_changed="restart")
    assert "reading it again from the beginning" in caplog.text
    assert out.read_text() == (lines(0, 100) + lines(500, 520)).upper()


def test_on_changed_must_be_refuse_or_restart(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("on_changed must be 'refuse' or 'restart'")):
        Stream.from_textfile(str(tmp_path / "x"), on_changed="skip")


def test_a_plain_offset_from_an_older_checkpoint_is_still_accepted(tmp_path: Path) -> None:
    inp = tmp_path / "in.txt"
    inp.write_text(lines(0, 3))
    source = Stream.from_textfile(str(inp))
    source.seek(len("record 0\n"))
    assert source.offset == len("record 0\n")
    with pytest.raises(ChangedFileError, match="less than the checkpointed position 1000"):
        source.seek(1000)
