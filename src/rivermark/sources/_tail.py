"""Reading a file that may be truncated or rewritten under the reader.

:class:`Tail` reads a file through one descriptor, from a byte offset on.
Each :meth:`Tail.read` takes the (up to :data:`TAIL_BYTES`) bytes before the
offset *and* the new bytes after it in one read call, and hands the new bytes
over only if the first ones are still the bytes it read there.  A file found
shorter than the offset (truncated) or with other bytes before it (truncated
and written again, longer than before) raises :class:`Rewritten` instead:
the reader never takes the middle of a new content for the continuation of
the old one.  A check made before the read, in a call of its own, would not
do: a writer may truncate the file and write it past the offset between the
check and the read, and the read would then return the new content's bytes
after the old offset.

The bytes read are also kept from the consumer's position on (``keep``, the
start of the first record not yet consumed), so that :meth:`Tail.digest`
fingerprints a position with the bytes that were read there, not with what
the file holds by the time a checkpoint asks for it.

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "f.txt"
>>> _ = path.write_text("old 1\\nold 2\\n")
>>> tail = Tail(path)
>>> tail.read(100, keep=0), tail.end
(b'old 1\\nold 2\\n', 12)
>>> _ = path.write_text("a new, longer content\\n")
>>> tail.read(100, keep=12)
Traceback (most recent call last):
    ...
rivermark.sources._tail.Rewritten: changed before byte 12, where it was read to (rewritten)
>>> tail.close()
"""

from __future__ import annotations

import hashlib
import os

from rivermark._fileid import TAIL_BYTES, identity

__all__ = ["Tail", "Rewritten"]


class Rewritten(Exception):
    """The file no longer holds the bytes read from it; the message says how it changed."""


class Tail:
    """``path`` open for reading from byte 0 (see :meth:`start_at`); see the module docs."""

    def __init__(self, path: str) -> None:
        # optional: O_CLOEXEC is missing on some platforms
        self._fd: int | None = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        #: (st_dev, st_ino) of the open file
        self.ident = identity(os.fstat(self._fd))
        #: the offset read to: the next read starts here
        self.end = 0
        #: bytes ``[_kept_at, _kept_at + len(_kept))`` of the file as read (normally up to ``end``)
        self._kept = bytearray()
        self._kept_at = 0
        #: (offset, the bytes before it): kept apart while a long record is being read
        self._mark: tuple[int, bytes] | None = None

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError("the file is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd is None

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes of the file (fewer if it is shorter)."""
        return os.pread(self.fd, n, 0)

    def start_at(self, offset: int) -> None:
        """Read on from ``offset``: the bytes before it are the ones the next read checks.

        If the file is shorter than ``offset``, the next read raises
        :class:`Rewritten` (unless it has grown to hold the same bytes before
        ``offset``, which a file shorter than that cannot).
        """
        lo = max(0, offset - TAIL_BYTES)
        self._kept = bytearray(os.pread(self.fd, offset - lo, lo))
        self._kept_at, self.end, self._mark = lo, offset, None

    def read(self, size: int, keep: int) -> bytes:
        """Up to ``size`` bytes after :attr:`end`, if the file still holds the bytes before it.

        ``keep`` (at most :attr:`end`) is the offset of the first byte the
        consumer has not used yet: :meth:`digest` can fingerprint any offset
        from ``keep`` on.  Raises :class:`Rewritten` when the file is shorter
        than :attr:`end` or its bytes before :attr:`end` are not those read.
        """
        back = min(TAIL_BYTES, self.end)
        data = os.pread(self.fd, back + size, self.end - back)
        if len(data) < back:
            size_now = os.fstat(self.fd).st_size
            raise Rewritten(f"shrank from {self.end} to {size_now} bytes (truncated)")
        kept = self._kept
        if len(kept) < back or not data.startswith(kept[len(kept) - back :]):
            raise Rewritten(f"changed before byte {self.end}, where it was read to (rewritten)")
        if len(data) == back:
            return b""
        chunk = data[back:]
        self._drop_before(keep)
        kept += chunk
        self.end += len(chunk)
        return chunk

    def _drop_before(self, keep: int) -> None:
        """Forget the bytes neither :meth:`digest` (from ``keep`` on) nor the next read needs."""
        lo = max(0, keep - TAIL_BYTES)
        mark = self._mark
        if mark is not None and mark[0] != keep:
            mark = self._mark = None
        if mark is None and self.end - keep > TAIL_BYTES and lo >= self._kept_at:
            # a record longer than the check: remember the bytes before it, not all of it
            # (the consumer's next position is then ``keep`` or past ``end``)
            mark = (keep, bytes(self._kept[lo - self._kept_at : keep - self._kept_at]))
            self._mark = mark
        cut = self.end - TAIL_BYTES
        if mark is None:
            cut = min(cut, lo)
        if cut > self._kept_at:
            del self._kept[: cut - self._kept_at]
            self._kept_at = cut

    def digest(self, offset: int) -> str | None:
        """SHA-256 (hex) of the bytes before ``offset`` as read, as :func:`tail_digest` takes them.

        ``None`` when those bytes are not kept (an offset before the
        ``keep`` of the last read, or past :attr:`end`).
        """
        mark = self._mark
        if mark is not None and mark[0] == offset:
            return hashlib.sha256(mark[1]).hexdigest()
        lo = max(0, offset - TAIL_BYTES)
        if lo < self._kept_at or offset > self._kept_at + len(self._kept):
            return None
        return hashlib.sha256(self._kept[lo - self._kept_at : offset - self._kept_at]).hexdigest()

    def size(self) -> int:
        """The size of the open file now."""
        return os.fstat(self.fd).st_size

    @property
    def kept(self) -> int:
        """How many bytes are kept (for tests: a long record is not kept whole)."""
        return len(self._kept) + (len(self._mark[1]) if self._mark is not None else 0)

    def close(self) -> None:
        """Close the descriptor; :attr:`ident` and :meth:`digest` still answer."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
