"""``to_parquet`` and ``to_delta`` convert and write full buffers on a writer thread.

The loop fills the next buffer meanwhile; ``pre_commit`` waits for the
epoch's writes before it closes the files, an error on the writer thread
stops the job with one line naming the sink, and ``close`` stops the thread.
Real files, a real full disk (a small tmpfs).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from rivermark import Job, Stream
from rivermark.checkpoint.errors import JobFailedError
from rivermark.errors import ConfigurationError
from rivermark.lake.delta import ToDelta
from rivermark.lake.parquet import ToParquet

from .lakeread import parquet_rows

RECS = [{"id": i, "k": f"k{i % 37}", "v": i, "g": i % 3} for i in range(25)]


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rivermark-lake")]


def test_parquet_full_buffers_are_written_on_the_writer_thread_that_close_stops(tmp_path: Path) -> None:  # fmt: skip
    before = _writer_threads()
    sink = ToParquet(Stream(), str(tmp_path / "out"), batch_rows=10, name="w")
    sink.restore(None)
    try:
        for r in RECS:
            sink.update(r)
        assert len(_writer_threads()) == len(before) + 1
        handle = sink.pre_commit(1)  # waits for the writes in flight, then closes the file
        sink.commit(1, handle)
        assert [r[0] for r in parquet_rows(str(tmp_path / "out"), None)] == list(range(25))
    finally:
        sink.close()
    assert _writer_threads() == before


def test_delta_append_writes_full_buffers_before_the_checkpoint_unseen_by_readers(tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "t"
    sink = ToDelta(Stream(), str(out), batch_rows=10, name="d")
    sink.restore(None)
    try:
        for r in RECS:
            sink.update(r)
        # the first full buffer is in a data file already (the second waited for it) ...
        data = [p for p in out.glob("part-rm-*.parquet")]
        assert len(data) == 1
        # ... that no reader sees: the log does not name it yet
        assert DeltaTable(str(out)).to_pyarrow_table().num_rows == 0
        handle = sink.pre_commit(1)
        (entry,) = handle["pending"]
        assert [f["rows"] for f in entry["files"]] == [25]  # one file per epoch and partition
        sink.commit(1, handle)
        ids = DeltaTable(str(out)).to_pyarrow_table().column("id").to_pylist()
        assert sorted(ids) == list(range(25))
    finally:
        sink.close()
    assert _writer_threads() == []


def test_delta_batch_rows_must_be_a_positive_integer() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("to_delta: batch_rows must be a positive integer, got 0")):  # fmt: skip
        Stream().to_delta("t", batch_rows=0)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs (the tests run as root, as the project's CI does)."""
    path = tmp_path / "small"
    path.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert res.returncode == 0, f"mounting a tmpfs needs root: {res.stderr}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("parquet", "to_parquet sink 'full': writing an in-progress file failed in "),
        ("delta", "to_delta sink 'full': writing the data files of epoch "),
    ],
)
def test_a_write_that_fails_on_the_writer_thread_stops_the_job_in_one_line(
    kind: str, message: str, full_disk: Path, tmp_path: Path
) -> None:
    # random text does not compress: 8,000 rows of 1,000 characters fill 2 MB several times
    recs: list[Any] = [{"id": i, "blob": os.urandom(500).hex()} for i in range(8000)]
    src = Stream.from_iterable(recs)
    out = str(full_disk / "out")
    if kind == "parquet":
        src.to_parquet(out, batch_rows=500, name="full")
    else:
        src.to_delta(out, batch_rows=500, name="full")
    with pytest.raises(JobFailedError, match=re.escape(message)) as e:
        Job(src, checkpoint=str(tmp_path / "c"), every="1h").run()
    text = str(e.value)
    assert "\n" not in text and "No space left on device" in text
    assert "the job stopped with its last checkpoint intact" in text
    assert _writer_threads() == []
    if kind == "parquet":  # nothing published
        assert list(Path(out).glob("*.parquet")) == []
    else:
        assert not DeltaTable.is_deltatable(out) or DeltaTable(out).to_pyarrow_table().num_rows == 0  # fmt: skip
