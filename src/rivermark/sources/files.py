"""File sources: ``Stream.from_textfile`` (tail a file) and ``Stream.filenames`` (watch a glob)."""

from __future__ import annotations

import asyncio
import glob
import logging
import os
from collections.abc import Callable
from typing import IO, Any

from .._fileid import tail_digest
from ..core.node import Stream
from ..core.timeutil import parse_interval
from ..errors import ChangedFileError, ConfigurationError
from .base import Source

logger = logging.getLogger(__name__)

__all__ = ["FromTextfile", "Filenames"]

_CHUNK = 1 << 16


@Stream.register_api(staticmethod, attribute_name="from_textfile")
class FromTextfile(Source):
    """Emit the lines of a text file, and go on with the lines appended to it.

    ``f`` is a path or an open file.  Each record is one part of the file up
    to and including ``delimiter`` (as in streamz, the delimiter stays on the
    record).  A partial line at the end of the file is emitted only once its
    delimiter has arrived.  ``from_end=True`` skips what the file holds when
    the source is created.  ``stop_at_eof=True`` (a rivermark addition) ends
    the source at the end of the file instead of waiting for more lines, so
    a job over a finished file exits when it has read it; a last line
    without a delimiter is then emitted as it is (without one), as the
    final record.

    Position: the byte offset just *after* the last emitted record, i.e. where
    the next record starts (:attr:`offset`).  The source is replayable:
    ``seek(position)`` makes the next run read from there.  For a file given
    by path, ``position()`` is ``{"offset": n, "tail_sha256": digest}``, the
    digest covering the (up to 4 KiB) bytes before ``n``.  ``seek`` checks
    the file against it: a file now shorter than ``n`` (truncated) or whose
    bytes before ``n`` differ (replaced, rewritten) would otherwise be
    skipped silently, so it is refused with
    :class:`~rivermark.errors.ChangedFileError`, naming the file and both
    positions.  ``on_changed="restart"`` reads such a file again from the
    beginning instead (with a WARNING); the default is ``"refuse"``.

    >>> import os, tempfile
    >>> from rivermark.testing import wait_for
    >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
    >>> _ = open(path, "w").write("a\\nbb\\nc")
    >>> source = Stream.from_textfile(path, poll_interval="1ms")
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: len(L) == 2); source.stop()
    >>> L, source.offset
    (['a\\n', 'bb\\n'], 5)
    """

    replayable = True

    def __init__(
        self,
        f: Any,
        poll_interval: Any = 0.1,
        delimiter: str = "\n",
        from_end: bool = False,
        start: bool = False,
        encoding: str = "utf-8",
        stop_at_eof: bool = False,
        on_changed: str = "refuse",
        **kwargs: Any,
    ) -> None:
        self.stop_at_eof = stop_at_eof
        if on_changed not in ("refuse", "restart"):
            raise ConfigurationError(
                f"from_textfile: on_changed must be 'refuse' or 'restart', got {on_changed!r}; "
                "'restart' reads a file that was truncated or replaced since the checkpoint "
                "again from the beginning"
            )
        self.on_changed = on_changed
        if not isinstance(delimiter, str) or not delimiter:
            raise ConfigurationError(
                f"from_textfile: delimiter must be a non-empty string, got {delimiter!r}; "
                "pass e.g. delimiter='\\n'"
            )
        self._given: IO[Any] | None = None
        if isinstance(f, (str, os.PathLike)):
            self.path: str | None = os.fspath(f)
        elif hasattr(f, "read"):
            self._given = f
            name = getattr(f, "name", None)
            self.path = name if isinstance(name, str) else None
        else:
            raise ConfigurationError(
                f"from_textfile: f must be a path or an open file, got {f!r}; pass e.g. 'log.txt'"
            )
        self.poll_interval = parse_interval(poll_interval, "from_textfile", "poll_interval")
        self.delimiter = delimiter
        self.encoding = encoding
        self.from_end = from_end
        self._raw: IO[bytes] | None = None
        super().__init__(start=False, **kwargs)
        offset = 0
        if from_end:
            if self.path is not None:
                offset = os.path.getsize(self.path)
            elif self._given is not None:
                offset = self._given.seek(0, os.SEEK_END)
        elif self._given is not None:
            offset = self._given.tell()
        self._position = offset
        if start:
            self.start()

    @property
    def offset(self) -> int:
        """The byte offset where the next record starts."""
        return int(self._position or 0)

    def position(self) -> Any:
        """``{"offset": n, "tail_sha256": ...}`` for a path; the offset ``n`` for a file object."""
        offset = self.offset
        if self.path is None:
            return offset
        return {"offset": offset, "tail_sha256": tail_digest(self.path, offset)}

    def seek(self, position: Any) -> None:
        """Resume at a value :meth:`position` returned (or a plain byte offset).

        Refuses a file that is shorter than the position or whose bytes
        before it changed (see the class docs; ``on_changed``).
        """
        digest = None
        offset = position
        if isinstance(position, dict):
            offset, digest = position.get("offset"), position.get("tail_sha256")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigurationError(
                f"from_textfile: position must be a byte offset >= 0, got {position!r}; "
                "pass a value that position() returned"
            )
        problem = self._changed(offset, digest)
        if problem is not None:
            if self.on_changed != "restart":
                raise ChangedFileError(
                    f"{self.display_name()}: {problem}; resuming would skip its data. Put "
                    "the original file back, or pass on_changed='restart' to from_textfile "
                    "to read this file again from the beginning"
                )
            logger.warning(
                "%s: %s; on_changed='restart': reading it again from the beginning",
                self.display_name(),
                problem,
            )
            offset = 0
        self._position = offset

    def _changed(self, offset: int, digest: str | None) -> str | None:
        """Why the file no longer matches ``offset`` (and its digest), or ``None``."""
        if self.path is None:
            return None
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return f"input file {self.path!r} is missing; the checkpointed position is {offset}"
        if size < offset:
            return (
                f"input file {self.path!r} has {size} bytes, less than the checkpointed "
                f"position {offset} (truncated or replaced since the checkpoint)"
            )
        if digest is not None and tail_digest(self.path, offset) != digest:
            return (
                f"input file {self.path!r} (now {size} bytes) differs before the checkpointed "
                f"position {offset} from the file the checkpoint read (replaced or rewritten)"
            )
        return None

    def _open(self) -> IO[bytes]:
        if self.path is not None:
            raw: IO[bytes] = open(self.path, "rb")  # noqa: SIM115
        else:
            assert self._given is not None
            raw = getattr(self._given, "buffer", self._given)
        raw.seek(self._position or 0)
        return raw

    async def run(self) -> None:
        self._raw = raw = self._open()
        delim = self.delimiter.encode(self.encoding)
        encoding = self.encoding
        pending = b""
        while not self.stopped:
            chunk = raw.read(_CHUNK)
            if not chunk:
                if self.stop_at_eof:
                    if pending:
                        # the last line has no delimiter: at the end of the file it is whole
                        await self._emit_lines([pending.decode(encoding)], [len(pending)])
                    break
                await asyncio.sleep(self.poll_interval)
                continue
            pending += chunk
            parts = pending.split(delim)
            pending = parts.pop()
            if not parts:
                continue
            if self.delimiter == "\n" and encoding.replace("-", "").lower() == "utf8":
                lines = [p.decode() + "\n" for p in parts]
            else:
                lines = [(p + delim).decode(encoding) for p in parts]
            await self._emit_lines(lines, [len(p) + len(delim) for p in parts])
            if self.stopped:
                break

    async def _emit_lines(self, lines: list[str], sizes: list[int]) -> None:
        """Emit ``lines`` (whose byte sizes are ``sizes``); the position follows each chunk."""

        def advance(k: int) -> None:
            self._position = (self._position or 0) + (sum(sizes[:k]) if k < len(sizes) else total)

        total = sum(sizes)
        while lines and not self.stopped:
            done = await self._emit_chunk(lines, advance)
            if done < len(lines):
                lines, sizes = lines[done:], sizes[done:]
                total = sum(sizes)
            else:
                return

    def close(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None and self.path is not None:
            raw.close()

    lag_unit = "bytes"

    def lag(self) -> dict[str, int] | None:
        """Bytes of the file after the position (``{"": n}``); None for an open stream."""
        if self.path is None:
            return None
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return None
        return {"": max(size - int(self._position or 0), 0)}

    def state_signature(self) -> str:
        return f"FromTextfile(path={self.path!r}, delimiter={self.delimiter!r})"


@Stream.register_api(staticmethod, attribute_name="filenames")
class Filenames(Source):
    """Emit the name of every file matching ``path``, and of each new one as it appears.

    ``path`` is a directory (all files in it) or a glob pattern.  Names are
    emitted in sorted order per poll.

    Position: the sorted list of the names already emitted; after
    ``seek(names)`` those are not emitted again.  The source is replayable
    (files that were not yet emitted are found again).

    >>> import os, tempfile
    >>> from rivermark.testing import wait_for
    >>> d = tempfile.mkdtemp()
    >>> for n in ("b.csv", "a.csv"):
    ...     _ = open(os.path.join(d, n), "w").write("x")
    >>> source = Stream.filenames(os.path.join(d, "*.csv"), poll_interval="5ms")
    >>> L = source.map(os.path.basename).sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: len(L) == 2); source.stop(); L
    ['a.csv', 'b.csv']
    """

    replayable = True

    def __init__(self, path: Any, poll_interval: Any = 0.1, **kwargs: Any) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigurationError(
                f"filenames: path must be a directory or a glob pattern, got {path!r}; "
                "pass e.g. 'data/*.csv'"
            )
        path = os.fspath(path)
        if "*" not in path and os.path.isdir(path):
            path = os.path.join(path, "*")
        self.path = path
        self.poll_interval = parse_interval(poll_interval, "filenames", "poll_interval")
        self.seen: set[str] = set()
        super().__init__(**kwargs)
        self._position = []

    def position(self) -> Any:
        return sorted(self.seen)

    def position_now(self) -> Any:
        return sorted(self.seen)

    def seek(self, position: Any) -> None:
        """Treat the names in ``position`` as already emitted."""
        if not isinstance(position, (list, tuple)):
            raise ConfigurationError(
                f"filenames: position must be a list of file names, got {position!r}; "
                "pass a value that position() returned"
            )
        self.seen = set(position)

    def _seen_first(self, names: list[str]) -> Callable[[int], None]:
        def advance(k: int) -> None:
            self.seen.update(names[:k])

        return advance

    async def run(self) -> None:
        while not self.stopped:
            names = sorted(set(glob.glob(self.path)) - self.seen)
            while names and not self.stopped:
                # the position moves past a name only once it has been processed
                done = await self._emit_chunk(names, self._seen_first(names))
                names = names[done:]
            if self.stopped:
                break
            await asyncio.sleep(self.poll_interval)

    def state_signature(self) -> str:
        return f"Filenames(path={self.path!r})"
