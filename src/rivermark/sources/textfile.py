"""``Stream.from_textfile``: the records of a text file, following what is appended to it."""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
from typing import IO, Any, TypedDict, Unpack

from rivermark._fileid import fd_tail_digest, find_identity, identity, tail_digest
from rivermark.core.node import NodeOptions, Stream
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ChangedFileError, ConfigurationError, InputDecodeError
from rivermark.sources._lines import Codec, LineSplitter
from rivermark.sources._tail import Rewritten, Tail
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)


class FilePosition(TypedDict, total=False):
    """Where a file source is, for a file given by path (a file object's is its offset).

    ``offset`` and ``tail_sha256`` (the digest of the bytes before it) are
    always there; ``dev`` and ``ino`` name the file when it could be found,
    ``unterminated`` counts the bytes of a last line without its delimiter.
    """

    offset: int
    tail_sha256: str | None
    dev: int
    ino: int
    unterminated: int


__all__ = ["FromTextfile"]

_CHUNK = 1 << 16


@Stream.register_api(staticmethod, attribute_name="from_textfile")
class FromTextfile(Source[int | FilePosition]):
    """Emit the lines of a text file, and go on with the lines appended to it.

    ``f`` is a path or an open file.  Each record is one part of the file up
    to and including ``delimiter`` (as in streamz, the delimiter stays on the
    record).  A partial line at the end of the file is emitted only once its
    delimiter has arrived.  ``from_end=True`` skips what the file holds when
    the source is created.  ``stop_at_eof=True`` (a rivermark addition) ends
    the source at the end of the file instead of waiting for more lines, so
    a job over a finished file exits when it has read it; a last line
    without a delimiter is then emitted as it is (without one), as the
    final record.  Its bytes count as read, and the position records that it
    was unterminated: a later run that finds the delimiter after it goes on
    with the next line, one that finds the line continued refuses (with
    :class:`~rivermark.errors.ChangedFileError`) rather than emit the rest
    of that line as a record of its own.

    ``encoding`` is any codec that can be cut at its delimiter, including
    those with a byte-order mark (``"utf-16"``, ``"utf-32"``,
    ``"utf-8-sig"``: the mark is not part of the first record); a codec that
    cannot (``"utf-7"``, ``"iso2022_jp"``) is refused when the source is
    created.  ``errors`` is passed to ``bytes.decode`` as ``open()`` does:
    with ``"strict"`` (the default), an undecodable line raises
    :class:`~rivermark.errors.InputDecodeError` naming the file and the byte
    offset, or, with the node's ``on_error="skip"`` (or a callable, e.g. a
    dead-letter writer, which receives the line's bytes), that line is dropped
    and the others are emitted.  ``"replace"`` and ``"ignore"`` decode every
    line.

    Position: the byte offset just *after* the last emitted record, i.e. where
    the next record starts (:attr:`offset`).  The source is replayable:
    ``seek(position)`` makes the next run read from there.  For a file given
    by path, ``position()`` is ``{"offset": n, "tail_sha256": digest, "dev":
    d, "ino": i}``: the identity of the file being read (its open
    descriptor, which a rename does not change) and the digest of the (up to
    4 KiB) bytes before ``n`` as the source read them.  While running, the
    source notices a rotation (the path now names another file: it finishes
    the old one, then reads the new one from its start, as ``tail -F`` does)
    and a truncation or rewrite of the file it reads, even to a longer
    content (it reads it again from the start, with a WARNING): each read
    takes the bytes before its offset together with the new ones, in one
    read call, and goes on only if they are the bytes it read there.
    ``seek`` finds the file the position belongs to: the one at the path,
    or, after a rotation, the renamed one in the same directory (which it
    finishes before the one at the path); the source looks for it again
    when it starts if the file changed since.  A file now shorter than
    ``n`` (truncated) or whose bytes before ``n`` differ (replaced,
    rewritten) would otherwise be skipped silently, so it is refused with
    :class:`~rivermark.errors.ChangedFileError`, naming the file and both
    positions.  ``on_changed="restart"`` reads such a file again from the
    beginning instead (with a WARNING); the default is ``"refuse"``.

    >>> import os, pathlib, tempfile
    >>> from rivermark.testing import wait_for
    >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
    >>> _ = pathlib.Path(path).write_text("a\\nbb\\nc")
    >>> source = Stream.from_textfile(path, poll_interval="1ms")
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: len(L) == 2); source.stop()
    >>> L, source.offset
    (['a\\n', 'bb\\n'], 5)
    """

    replayable = True
    lag_unit = "bytes"

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
        errors: str = "strict",
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        self.stop_at_eof = stop_at_eof
        _check_options(on_changed, delimiter, errors)
        self.on_changed = on_changed
        self.errors = errors
        self._codec = Codec.for_encoding(encoding, delimiter, "from_textfile")
        self._given: IO[Any] | None = None
        if isinstance(f, (str, os.PathLike)):
            self.path: str | None = os.fspath(f)
        elif hasattr(f, "read"):
            self._given = f
            # optional: a user's file object may have no name
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
        #: the open file, when given as one
        self._raw: IO[bytes] | None = None
        #: the file followed by path, as read since the last seek (closed once the source ends)
        self._tail: Tail | None = None
        #: the file the position is in, when not the one at ``path`` (a rotated one)
        self._reading: str | None = None
        #: the identity (st_dev, st_ino) of the file open for reading
        self._ident: tuple[int, int] | None = None
        #: the byte length of the last record, emitted without its delimiter (0: none)
        self._unterminated = 0
        self._rotated = False
        #: the position :meth:`seek` resumed at, its offset and digest: checked again at start
        self._resume_check: tuple[Any, int, str] | None = None
        #: :meth:`stop_at`'s offset and the identity of its file (None: any file)
        self._until: tuple[int, tuple[int, int] | None] | None = None
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

    @property
    def _follows(self) -> bool:
        """Whether the source opens its file itself (by path): identity and rotation apply."""
        return self.path is not None and self._given is None

    def position(self) -> int | FilePosition:
        """``{"offset", "tail_sha256", "dev", "ino"}`` for a path; the offset for a file object."""
        offset = self.offset
        if self.path is None:
            return offset
        tail = self._tail
        if tail is not None and self._follows:
            # the bytes as read, not as the file holds them now: a file rewritten since
            # must not pass for the one this offset was read in
            digest = tail.digest(offset)
            if digest is None and not tail.closed:
                digest = fd_tail_digest(tail.fd, offset)
            ident: tuple[int, int] | None = tail.ident
        else:
            where = self._reading or self.path
            digest = tail_digest(where, offset)
            try:
                ident = identity(os.stat(where))
            except OSError:
                ident = None
        pos: FilePosition = {"offset": offset, "tail_sha256": digest}
        if ident is not None:
            pos["dev"], pos["ino"] = ident
        if self._unterminated:
            pos["unterminated"] = self._unterminated
        return pos

    def seek(self, position: int | FilePosition) -> None:
        """Resume at a value :meth:`position` returned (or a plain byte offset).

        Finds the file the position belongs to and refuses a file that is
        shorter than the position or whose bytes before it changed (see the
        class docs; ``on_changed``).
        """
        offset, digest, ident, unterminated = _parse_position(position)
        self._tail, self._resume_check = None, None
        self._reading = self._rotated_file(offset, digest, ident)
        problem = None if self._reading else self._changed(offset, digest)
        self._unterminated = unterminated
        if problem is None and digest is None and offset:
            # a position without the digest a job's carries: written by hand (write_savepoint)
            self.check_position(position)
        if problem is not None:
            self._refuse_or_restart(problem)
            offset, self._unterminated = 0, 0
        elif digest is not None and offset:
            self._resume_check = (position, offset, digest)
        self._position = offset
        self._check_continued(offset)

    def check_position(self, position: int | FilePosition) -> None:
        """Refuse a position inside a line of the file, or past its end (where it is readable).

        A position a job wrote is where a line starts (or just after a last
        line emitted without its delimiter: ``"unterminated"``); one written
        by hand may not be, and the first record would be a fragment of a
        line.  ``write_savepoint`` asks this of every position it is given,
        and ``seek`` of one without the digest a job's position carries.  A
        file given as an open file object, or not readable here, is not
        checked.
        """
        offset, _, _, unterminated = _parse_position(position)
        where = self._reading or self.path
        if where is None or not self._follows:
            return
        problem = _not_a_line_start(where, self._codec, offset - unterminated, offset)
        if problem is not None:
            raise ConfigurationError(
                f"{self.display_name()}: position {offset} {problem}; give the byte offset where "
                "a line starts (as {'offset': n}), or a position that read() gave"
            )

    def _refuse_or_restart(self, problem: str) -> None:
        """The file no longer holds the position: refuse, or (``on_changed="restart"``) warn."""
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

    def stop_at(self, position: int | FilePosition) -> None:
        """End at byte ``position`` of the file it belongs to, as at its end with ``stop_at_eof``.

        The position names the file by its identity (device and inode): a
        rotated file read before it is read to its end.  The records before
        the offset are emitted, none after it (a last line that the position
        records as emitted without its delimiter is emitted so as well).
        """
        offset, _, ident, _ = _parse_position(position)
        self._until = (offset, ident)

    def stop_at_input_end(self) -> None:
        """End at the end of the file, as with ``stop_at_eof=True``."""
        self.stop_at_eof = True

    def _stops_in_this_file(self) -> bool:
        """Whether :meth:`stop_at`'s position is in the file being read."""
        until = self._until
        return until is not None and (until[1] is None or until[1] == self._ident)

    def _read_to(self) -> int:
        """The offset the file is read to (where the next read starts)."""
        if self._tail is not None:
            return self._tail.end
        assert self._raw is not None
        return self._raw.tell()

    def _read_size(self) -> int:
        """How much the next read takes: a chunk, or what is left before :meth:`stop_at`'s position."""
        if self._until is None or not self._stops_in_this_file():
            return _CHUNK
        return max(0, min(_CHUNK, self._until[0] - self._read_to()))

    async def _end_at_stop(self) -> bool:
        """At :meth:`stop_at`'s offset: the last record, then the end; short of it: refuse."""
        assert self._until is not None
        at, until = self._read_to(), self._until[0]
        if at < until:
            raise ChangedFileError(
                f"{self.display_name()}: input file {self._reading or self.path!r} ends at byte "
                f"{at}, before the position {until} this source is to stop at (truncated or "
                "replaced since that position was read)"
            )
        await self._emit_last_line()
        return True

    def _rotated_file(
        self, offset: int, digest: str | None, ident: tuple[int, int] | None
    ) -> str | None:
        """The renamed file (same directory) the position belongs to, if the path is another."""
        if ident is None or not self._follows:
            return None
        assert self.path is not None
        try:
            if identity(os.stat(self.path)) == ident:
                return None
        except OSError:
            pass
        found = find_identity(os.path.dirname(self.path), ident)
        if found is None or tail_digest(found, offset) != digest:
            return None
        logger.info(
            "%s: the checkpoint's file was rotated to %r: finishing it from byte %d, then "
            "reading %r from its start",
            self.display_name(),
            found,
            offset,
            self.path,
        )
        return found

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

    # ------------------------------------------------------------------ reading
    def _open(self, where: str | None) -> None:
        """Open the file to read (or take the given one) at the position; resolve the codec."""
        codec = self._codec
        if where is not None:
            tail = self._tail = Tail(where)
            self._ident = tail.ident
            if codec.boms:
                skip, codec = codec.for_file(tail.head(codec.bom_length))
                self._position = max(self.offset, skip)
            tail.start_at(self.offset)
        else:
            assert self._given is not None
            # optional: a text file object has a binary buffer, a binary one does not
            raw: IO[bytes] = getattr(self._given, "buffer", self._given)
            if codec.boms:
                raw.seek(0)
                skip, codec = codec.for_file(raw.read(codec.bom_length))
                self._position = max(self.offset, skip)
            raw.seek(self.offset)
            self._raw = raw
        self._splitter = LineSplitter(codec.delimiter, codec.unit)
        self._decoder = codec.decoder
        self._fast = codec.delimiter == b"\n" and codec.decoder == "utf-8"
        self._fast = self._fast and self.errors == "strict"

    def _start_reading(self) -> None:
        """Open the file the position is in, as it is now (it may have changed since seek)."""
        if not self._follows:
            self._open(None)
            return
        self._open(self._reading or self.path)
        resume, self._resume_check = self._resume_check, None
        if resume is None:
            return
        position, offset, digest = resume
        if self.offset != offset or self._digest_now(offset) == digest:
            return
        # rotated or rewritten between seek() and start: look for the position's file again
        logger.info(
            "%s: the input changed since the position was restored; looking for its file again",
            self.display_name(),
        )
        self.close()
        self.seek(position)
        self._resume_check = None
        self._open(self._reading or self.path)
        if self.offset == offset and self._digest_now(offset) != digest:
            where = self._reading or self.path
            self.close()
            self._refuse_or_restart(
                f"input file {where!r} differs before the checkpointed position {offset} "
                "from the file the checkpoint read (it changed while the source started)"
            )
            self._position, self._unterminated = 0, 0
            self._open(where)

    def _digest_now(self, offset: int) -> str | None:
        assert self._tail is not None
        return self._tail.digest(offset)

    async def run(self) -> None:
        self._start_reading()
        while not self.stopped:
            try:
                chunk = self._read()
            except Rewritten as e:
                self._read_again(str(e))
                continue
            if not chunk:
                if await self._at_end():
                    break
                continue
            if self._unterminated:
                chunk = self._rejoin(chunk)
            parts = self._splitter.feed(chunk)
            if parts:
                await self._emit_parts(parts)

    def _read(self) -> bytes:
        """The next bytes of the file (raises :class:`Rewritten` for a file changed under it)."""
        if self._tail is not None:
            # the bytes before where it was read to come with the new ones, in one read:
            # a truncation and rewrite at any moment cannot pass for an append
            return self._tail.read(self._read_size(), keep=self.offset)
        assert self._raw is not None
        return self._raw.read(self._read_size())

    def _read_again(self, problem: str) -> None:
        """The open file was truncated or rewritten: read it again from its start."""
        where = self._reading or self.path
        logger.warning(
            "%s: input file %r %s while being read; reading it again from the start",
            self.display_name(),
            where,
            problem,
        )
        self.close()
        self._position, self._unterminated = 0, 0
        self._open(where)

    def _rejoin(self, chunk: bytes) -> bytes:
        """After a last line emitted unterminated: skip its delimiter, or refuse its continuation."""
        delim = self._splitter.delimiter
        if chunk[: len(delim)] != delim:
            raise self._continued()
        self._unterminated = 0
        self._position = self.offset + len(delim)
        return chunk[len(delim) :]

    def _continued(self) -> ChangedFileError:
        return ChangedFileError(
            f"{self.display_name()}: the last line of {self._reading or self.path!r} "
            f"({_bytes(self._unterminated)} before position {self.offset}) was emitted "
            "without its delimiter at the end of an earlier run, and the file has been "
            "continued since; reading on would cut that line in two records. Run the job "
            "from scratch to read the file again, or end every line with the delimiter "
            "before a stop_at_eof run reads it"
        )

    def _check_continued(self, offset: int) -> None:
        """At ``seek``: refuse at once a last line emitted unterminated that was continued."""
        where = self._reading or self.path
        if not self._unterminated or not self._follows or where is None:
            return
        with open(where, "rb") as f:
            _, codec = self._codec.for_file(f.read(self._codec.bom_length))
            f.seek(offset)
            after = f.read(len(codec.delimiter))
        if after and after != codec.delimiter[: len(after)]:
            raise self._continued()

    async def _at_end(self) -> bool:
        """At the end of the file: move to a rotated file's successor, end, or wait and check."""
        assert self.path is not None or not self._follows
        if self._stops_in_this_file():
            return await self._end_at_stop()
        if (self._reading is not None or self._rotated) and os.path.exists(self.path or ""):
            await self._emit_last_line()
            self._switch()
            return False
        if self.stop_at_eof:
            await self._emit_last_line()
            return True
        await asyncio.sleep(self.poll_interval)
        if self._follows:
            self._check_rotated()
        return False

    async def _emit_last_line(self) -> None:
        """Emit the pending bytes (a last line without its delimiter) as the final record."""
        if not self._splitter.pending:
            return
        data = self._splitter.take_pending()
        lines, dropped = self._decode([data], with_delimiter=False)
        if dropped:
            self._position = self.offset + len(data)
        else:
            await self._emit_lines(lines, [len(data)])
        self._unterminated = len(data)

    def _switch(self) -> None:
        """The rotated file is read: go on with the file now at the path, from its start."""
        old, self._reading, self._rotated = self._reading or self.path, None, False
        self.close()
        self._position, self._unterminated = 0, 0
        logger.info("%s: finished rotated file %r; reading %r", self.display_name(), old, self.path)
        self._open(self.path)

    def _check_rotated(self) -> None:
        """Notice the path naming another file (rotation); truncation is noticed by each read."""
        assert self.path is not None
        try:
            self._rotated = identity(os.stat(self.path)) != self._ident
        except OSError:  # moved away, the new file not there yet: finish the old one
            self._rotated = False

    def _decode(self, parts: list[bytes], with_delimiter: bool = True) -> tuple[list[object], bool]:
        """The text of each record, ``None`` for one dropped by the error policy; any dropped."""
        end = self.delimiter if with_delimiter else ""
        if self._fast and with_delimiter:
            try:
                return [p.decode() + "\n" for p in parts], False
            except UnicodeDecodeError:
                pass
        decoder, errors = self._decoder, self.errors
        out: list[Any] = []
        start, dropped = self.offset, False
        for p in parts:
            try:
                out.append(p.decode(decoder, errors) + end)
            except UnicodeDecodeError as e:
                self._undecodable(p, start + e.start, e)
                out.append(None)
                dropped = True
            start += len(p) + len(self._splitter.delimiter)
        return out, dropped

    def _undecodable(self, data: bytes, at: int, e: UnicodeDecodeError) -> None:
        """Apply the node's ``on_error`` policy to a line that does not decode."""
        err = InputDecodeError(
            f"{self.display_name()}: cannot decode the line at byte {at} of "
            f"{self._reading or self.path or self._given!r} as {self.encoding!r} ({e.reason}); "
            "pass errors='replace' or 'ignore' to from_textfile, or on_error='skip' (or a "
            "dead-letter callable) to drop such lines"
        )
        if self.on_error is None or self.on_error == "raise":
            raise err from None
        self._user_error(data, err)

    async def _emit_parts(self, parts: list[bytes]) -> None:
        k = len(self._splitter.delimiter)
        lines, dropped = self._decode(parts)
        sizes = [len(p) + k for p in parts]
        if dropped:
            lines, sizes = _drop_undecodable(lines, sizes)
            if not lines:
                self._position = self.offset + sum(sizes)
                return
        await self._emit_lines(lines, sizes)

    async def _emit_lines(self, lines: list[object], sizes: list[int]) -> None:
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
        # a given file is the caller's to close; a followed one's bytes as read stay known
        self._raw = None
        if self._tail is not None:
            self._tail.close()

    def lag(self) -> dict[str, int] | None:
        """Bytes of the file after the position (``{"": n}``); None for an open stream."""
        if self.path is None:
            return None
        try:
            tail, raw = self._tail, self._raw
            size = None
            if tail is not None and not tail.closed:
                size = tail.size()
            elif raw is not None:
                size = os.fstat(raw.fileno()).st_size
            if size is None:
                size = os.path.getsize(self._reading or self.path)
        except (OSError, ValueError):
            return None
        return {"": max(size - self.offset, 0)}

    def state_signature(self) -> str:
        return f"FromTextfile(path={self.path!r}, delimiter={self.delimiter!r})"


