"""Tests of Stream.from_textfile and Stream.filenames."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.sources.files import Filenames, FromTextfile
from rivermark.testing import wait_for

from .conftest import stop_and_wait


def test_textfile_emits_lines_with_delimiter_and_byte_position(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes("é1\nb2\n".encode())
    source = Stream.from_textfile(str(path), poll_interval=0.001)
    assert isinstance(source, FromTextfile) and source.replayable
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: len(out) == 2)
    assert out == ["é1\n", "b2\n"]
    assert source.offset == len("é1\nb2\n".encode())  # bytes, not characters
    stop_and_wait(source)


def test_textfile_tails_growing_file_and_holds_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text("one\ntw")
    source = Stream.from_textfile(path, poll_interval=0.001)
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: out == ["one\n"])
    assert source.offset == 4
    with open(path, "a") as f:
        f.write("o\nthree\n")
    wait_for(lambda: len(out) == 3)
    assert out == ["one\n", "two\n", "three\n"]
    assert source.offset == len(b"one\ntwo\nthree\n")
    stop_and_wait(source)
    assert source._raw is None  # the file was closed


def test_textfile_seek_resumes_after_position(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb\nc\nd\n")
    first = Stream.from_textfile(path, poll_interval=0.001)
    out: list[str] = []

    def take(x: str) -> None:
        out.append(x)
        if len(out) == 2:
            first.stop()

    first.sink(take)
    first.start()
    wait_for(lambda: first.finished)
    assert out == ["a\n", "b\n"] and first.offset == 4

    second = Stream.from_textfile(path, poll_interval=0.001)
    rest = second.sink_to_list()
    second.seek(first.position())  # checks the file is unchanged
    second.start()
    wait_for(lambda: len(rest) == 2)
    stop_and_wait(second)
    assert out + rest == ["a\n", "b\n", "c\n", "d\n"]


def test_textfile_from_end_and_custom_delimiter(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("old;old;")
    source = Stream.from_textfile(path, poll_interval=0.001, delimiter=";", from_end=True)
    assert source.offset == 8
    out = source.sink_to_list()
    source.start()
    with open(path, "a") as f:
        f.write("new;x")
    wait_for(lambda: out == ["new;"])
    stop_and_wait(source)
    assert source.offset == 12


def test_textfile_accepts_open_file(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("x\ny\n")
    with open(path) as f:
        source = Stream.from_textfile(f, poll_interval=0.001)
        out = source.sink_to_list()
        source.start()
        wait_for(lambda: len(out) == 2)
        stop_and_wait(source)
    assert out == ["x\n", "y\n"]


def test_textfile_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigurationError,
        match=re.escape("from_textfile: f must be a path or an open file, got 12"),
    ):
        Stream.from_textfile(12)
    with pytest.raises(
        ConfigurationError,
        match=re.escape("from_textfile: delimiter must be a non-empty string, got ''"),
    ):
        Stream.from_textfile(tmp_path / "x", delimiter="")
    with pytest.raises(
        ConfigurationError, match=re.escape("from_textfile: poll_interval must be a positive")
    ):
        Stream.from_textfile(tmp_path / "x", poll_interval=0)
    with pytest.raises(
        ConfigurationError, match=re.escape("position must be a byte offset >= 0, got 'x'")
    ):
        Stream.from_textfile(tmp_path / "x").seek("x")


def test_filenames_emits_sorted_then_new_files(tmp_path: Path) -> None:
    for name in ("b.csv", "a.csv", "skip.txt"):
        (tmp_path / name).write_text("")
    source = Stream.filenames(str(tmp_path / "*.csv"), poll_interval=0.001)
    assert isinstance(source, Filenames) and source.replayable
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: len(out) == 2)
    (tmp_path / "c.csv").write_text("")
    wait_for(lambda: len(out) == 3)
    stop_and_wait(source)
    names = [Path(p).name for p in out]
    assert names == ["a.csv", "b.csv", "c.csv"]
    assert source.position() == sorted(out)


def test_filenames_directory_and_seek(tmp_path: Path) -> None:
    for name in ("1", "2", "3"):
        (tmp_path / name).write_text("")
    source = Stream.filenames(tmp_path, poll_interval=0.001)
    source.seek([str(tmp_path / "1"), str(tmp_path / "2")])
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: len(out) == 1)
    stop_and_wait(source)
    assert out == [str(tmp_path / "3")]
    assert source.position() == [str(tmp_path / n) for n in ("1", "2", "3")]


def test_filenames_bad_arguments() -> None:
    with pytest.raises(
        ConfigurationError,
        match=re.escape("filenames: path must be a directory or a glob pattern, got 5"),
    ):
        Stream.filenames(5)
    with pytest.raises(
        ConfigurationError, match=re.escape("filenames: position must be a list of file names")
    ):
        Stream.filenames("*.x").seek("a")


def test_from_textfile_stop_at_eof_finishes(tmp_path):
    import asyncio

    path = tmp_path / "in.txt"
    path.write_text("a\nb\npartial")
    source = Stream.from_textfile(str(path), stop_at_eof=True)
    out = source.sink_to_list()

    async def main():
        source.start()
        await asyncio.wait_for(source.wait_finished(), 5)

    asyncio.run(main())
    # the last line has no newline: at the end of the file it is emitted as it is
    assert out == ["a\n", "b\n", "partial"]
    assert source.offset == len(b"a\nb\npartial")


def test_from_textfile_stop_at_eof_resume_after_last_line_emits_nothing_more(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("a\nlast")
    first = Stream.from_textfile(str(path), stop_at_eof=True)
    out = first.sink_to_list()
    first.start()
    wait_for(lambda: first.finished)
    second = Stream.from_textfile(str(path), stop_at_eof=True)
    rest = second.sink_to_list()
    second.seek(first.position())
    second.start()
    wait_for(lambda: second.finished)
    assert (out, rest) == (["a\n", "last"], [])


def test_from_textfile_large_file_keeps_order_and_position(tmp_path):
    # many chunks of the read buffer, lines crossing chunk boundaries, no final newline
    lines = [f"{i:07d}" * (1 + i % 13) for i in range(30_000)]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines))
    source = Stream.from_textfile(str(path), stop_at_eof=True)
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert out == [x + "\n" for x in lines[:-1]] + [lines[-1]]
    assert source.offset == path.stat().st_size
