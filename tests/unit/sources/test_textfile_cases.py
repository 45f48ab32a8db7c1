"""from_textfile: unterminated last lines, rotation, truncation, codecs and undecodable bytes."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.checkpoint.errors import JobFailedError
from rivermark.errors import ChangedFileError, ConfigurationError, InputDecodeError
from rivermark.sources._lines import LineSplitter
from rivermark.testing import wait_for


def numbered(a: int, b: int, tag: str = "line") -> str:
    return "".join(f"{tag} {i}\n" for i in range(a, b))


def run_job(inp: Path, out: Path, ckpt: Path, **kwargs: Any) -> None:
    source = Stream.from_textfile(str(inp), stop_at_eof=True, name="input", **kwargs)
    source.map(lambda line: f"[{line}]").sink_to_textfile(str(out))
    Job(source, checkpoint=ckpt, every=None).run()


# ------------------------------------------------------------ unterminated last line
def test_a_last_line_finished_by_its_delimiter_later_is_not_emitted_again(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    inp.write_bytes(b"a\nb\nc")
    run_job(inp, out, ckpt)
    assert out.read_text() == "[a\n]\n[b\n]\n[c]\n"
    with inp.open("ab") as f:
        f.write(b"\nd\n")
    run_job(inp, out, ckpt)
    # the delimiter after "c" ends the line already emitted; "d" follows
    assert out.read_text() == "[a\n]\n[b\n]\n[c]\n[d\n]\n"


def test_a_last_line_continued_after_the_run_is_refused_not_split(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    inp.write_bytes(b"a\nb\nc")
    run_job(inp, out, ckpt)
    with inp.open("ab") as f:
        f.write(b"ccc\nd\n")
    with pytest.raises(ChangedFileError) as info:
        run_job(inp, out, ckpt)
    msg = str(info.value)
    assert f"the last line of {str(inp)!r} (1 byte before position 5)" in msg
    assert "would cut that line in two records" in msg
    assert out.read_text() == "[a\n]\n[b\n]\n[c]\n"  # no "ccc" record


# ------------------------------------------------------------ rotation and truncation
def start_tailing(path: Path, **kwargs: Any) -> tuple[Any, list[str]]:
    source = Stream.from_textfile(str(path), poll_interval="5ms", **kwargs)
    out: list[str] = source.sink_to_list()
    source.start()
    return source, out


def test_rotation_while_tailing_finishes_the_old_file_then_reads_the_new_one(
    tmp_path: Path,
) -> None:
    inp = tmp_path / "in"
    inp.write_text(numbered(0, 2000))
    source, out = start_tailing(inp)
    try:
        wait_for(lambda: len(out) == 2000, timeout=60)
        os.rename(inp, tmp_path / "in.1")
        with open(tmp_path / "in.1", "a") as old:
            old.write(numbered(2000, 2010))  # the writer still had the old file open
        inp.write_text(numbered(0, 3000, "new"))
        wait_for(lambda: len(out) >= 5010, timeout=60)
    finally:
        source.stop()
    assert out == (numbered(0, 2010) + numbered(0, 3000, "new")).splitlines(keepends=True)
    pos = source.position()
    assert (pos["dev"], pos["ino"]) == (inp.stat().st_dev, inp.stat().st_ino)


def test_a_position_taken_before_a_rotation_resumes_in_the_rotated_file(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    inp.write_text(numbered(0, 2000))
    run_job(inp, out, ckpt)
    with inp.open("a") as f:
        f.write(numbered(2000, 2500))
    os.rename(inp, tmp_path / "in.1")
    inp.write_text(numbered(0, 3000, "new"))
    run_job(inp, out, ckpt)
    expected = numbered(0, 2500) + numbered(0, 3000, "new")
    assert out.read_text() == "".join(f"[{line}]\n" for line in expected.splitlines(True))
    run_job(inp, out, ckpt)  # the next run goes on in the new file
    assert out.read_text().count("\n]") == 5500


def test_truncate_and_rewrite_while_tailing_reads_the_new_content_from_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inp = tmp_path / "in"
    inp.write_text(numbered(0, 2000))
    source, out = start_tailing(inp)
    try:
        wait_for(lambda: len(out) == 2000, timeout=60)
        with caplog.at_level(logging.WARNING, logger="rivermark.sources.textfile"):
            inp.write_text(numbered(0, 3000, "new"))  # longer than before: size alone misses it
            wait_for(lambda: len(out) >= 5000, timeout=60)
            with inp.open("r+") as f:  # and now shorter
                f.truncate(0)
                f.write(numbered(0, 5, "short"))
            wait_for(lambda: len(out) >= 5005, timeout=60)
    finally:
        source.stop()
    expected = numbered(0, 2000) + numbered(0, 3000, "new") + numbered(0, 5, "short")
    assert out == expected.splitlines(keepends=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    # the rewrite is noticed as a truncation if a read comes between the writer's
    # truncate and its write, else by its other bytes (test_textfile_races makes each sure)
    old_size = len(numbered(0, 2000))
    assert f"input file {str(inp)!r} changed before byte {old_size}" in warnings[0] or (
        f"input file {str(inp)!r} shrank from {old_size} to" in warnings[0]
    ), warnings
    assert f"shrank from {len(numbered(0, 3000, 'new'))} to" in warnings[1], warnings
    assert "(truncated)" in warnings[1], warnings


# ------------------------------------------------------------ codecs
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-8-sig", "cp1252"])
def test_every_codec_splits_lines_and_resumes_at_the_byte_offset(
    tmp_path: Path, encoding: str
) -> None:
    inp, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    text = "één\nzwei ✓\ndrie\n" if encoding != "cp1252" else "één\nzwei\ndrie\n"
    inp.write_bytes(text.encode(encoding))
    run_job(inp, out, ckpt, encoding=encoding)
    # appended without a second byte-order mark (as a writer going on with the file does)
    plain = {"utf-16": "utf-16-le", "utf-32": "utf-32-le", "utf-8-sig": "utf-8"}
    with inp.open("ab") as f:
        f.write("vier\n".encode(plain.get(encoding, encoding)))
    run_job(inp, out, ckpt, encoding=encoding)
    lines = [*text.splitlines(True), "vier\n"]
    assert out.read_text() == "".join(f"[{line}]\n" for line in lines)


def test_a_codec_that_cannot_be_cut_at_its_delimiter_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("cannot split 'utf-7' text")):
        Stream.from_textfile("in", encoding="utf-7")
    with pytest.raises(ConfigurationError, match=re.escape("unknown encoding 'nope'")):
        Stream.from_textfile("in", encoding="nope")
    with pytest.raises(ConfigurationError, match="errors must name a decoding error handler"):
        Stream.from_textfile("in", errors="bogus")


# ------------------------------------------------------------ undecodable bytes
BAD = b"good 1\nbad \xff\xfe line\ngood 2\n"


def test_strict_decoding_names_the_file_and_byte_offset(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    inp.write_bytes(BAD)
    with pytest.raises(JobFailedError) as info:
        run_job(inp, out, ckpt)
    assert isinstance(info.value.__cause__, InputDecodeError)
    assert f"cannot decode the line at byte 11 of {str(inp)!r} as 'utf-8'" in str(info.value)
    assert "errors='replace'" in str(info.value)


@pytest.mark.parametrize("errors", ["replace", "ignore"])
def test_errors_replace_and_ignore_decode_every_line(tmp_path: Path, errors: str) -> None:
    inp, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    inp.write_bytes(BAD)
    run_job(inp, out, ckpt, errors=errors)
    middle = BAD.splitlines(True)[1].decode(errors=errors)
    assert out.read_text() == f"[good 1\n]\n[{middle}]\n[good 2\n]\n"


def test_on_error_skip_and_dead_letter_drop_only_the_undecodable_line(tmp_path: Path) -> None:
    inp, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    inp.write_bytes(b"\xff first\n" + BAD)
    run_job(inp, out, ckpt, on_error="skip")
    assert out.read_text() == "[good 1\n]\n[good 2\n]\n"
    dead: list[tuple[bytes, str]] = []
    out2, ckpt2 = tmp_path / "out2", tmp_path / "ckpt2"
    run_job(inp, out2, ckpt2, on_error=lambda x, e: dead.append((x, str(e))))
    assert out2.read_text() == "[good 1\n]\n[good 2\n]\n"
    assert [x for x, _ in dead] == [b"\xff first", b"bad \xff\xfe line"]
    assert "at byte 0 of" in dead[0][1] and "at byte 19 of" in dead[1][1]
    # the position passed the dropped lines: a resume emits nothing again
    run_job(inp, out, ckpt, on_error="skip")
    assert out.read_text() == "[good 1\n]\n[good 2\n]\n"


# ------------------------------------------------------------ long lines
def test_a_long_line_is_searched_once_not_at_every_chunk() -> None:
    chunk = 1 << 16
    line = b"x" * (40 << 20)
    for delimiter in (b"\n", b"\r\n"):
        splitter = LineSplitter(delimiter)
        data = line + delimiter + b"tail"
        records = []
        for i in range(0, len(data), chunk):
            records += splitter.feed(data[i : i + chunk])
        assert records == [line]
        assert splitter.pending == 4
        chunks = -(-len(data) // chunk)
        # every byte once, plus the few a delimiter may straddle at chunk edges
        assert splitter.scanned <= len(data) + chunks * (len(delimiter) - 1)


def test_utf16_delimiter_bytes_across_two_characters_do_not_cut_a_line() -> None:
    # "\u0a41\u4100": its UTF-16-LE bytes 41 0a 00 41 hold b"\n\x00" at an odd offset
    text = "\u0a41\u4100\n"
    splitter = LineSplitter("\n".encode("utf-16-le"), unit=2)
    data = text.encode("utf-16-le")
    parts = splitter.feed(data[:3]) + splitter.feed(data[3:])
    assert [p.decode("utf-16-le") for p in parts] == ["\u0a41\u4100"]


def test_a_rotated_file_without_a_successor_yet_is_finished_and_then_followed(
    tmp_path: Path,
) -> None:
    inp = tmp_path / "in"
    inp.write_text(numbered(0, 10))
    first, seen = start_tailing(inp)
    try:
        wait_for(lambda: len(seen) == 10, timeout=60)
    finally:
        first.stop()
    position = first.position()
    with inp.open("a") as f:
        f.write(numbered(10, 20))
    os.rename(inp, tmp_path / "in.1")  # no new "in" yet
    source = Stream.from_textfile(str(inp), poll_interval="5ms")
    source.seek(position)
    got: list[str] = source.sink_to_list()
    source.start()
    try:
        wait_for(lambda: len(got) == 10, timeout=60)
        inp.write_text(numbered(0, 5, "new"))
        wait_for(lambda: len(got) == 15, timeout=60)
    finally:
        source.stop()
    assert got == (numbered(10, 20) + numbered(0, 5, "new")).splitlines(keepends=True)