def _bytes(n: int) -> str:
    return f"{n} byte" if n == 1 else f"{n} bytes"


def _parse_position(position: object) -> tuple[int, str | None, tuple[int, int] | None, int]:
    """Offset, digest, file identity and unterminated length of a position (or a byte offset)."""
    digest, ident, unterminated = None, None, 0
    offset = position
    if isinstance(position, dict):
        offset, digest = position.get("offset"), position.get("tail_sha256")
        if isinstance(position.get("dev"), int) and isinstance(position.get("ino"), int):
            ident = (position["dev"], position["ino"])
        unterminated = position.get("unterminated", 0)
    if (
        isinstance(offset, bool)
        or not isinstance(offset, int)
        or offset < 0
        or not isinstance(unterminated, int)
    ):
        raise ConfigurationError(
            f"from_textfile: position must be a byte offset >= 0, got {position!r}; "
            "pass a value that position() returned"
        )
    return offset, digest, ident, unterminated


#: how far around a position :func:`_not_a_line_start` looks for the lines' starts
_AROUND = 1 << 16


def _not_a_line_start(path: str, codec: Codec, start: int, offset: int) -> str | None:
    """Why byte ``start`` of ``path`` is not where a record starts (``offset``: the position).

    ``None`` when it is (the start of the file or of its text after a
    byte-order mark, or just after a delimiter), or when the file cannot be
    read here.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            skip, codec = codec.for_file(f.read(codec.bom_length))
            if offset > size:
                return (
                    f"is past the end of {path!r} ({size} bytes): the source would wait for "
                    "bytes that are not there"
                )
            k = len(codec.delimiter)
            if start < 0 or start in (0, skip):
                return None if start >= 0 else f"is not a position in {path!r}"
            if start >= skip + k and (start - skip) % codec.unit == 0:
                f.seek(start - k)
                if f.read(k) == codec.delimiter:
                    return None
            lo = max(skip, start - _AROUND)
            f.seek(lo)
            data = f.read(min(size, start + _AROUND) - lo)
    except OSError:
        return None
    starts = _line_starts(data, lo, skip, codec)
    before = max((b for b in starts if b < start), default=skip if lo == skip else None)
    after = min((b for b in starts if b > start), default=None)
    around = " and ".join(str(b) for b in (before, after) if b is not None)
    near = f" (lines start at bytes {around})" if around else ""
    return f"is inside a line of {path!r}{near}: the first record would be a fragment of it"


def _line_starts(data: bytes, base: int, skip: int, codec: Codec) -> list[int]:
    """The offsets just after each delimiter in ``data`` (read from byte ``base``)."""
    out, i = [], data.find(codec.delimiter)
    while i >= 0:
        if (base + i - skip) % codec.unit == 0:
            out.append(base + i + len(codec.delimiter))
        i = data.find(codec.delimiter, i + 1)
    return out


def _drop_undecodable(lines: list[object], sizes: list[int]) -> tuple[list[object], list[int]]:
    """Leave out the lines dropped by the error policy; their bytes join a neighbour's size.

    A dropped line's bytes count with the kept line before it (the position
    then passes both together); dropped lines before the first kept one are
    returned as a leading size with no line, which the caller adds at once.
    """
    kept: list[Any] = []
    kept_sizes: list[int] = []
    lead = 0
    for line, size in zip(lines, sizes):
        if line is not None:
            kept.append(line)
            kept_sizes.append(size)
        elif kept_sizes:
            kept_sizes[-1] += size
        else:
            lead += size
    if lead and kept:
        kept_sizes[0] += lead
    elif lead:
        kept_sizes = [lead]
    return kept, kept_sizes


def _check_options(on_changed: str, delimiter: Any, errors: Any) -> None:
    """Refuse a bad ``on_changed``, ``delimiter`` or ``errors`` with one line each."""
    if on_changed not in ("refuse", "restart"):
        raise ConfigurationError(
            f"from_textfile: on_changed must be 'refuse' or 'restart', got {on_changed!r}; "
            "'restart' reads a file that was truncated or replaced since the checkpoint "
            "again from the beginning"
        )
    if not isinstance(delimiter, str) or not delimiter:
        raise ConfigurationError(
            f"from_textfile: delimiter must be a non-empty string, got {delimiter!r}; "
            "pass e.g. delimiter='\\n'"
        )
    try:
        codecs.lookup_error(errors)
    except (LookupError, TypeError):
        raise ConfigurationError(
            f"from_textfile: errors must name a decoding error handler, got {errors!r}; "
            "pass 'strict' (the default), 'replace' or 'ignore'"
        ) from None
