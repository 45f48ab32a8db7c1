"""Tail, the reads of from_textfile: a writer's truncate and writes interleaved with them, step by step.

The reader below takes the steps ``from_textfile`` takes: read a chunk
(``Tail.read``), cut it into lines; on :class:`Rewritten`, open the file
again and read it from its start.  The writer truncates the file and writes
a new content in pieces; the reader reads at any subset of the states in
between.  Every interleaving must yield the old lines, then the new ones,
each once.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest

from rivermark._fileid import TAIL_BYTES, tail_digest
from rivermark.sources._lines import LineSplitter
from rivermark.sources._tail import Rewritten, Tail


def numbered(a: int, b: int, tag: str) -> bytes:
    return "".join(f"{tag} {i}\n" for i in range(a, b)).encode()


class Reader:
    """The read loop of from_textfile without the event loop: one read per step."""

    def __init__(self, path: Path, size: int) -> None:
        self.path, self.size = path, size
        self.lines: list[bytes] = []
        self.rewrites: list[str] = []
        self._open()

    def _open(self) -> None:
        self.tail = Tail(str(self.path))
        self.tail.start_at(0)
        self.splitter = LineSplitter(b"\n")
        self.offset = 0

    def step(self) -> bytes | None:
        """One read; ``None`` when it found the file changed (it then reads from the start)."""
        try:
            chunk = self.tail.read(self.size, keep=self.offset)
        except Rewritten as e:
            self.rewrites.append(str(e))
            self.tail.close()
            self._open()
            return None
        parts = self.splitter.feed(chunk)
        self.lines += [p + b"\n" for p in parts]
        self.offset += sum(len(p) + 1 for p in parts)
        return chunk

    def drain(self) -> None:
        while self.step() != b"":
            pass


def writer_states(old: int, new: bytes) -> list[int]:
    """The new content's length after the truncate and after each write, at the edges that matter."""
    back = min(TAIL_BYTES, old)
    sizes = {
        0,  # just truncated
        (old - back) // 2,  # written, not yet up to the bytes a read checks
        old - back // 2,  # written into the checked bytes
        old,  # as long as before
        old + (len(new) - old) // 2,  # longer than before, not finished
        len(new),
    }
    return sorted(s for s in sizes if 0 <= s <= len(new))


@pytest.mark.parametrize("old_lines", [50, 2000], ids=["old-under-4KiB", "old-over-4KiB"])
@pytest.mark.parametrize("new_lines", [3, 3000], ids=["new-shorter", "new-longer"])
@pytest.mark.parametrize("read_size", [1 << 16, 1000], ids=["chunk-64KiB", "chunk-1000"])
def test_every_interleaving_of_truncate_and_rewrite_with_the_reads_gives_each_line_once(
    tmp_path: Path, old_lines: int, new_lines: int, read_size: int
) -> None:
    path = tmp_path / "in"
    old, new = numbered(0, old_lines, "old"), numbered(0, new_lines, "new")
    states = writer_states(len(old), new)
    expected = (old + new).splitlines(keepends=True)
    for reads in itertools.product([False, True], repeat=len(states)):
        path.write_bytes(old)
        reader = Reader(path, read_size)
        reader.drain()  # at the end of the old content, as a tailing source waits
        written = 0
        with path.open("r+b", buffering=0) as f:
            f.truncate(0)
            for size, read_here in zip(states, reads):
                f.seek(written)
                f.write(new[written:size])
                written = size
                if read_here:
                    reader.step()
        reader.drain()
        reader.tail.close()
        assert reader.lines == expected, (states, reads)
        assert len(reader.rewrites) == 1, (states, reads, reader.rewrites)


def test_a_read_after_a_longer_rewrite_raises_instead_of_returning_the_new_middle(
    tmp_path: Path,
) -> None:
    # the race from_textfile had: the file checked at its end, then truncated and written
    # longer than before, then read on from the old offset
    path = tmp_path / "in"
    old, new = numbered(0, 2000, "old"), numbered(0, 3000, "new")
    path.write_bytes(old)
    tail = Tail(str(path))
    tail.start_at(0)
    assert tail.read(1 << 20, keep=0) == old
    assert tail.read(1 << 20, keep=len(old)) == b""  # the end: a poll finds nothing new
    path.write_bytes(new)
    with pytest.raises(Rewritten, match=f"changed before byte {len(old)}, where it was read to"):
        tail.read(1 << 20, keep=len(old))
    with path.open("r+b") as f:
        f.truncate(10)
    with pytest.raises(Rewritten, match=f"shrank from {len(old)} to 10 bytes"):
        tail.read(1 << 20, keep=len(old))
    tail.close()


def test_the_digest_is_of_the_bytes_read_not_of_the_rewritten_file(tmp_path: Path) -> None:
    path = tmp_path / "in"
    old = numbered(0, 2000, "old")
    path.write_bytes(old)
    tail = Tail(str(path))
    tail.start_at(0)
    tail.read(1 << 20, keep=0)
    at = len(old) - 100
    read_there = hashlib.sha256(old[at - TAIL_BYTES : at]).hexdigest()
    assert tail.digest(at) == read_there == tail_digest(str(path), at)
    path.write_bytes(numbered(0, 3000, "new"))
    assert tail.digest(at) == read_there != tail_digest(str(path), at)
    tail.close()
    assert tail.digest(at) == read_there  # a closed reader still knows what it read


def test_a_long_line_is_not_kept_whole_and_positions_around_it_are_fingerprinted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "in"
    head, line, rest = numbered(0, 1000, "a"), b"x" * (3 << 20) + b"\n", numbered(0, 10, "b")
    data = head + line + rest
    path.write_bytes(data)
    reader = Reader(path, 1 << 16)
    most = 0
    while reader.step():
        most = max(most, reader.tail.kept)
        for offset in (reader.offset, reader.tail.end):
            assert reader.tail.digest(offset) == tail_digest(str(path), offset)
    assert reader.lines == data.splitlines(keepends=True)
    assert most <= (1 << 16) + 3 * TAIL_BYTES  # a chunk and the bytes around it, not 3 MiB
    reader.tail.close()


def test_a_file_shorter_than_the_start_offset_is_noticed_at_the_first_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "in"
    path.write_bytes(numbered(0, 10, "a"))
    tail = Tail(str(path))
    tail.start_at(1000)
    assert tail.digest(1000) is None
    with pytest.raises(Rewritten, match="shrank from 1000 to"):
        tail.read(100, keep=1000)
    with path.open("ab") as f:
        f.write(b"z" * 2000)  # now longer, but not the bytes a reader at 1000 had
    with pytest.raises(Rewritten, match="changed before byte 1000"):
        tail.read(100, keep=1000)
    tail.close()
    with pytest.raises(ValueError, match="the file is closed"):
        tail.read(100, keep=1000)
