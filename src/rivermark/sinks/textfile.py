"""``sink_to_textfile``: write records to a text file, with exact rollback on restore.

Checkpoint contract (see :mod:`rivermark.sinks.base`): ``pre_commit`` flushes
and fsyncs the file and returns ``{"path": ..., "realpath": ..., "length": n,
"tail_sha256": ...}``: the file, its size in bytes at the barrier, and a
digest of the (up to 4 KiB) bytes before that size; ``commit`` has nothing to
do (the bytes are already visible); ``restore(handle)`` truncates the file
back to ``handle["length"]``, so the lines written after the checkpoint,
which the resumed job writes again, are not duplicated.  With no checkpoint
(``handle=None``) a file opened with ``mode="w"`` is truncated to empty and
one opened with ``mode="a"`` is left as it is; a job refuses to start on a
store without checkpoints when such a file already has content
(``unaccounted_output``), unless it starts from scratch: then ``start_over``
truncates the file to empty, whatever its mode.

Before it truncates anything, ``restore`` checks that the handle belongs to
this file: the same path, at least ``length`` bytes, and the same bytes
before ``length``.  Otherwise (the app now writes another file, or the file
was replaced or rewritten outside the job) it refuses with
:class:`~rivermark.errors.ChangedFileError` and changes nothing.

While a job runs (from ``restore`` to :meth:`SinkToTextfile.close`) the sink
holds an exclusive lock (``flock``) on its file; a second job writing the
same file is refused with :class:`~rivermark.errors.FileInUseError`, naming
the process that holds it.  A device or pipe (``/dev/null``) is neither
checked nor locked.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import threading
from typing import IO, TYPE_CHECKING, Any, ClassVar, TypedDict

from rivermark._fileid import lock_holder, tail_digest
from rivermark.core.node import Stream
from rivermark.core.refs import Metadata
from rivermark.errors import ChangedFileError, ConfigurationError, FileInUseError
from rivermark.sinks.base import WrittenOutput
from rivermark.sinks.basic import Sink

if TYPE_CHECKING:
    from rivermark.sinks.base import CheckpointedSink, ReadBackSink


class FileHandle(TypedDict, total=False):
    """A file sink's handle: its file and its length at ``pre_commit``.

    ``path`` and ``length`` are always there; ``realpath`` and
    ``tail_sha256`` (the digest of the bytes before ``length``) for a file
    with a name.
    """

    path: str | None
    length: int
    realpath: str
    tail_sha256: str | None


logger = logging.getLogger(__name__)

__all__ = ["SinkToTextfile", "sink_to_file"]


def sink_to_file(
    filename: str | os.PathLike[str],
    upstream: Stream,
    mode: str = "w",
    prefix: str = "",
    suffix: str = "\n",
    flush: bool = False,
) -> IO[str]:
    """Open ``filename`` and write ``prefix + x + suffix`` to it for every string ``x``.

    streamz's ``streamz.sources.sink_to_file``: returns the open file, which the
    caller closes (it is a context manager).  It takes no part in checkpoints;
    use :class:`SinkToTextfile` for that.

    >>> import os, pathlib, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> s = Stream()
    >>> with sink_to_file(path, s) as f:
    ...     s.emit("a"); s.emit("b")
    >>> pathlib.Path(path).read_text()
    'a\\nb\\n'
    """
    file = open(filename, mode=mode)  # noqa: SIM115 - returned to the caller, who closes it

    def write(text: str) -> None:
        file.write(prefix + text + suffix)
        if flush:
            file.flush()

    Sink(upstream, write)
    return file


def _is_regular_file(path: str) -> bool:
    """A regular file (or none yet); not a device such as ``/dev/null`` or a pipe."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True


