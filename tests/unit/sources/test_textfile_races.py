"""from_textfile against a writer that changes the file at a chosen moment: one interleaving each.

A sink that blocks on a chosen line holds the source after it has read a
chunk and before its next read: the test truncates, rewrites or rotates the
file there, then lets the source go on.  Before the reads checked the bytes
before their offset, the next read took a rewritten file's bytes after the
old offset for an append: its first lines were lost.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.errors import ChangedFileError
from rivermark.testing import wait_for


def numbered(a: int, b: int, tag: str = "line") -> str:
    return "".join(f"{tag} {i}\n" for i in range(a, b))


class Hold:
    """A sink that stops the source's event loop at ``line`` until :meth:`release`."""

    def __init__(self, line: str) -> None:
        self.line, self.out = line, []  # type: tuple[str, list[str]]
        self._entered, self._release = threading.Event(), threading.Event()

    def __call__(self, x: str) -> None:
        self.out.append(x)
        if x == self.line:
            self._entered.set()
            assert self._release.wait(120), "the test never released the sink"

    def wait_held(self) -> None:
        assert self._entered.wait(60), f"the source never emitted {self.line!r}"

    def release(self) -> None:
        self._release.set()


def tail_and_hold(inp: Path, **kwargs: Any) -> tuple[Any, Hold]:
    """Tail ``inp`` (2000 lines), append 10 more, and hold the source at the first of them."""
    inp.write_text(numbered(0, 2000))
    source = Stream.from_textfile(str(inp), poll_interval="5ms", **kwargs)
    hold = Hold("line 2000\n")
    source.sink(hold)
    source.start()
    wait_for(lambda: len(hold.out) == 2000, timeout=60)
    with inp.open("a") as f:
        f.write(numbered(2000, 2010))
    hold.wait_held()  # the source has read the appended lines; its next read comes after
    return source, hold


def rewrite_longer(inp: Path) -> str:
    inp.write_text(numbered(0, 3000, "new"))
    return numbered(0, 3000, "new")


def rewrite_same_length(inp: Path) -> str:
    same = numbered(0, 2010, "LINE")  # as long as what was read: nothing new to read
    inp.write_text(same)
    return same


def truncate_then_write_short(inp: Path) -> str:
    with inp.open("r+") as f:
        f.truncate(0)
        f.flush()
        f.write(numbered(0, 5, "short"))
    return numbered(0, 5, "short")


def rotate(inp: Path) -> str:
    os.rename(inp, inp.with_name("in.1"))
    with inp.with_name("in.1").open("a") as old:
        old.write(numbered(2010, 2020))  # the writer still had the old file open
    inp.write_text(numbered(0, 3000, "new"))
    return numbered(2010, 2020) + numbered(0, 3000, "new")


@pytest.mark.parametrize(
    ("change", "warning"),
    [
        (rewrite_longer, "changed before byte 18990, where it was read to (rewritten)"),
        (rewrite_same_length, "changed before byte 18990, where it was read to (rewritten)"),
        (truncate_then_write_short, "shrank from 18990 to"),
        (rotate, None),
    ],
    ids=["rewritten-longer", "rewritten-same-length", "truncated-then-short", "rotated"],
)
def test_a_file_changed_between_two_reads_gives_every_line_once(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    change: Callable[[Path], str],
    warning: str | None,
) -> None:
    inp = tmp_path / "in"
    with caplog.at_level(logging.WARNING, logger="rivermark.sources.textfile"):
        source, hold = tail_and_hold(inp)
        try:
            after = change(inp)
            hold.release()
            expected = (numbered(0, 2010) + after).splitlines(keepends=True)
            wait_for(lambda: len(hold.out) >= len(expected), timeout=60)
        finally:
            hold.release()
            source.stop()
    assert hold.out == expected
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warning in warnings[0], warnings


def test_a_position_taken_after_a_rewrite_not_yet_read_names_the_old_content(
    tmp_path: Path,
) -> None:
    # a checkpoint taken while the source has not read the rewritten file yet: its
    # position must not pass for a position in the new content
    inp = tmp_path / "in"
    source, hold = tail_and_hold(inp)
    try:
        rewrite_longer(inp)
        position = source.position()  # the source's loop is held: nothing moves
    finally:
        hold.release()
        source.stop()
    assert position["offset"] == len(numbered(0, 2000))
    resumed = Stream.from_textfile(str(inp))
    with pytest.raises(
        ChangedFileError,
        match=re.escape(f"differs before the checkpointed position {position['offset']}"),
    ):
        resumed.seek(position)


def checkpointed_then_appended(inp: Path) -> dict[str, Any]:
    """A position after 10 lines of ``inp``, whose file then got 10 more."""
    inp.write_text(numbered(0, 10))
    first = Stream.from_textfile(str(inp), stop_at_eof=True)
    first.start()
    wait_for(lambda: first.finished, timeout=60)
    position: dict[str, Any] = first.position()
    with inp.open("a") as f:
        f.write(numbered(10, 20))
    return position


def test_a_rotation_between_seek_and_start_finishes_the_rotated_file(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    position = checkpointed_then_appended(inp)
    source = Stream.from_textfile(str(inp), poll_interval="5ms")
    source.seek(position)  # the path still names the position's file
    os.rename(inp, tmp_path / "in.1")  # rotated before the source starts
    inp.write_text(numbered(0, 5, "new"))
    got: list[str] = source.sink_to_list()
    source.start()
    try:
        wait_for(lambda: len(got) >= 15, timeout=60)
    finally:
        source.stop()
    assert got == (numbered(10, 20) + numbered(0, 5, "new")).splitlines(keepends=True)


@pytest.mark.parametrize("on_changed", ["refuse", "restart"])
def test_a_rewrite_between_seek_and_start_is_refused_or_read_from_the_start(
    tmp_path: Path, on_changed: str
) -> None:
    inp = tmp_path / "in"
    position = checkpointed_then_appended(inp)
    source = Stream.from_textfile(str(inp), poll_interval="5ms", on_changed=on_changed)
    source.seek(position)
    inp.write_text(numbered(0, 30, "new"))  # longer than the position, other bytes
    got: list[str] = source.sink_to_list()
    source.log_failures = False
    source.start()
    try:
        if on_changed == "refuse":
            wait_for(lambda: source.finished, timeout=60)
        else:
            wait_for(lambda: len(got) >= 30, timeout=60)
    finally:
        source.stop()
    if on_changed == "refuse":
        assert isinstance(source.failure, ChangedFileError)
        assert f"differs before the checkpointed position {position['offset']}" in str(
            source.failure
        )
        assert got == []
    else:
        assert got == numbered(0, 30, "new").splitlines(keepends=True)
