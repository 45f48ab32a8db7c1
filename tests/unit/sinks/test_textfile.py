"""Tests of sink_to_textfile and its checkpoint sink contract."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.sinks.base import CheckpointedSink
from rivermark.sinks.textfile import SinkToTextfile


def test_writes_str_plus_end(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    s = Stream()
    sink = s.sink_to_textfile(path, end=";", mode="w")
    assert isinstance(sink, SinkToTextfile) and isinstance(sink, CheckpointedSink)
    for x in ["a", 1, None]:
        s.emit(x)
    sink.close()
    assert path.read_text() == "a;1;None;"


def test_mode_a_appends_and_w_truncates(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    s = Stream()
    sink = s.sink_to_textfile(str(path))
    s.emit("new")
    sink.close()
    assert path.read_text() == "old\nnew\n"
    s2 = Stream()
    sink2 = s2.sink_to_textfile(str(path), mode="w")
    s2.emit("only")
    sink2.close()
    assert path.read_text() == "only\n"


def test_open_kwargs_are_passed_to_open(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    s = Stream()
    sink = s.sink_to_textfile(path, mode="w", encoding="utf-16")
    s.emit("é")
    sink.close()
    assert path.read_text(encoding="utf-16") == "é\n"


def test_pre_commit_then_restore_is_byte_exact(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    s = Stream()
    sink = s.sink_to_textfile(path, mode="w")
    for i in range(3):
        s.emit(f"line-{i}-é")
    handle = sink.pre_commit(1)
    snapshot = path.read_bytes()
    assert handle["path"] == str(path) and handle["length"] == len(snapshot)
    assert handle["realpath"] == os.path.realpath(path) and len(handle["tail_sha256"]) == 64
    assert snapshot.decode() == "line-0-é\nline-1-é\nline-2-é\n"
    sink.commit(1, handle)
    for i in range(3, 6):
        s.emit(f"after-{i}")
    sink.pre_commit(2)  # flushed: the later lines are on disk
    assert path.read_bytes() != snapshot

    sink.restore(handle)
    assert path.read_bytes() == snapshot
    s.emit("resumed")  # the sink appends after the restored point
    sink.close()
    assert path.read_bytes() == snapshot + b"resumed\n"


def test_restore_in_a_fresh_sink_as_after_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    s = Stream()
    sink = s.sink_to_textfile(path, mode="w")
    s.emit("kept")
    handle = sink.pre_commit(7)
    s.emit("lost")
    sink.close()
    # the new run opens the file again, then the job restores it
    s2 = Stream()
    sink2 = s2.sink_to_textfile(path, mode="a")
    sink2.restore(handle)
    s2.emit("again")
    sink2.close()
    assert path.read_text() == "kept\nagain\n"


def test_restore_without_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    s = Stream()
    sink_w = s.sink_to_textfile(path, mode="w")
    s.emit("x")
    sink_w.restore(None)
    assert path.read_bytes() == b""
    sink_w.close()

    path.write_text("keep\n")
    s2 = Stream()
    sink_a = s2.sink_to_textfile(path, mode="a")
    sink_a.restore(None)
    s2.emit("more")
    sink_a.close()
    assert path.read_text() == "keep\nmore\n"


def test_restore_refuses_a_file_shorter_than_the_handle(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    sink = Stream().sink_to_textfile(path, mode="w")
    with pytest.raises(ConfigurationError, match=re.escape("fewer than the 100 the checkpoint")):
        sink.restore({"path": str(path), "length": 100})
    sink.close()


def test_emit_after_close_is_a_clear_error(tmp_path: Path) -> None:
    s = Stream()
    sink = s.sink_to_textfile(tmp_path / "o.txt")
    sink.close()
    sink.close()  # idempotent
    with pytest.raises(ConfigurationError, match=re.escape("received 'late' after close()")):
        s.emit("late")


def test_accepts_an_open_file(tmp_path: Path) -> None:
    path = tmp_path / "o.txt"
    with open(path, "w") as f:
        s = Stream()
        sink = s.sink_to_textfile(f)
        s.emit("in")
        handle = sink.pre_commit(0)
        assert (handle["path"], handle["length"]) == (str(path), 3)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"file": 3.5}, "sink_to_textfile: file must be a path or an open text file, got 3.5"),
        ({"file": "x.txt", "mode": "r"}, "sink_to_textfile: mode must be 'a' or 'w', got 'r'"),
        ({"file": "x.txt", "end": 1}, "sink_to_textfile: end must be a string, got 1"),
    ],
)
def test_bad_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict, text: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=re.escape(text)):
        Stream().sink_to_textfile(**kwargs)


def test_mode_w_truncates_on_first_write_without_a_job(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    s = Stream()
    sink = s.sink_to_textfile(str(path), mode="w")
    assert path.read_text() == "old\n"  # nothing written yet
    s.emit("new")
    sink.file.flush()
    assert path.read_text() == "new\n"
    sink.close()


def test_mode_w_resumes_from_checkpoint_length(tmp_path):
    # a previous run wrote "a\n" before its checkpoint and "b\n" after it
    path = tmp_path / "out.txt"
    path.write_text("a\nb\n")
    s = Stream()
    sink = s.sink_to_textfile(str(path), mode="w")
    sink.restore({"path": str(path), "length": 2})
    s.emit("c")
    sink.file.flush()
    assert path.read_text() == "a\nc\n"
    sink.close()


def test_start_over_empties_the_file_and_keeps_writing(tmp_path: Path) -> None:
    from rivermark.sinks.base import StartOverSink

    path = tmp_path / "out.txt"
    path.write_text("earlier\n")
    s = Stream()
    sink = s.sink_to_textfile(path)
    assert isinstance(sink, StartOverSink)
    assert (
        sink.unaccounted_output() == f"{sink.display_name()}: {str(path)!r} already holds 8 bytes"
    )
    sink.start_over()
    assert path.read_bytes() == b"" and sink.unaccounted_output() is None
    s.emit("new")
    handle = sink.pre_commit(1)
    assert (handle["path"], handle["length"]) == (str(path), 4)
    sink.close()
    assert path.read_text() == "new\n"
    w = Stream().sink_to_textfile(path, mode="w")
    assert w.unaccounted_output() is None  # mode "w" truncates at start anyway
    w.close()


def test_start_over_of_an_output_that_cannot_be_truncated_is_a_clear_error() -> None:
    import os

    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe, os.fdopen(read_end) as _:
        s = Stream()
        sink = s.sink_to_textfile(pipe)
        with pytest.raises(ConfigurationError, match="cannot start .* over"):
            sink.start_over()


def test_a_record_and_a_checkpoint_needing_the_file_first_open_it_once(tmp_path: Path) -> None:
    """Records emitted from the caller's thread while the job's loop takes a checkpoint:
    both may be the first to need the file; a second file object would be left open
    (its buffered bytes written whenever it is collected)."""
    opened: list[str] = []

    def slow_opener(path: str, flags: int) -> int:
        opened.append(path)
        time.sleep(0.05)  # both threads reach the open before either has the file
        return os.open(path, flags, 0o644)

    s = Stream()
    sink = s.sink_to_textfile(str(tmp_path / "out.txt"), opener=slow_opener)
    emitter = threading.Thread(target=s.emit, args=("a",))
    emitter.start()
    sink.pre_commit(1)
    emitter.join()
    sink.close()
    assert opened == [str(tmp_path / "out.txt")]
    assert (tmp_path / "out.txt").read_text() == "a\n"