@Stream.register_api(attribute_name="sink_to_textfile")
class SinkToTextfile(Stream):
    """Write ``str(x) + end`` to ``file`` for every record.

    ``file`` is a path or an open text file; ``mode`` (``"a"`` or ``"w"``)
    and ``open_kwargs`` are passed to :func:`open`.  Call :meth:`close` when
    done (after the sources have stopped).

    >>> import os, pathlib, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> s = Stream()
    >>> sink = s.sink_to_textfile(path, mode="w")
    >>> s.emit("a"); s.emit(1)
    >>> sink.close()
    >>> pathlib.Path(path).read_text()
    'a\\n1\\n'
    """

    _graphviz_shape: ClassVar[str] = "trapezium"
    #: a handle is the file's length at pre_commit: later lines are never part of it
    seals_epoch_at_pre_commit: ClassVar[bool] = True

    def __init__(
        self,
        upstream: Stream,
        file: Any,
        end: str = "\n",
        mode: str = "a",
        **open_kwargs: Any,
    ) -> None:
        kwargs = {
            k: open_kwargs.pop(k) for k in ("stream_name", "name", "on_error") if k in open_kwargs
        }
        if not isinstance(end, str):
            raise ConfigurationError(
                f"sink_to_textfile: end must be a string, got {end!r}; pass e.g. end='\\n'"
            )
        if mode not in ("a", "w"):
            raise ConfigurationError(
                f"sink_to_textfile: mode must be 'a' or 'w', got {mode!r}; pass mode='a' (append) "
                "or mode='w' (truncate on start)"
            )
        self.end = end
        self.mode = mode
        self.open_kwargs = dict(open_kwargs)
        self._file: IO[str] | None
        self._truncate_pending = False
        self._lock: IO[bytes] | None = None
        self._closed = False
        #: held while the file is opened or closed: records emitted from a thread of the
        #: caller's and the job's checkpoint on its loop may both be the first to need it
        self._opening = threading.Lock()
        if isinstance(file, (str, os.PathLike)):
            self.path: str | None = os.fspath(file)
            # the file is opened on first use, not here: a job refused before it
            # restores (its checkpoint directory is locked) leaves it untouched.
            # Mode "w" truncates on the first write: a job restoring from a
            # checkpoint truncates to the checkpoint's length instead.
            self._file = None
            self._truncate_pending = mode == "w"
        elif hasattr(file, "write"):
            self._file = file
            # optional: a user's file object may have no name
            self.path = getattr(file, "name", None)
            if not isinstance(self.path, str):
                self.path = None
        else:
            raise ConfigurationError(
                f"sink_to_textfile: file must be a path or an open text file, got {file!r}; "
                "pass e.g. 'out.txt'"
            )
        Stream.__init__(self, upstream, **kwargs)

    @property
    def file(self) -> IO[str] | None:
        """The open file (``None`` before the first use and after :meth:`close`)."""
        return self._file

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        f = self._file
        if f is None:
            if self._closed:
                raise ConfigurationError(
                    f"{self.display_name()}: received {x!r} after close(); "
                    "stop the sources before closing the sink"
                )
            f = self._require_file("update")
        if self._truncate_pending:
            self._truncate_pending = False
            f.truncate(0)
        f.write(self.output_text(x))
        return None

    def output_text(self, x: Any) -> str:
        """What the sink writes for ``x``: ``str(x) + end``."""
        return str(x) + self.end

    # ------------------------------------------------------------ checkpoint sink contract
    def pre_commit(self, epoch: int) -> FileHandle:
        """Flush and fsync; return the file's path and length in bytes."""
        f = self._require_file("pre_commit")
        if self._truncate_pending:
            self._truncate_pending = False
            f.truncate(0)
        f.flush()
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):  # a device or pipe: nothing to make durable
            return {"path": self.path, "length": 0}
        os.fsync(f.fileno())
        length = os.fstat(f.fileno()).st_size
        logger.debug("%s: pre-commit epoch %s at %d bytes", self.display_name(), epoch, length)
        if self.path is None:
            return {"path": None, "length": length}
        return {
            "path": self.path,
            "realpath": os.path.realpath(self.path),
            "length": length,
            "tail_sha256": tail_digest(self.path, length),
        }

    def commit(self, epoch: int, handle: FileHandle) -> None:
        """Nothing to do: the bytes written before the barrier are already durable."""

    def written_between(self, first: FileHandle, last: FileHandle) -> WrittenOutput:
        """The text written between handles ``first`` and ``last``: the bytes between their lengths.

        ``ValueError`` when the file is unknown or was changed since ``last``
        (its bytes before that length differ from the digest it records).
        """
        path = last.get("realpath") or last.get("path")
        if not isinstance(path, str):
            raise ValueError("the live sink writes to an open file without a path")
        if (first.get("realpath") or first.get("path")) != path:
            raise ValueError("the live sink wrote another file at each checkpoint")
        start, end = int(first["length"]), int(last["length"])
        expected = last.get("tail_sha256")
        if expected is not None and tail_digest(path, end) != expected:
            raise ValueError(
                f"{path!r} changed since it was written (its bytes before {end} differ)"
            )
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        encoding = self.open_kwargs.get("encoding") or "utf-8"
        return WrittenOutput(data.decode(encoding, "replace"), str(last.get("path")))

    def restore(self, handle: FileHandle | None) -> None:
        """Lock the file; check the handle is this file's; truncate to its length.

        Without a checkpoint (``handle=None``) the file is truncated to 0 for
        ``mode="w"`` and left as it is for ``mode="a"``.
        """
        if self.path is None:
            if handle is None and self.mode != "w":
                return
            raise ConfigurationError(
                f"{self.display_name()}: cannot restore a file given as an object without a "
                "path; pass the file name to sink_to_textfile"
            )
        regular = _is_regular_file(self.path)
        if regular:
            self._take_lock()
        try:
            if handle is None:
                if self.mode != "w":
                    return
                length = 0
            else:
                length = int(handle["length"])
                if regular:
                    self._check_handle(handle, length)
            with self._opening:
                if self._file is not None:
                    self._file.close()
                    self._file = None
                if regular:
                    with open(self.path, "r+b") as raw:
                        self._warn_dropped(os.fstat(raw.fileno()).st_size, length)
                        raw.truncate(length)
                        raw.flush()
                        os.fsync(raw.fileno())
                self._file = open(self.path, "a", **self.open_kwargs)  # noqa: SIM115
        except BaseException:
            self._release_lock()
            raise
        self._truncate_pending = False
        logger.info("%s: restored %r to %d bytes", self.display_name(), self.path, length)

    def start_over(self) -> None:
        """Lock the file and truncate it to empty: the job starts from scratch.

        The bytes discarded are logged.
        """
        if self.path is not None and _is_regular_file(self.path):
            self._take_lock()
        f = self._require_file("start_over")
        try:
            f.flush()
            size = os.fstat(f.fileno()).st_size
            f.truncate(0)
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            raise ConfigurationError(
                f"{self.display_name()}: cannot start {self.path or f!r} over ({e}); "
                "from_scratch needs an output that can be truncated: pass a file name"
            ) from e
        self._truncate_pending = False
        logger.warning(
            "%s: starting over from scratch: emptied %r (%d bytes discarded)",
            self.display_name(),
            self.path,
            size,
        )

    def _warn_dropped(self, size: int, length: int) -> None:
        """Say how many bytes after the checkpoint's length a restore truncates away."""
        if size > length:
            logger.warning(
                "%s: truncating %r from %d to the checkpoint's %d bytes: %d bytes after the "
                "checkpoint are discarded (written by the job after its last checkpoint, or "
                "appended to the file since; the job writes its own again)",
                self.display_name(),
                self.path,
                size,
                length,
                size - length,
            )

    def unaccounted_output(self) -> str | None:
        """The file's size if it has content that mode ``"a"`` would append to."""
        if self.mode == "w" or self._closed:
            return None
        try:
            if self._file is not None:
                size = os.fstat(self._file.fileno()).st_size
            elif self.path is not None:
                size = os.path.getsize(self.path)
            else:
                return None
        except FileNotFoundError:
            return None
        if size == 0:
            return None
        return f"{self.display_name()}: {self.path!r} already holds {size} bytes"

    def _check_handle(self, handle: FileHandle, length: int) -> None:
        """Refuse a handle that does not belong to this file (see module docs)."""
        assert self.path is not None
        name = self.display_name()
        recorded = handle.get("realpath") or handle.get("path")
        here = os.path.realpath(self.path)
        if isinstance(recorded, str) and os.path.realpath(recorded) != here:
            raise ChangedFileError(
                f"{name}: the checkpoint's output file is {recorded!r}, but this sink writes "
                f"{self.path!r}; resuming would truncate that file to the checkpoint's {length} "
                "bytes. Write to the checkpoint's file again, or use a new checkpoint directory"
            )
        size = os.path.getsize(self.path) if os.path.exists(self.path) else None
        if size is None or size < length:
            got = "is missing" if size is None else f"has {size} bytes"
            raise ChangedFileError(
                f"{name}: {self.path!r} {got}, fewer than the {length} the checkpoint "
                "recorded; the file was changed outside the job. Put the job's file back, or "
                "use a new checkpoint directory"
            )
        expected = handle.get("tail_sha256")
        if expected is not None and tail_digest(self.path, length) != expected:
            raise ChangedFileError(
                f"{name}: {self.path!r} is not the file the checkpoint wrote: its bytes before "
                f"position {length} differ (replaced or rewritten outside the job). Put the "
                "job's file back, or use a new checkpoint directory"
            )

    def _take_lock(self) -> None:
        """Hold an exclusive ``flock`` on the file until :meth:`close`."""
        if self._lock is not None:
            return
        assert self.path is not None
        lock = open(self.path, "ab")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(lock.fileno())
            lock.close()
            raise FileInUseError(
                f"{self.display_name()}: {self.path!r} is being written by another job "
                f"({holder}); two jobs writing one file would mix their output. Stop that "
                "job first, or write to another file"
            ) from None
        self._lock = lock

    def _release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # releases the flock

    def _require_file(self, what: str) -> IO[str]:
        """The open file, opened now on first use (once, whichever thread needs it first);
        refused after :meth:`close`."""
        f = self._file
        if f is None:
            with self._opening:
                f = self._file
                if f is None:
                    if self._closed or self.path is None:
                        raise ConfigurationError(f"{self.display_name()}: {what}() after close()")
                    f = self._file = open(self.path, "a", **self.open_kwargs)  # noqa: SIM115
        return f

    def close(self) -> None:
        """Flush and close the file and release its lock (idempotent)."""
        with self._opening:
            self._closed = True
            f, self._file = self._file, None
        try:
            if f is not None:
                try:
                    f.flush()
                finally:
                    f.close()
        finally:
            self._release_lock()

    def state_signature(self) -> str:
        return f"SinkToTextfile(path={self.path!r})"


if TYPE_CHECKING:  # the type checker holds the sink to the contracts, with its handle type
    _checkpointed: type[CheckpointedSink[FileHandle]] = SinkToTextfile
    _reads_back: type[ReadBackSink[FileHandle]] = SinkToTextfile
