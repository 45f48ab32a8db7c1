"""``sink_to_textfile``: write records to a text file, with exact rollback on restore.

Checkpoint contract (see :mod:`rivermark.sinks.base`): ``pre_commit`` flushes
and fsyncs the file and returns ``{"path": ..., "length": n}``, the file's
size in bytes at the barrier; ``commit`` has nothing to do (the bytes are
already visible); ``restore(handle)`` truncates the file back to
``handle["length"]``, so the lines written after the checkpoint, which the
resumed job writes again, are not duplicated.  With no checkpoint
(``handle=None``) a file opened with ``mode="w"`` is truncated to empty and
one opened with ``mode="a"`` is left as it is.
"""

from __future__ import annotations

import logging
import os
from typing import IO, Any, ClassVar

from ..core.node import Stream
from ..core.refs import Metadata
from ..errors import ConfigurationError
from .basic import Sink

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

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> s = Stream()
    >>> with sink_to_file(path, s) as f:
    ...     s.emit("a"); s.emit("b")
    >>> open(path).read()
    'a\\nb\\n'
    """
    file = open(filename, mode=mode)  # returned to the caller, who closes it

    def write(text: str) -> None:
        file.write(prefix + text + suffix)
        if flush:
            file.flush()

    Sink(upstream, write)
    return file


@Stream.register_api(attribute_name="sink_to_textfile")
class SinkToTextfile(Stream):
    """Write ``str(x) + end`` to ``file`` for every record.

    ``file`` is a path or an open text file; ``mode`` (``"a"`` or ``"w"``)
    and ``open_kwargs`` are passed to :func:`open`.  Call :meth:`close` when
    done (after the sources have stopped).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> s = Stream()
    >>> sink = s.sink_to_textfile(path, mode="w")
    >>> s.emit("a"); s.emit(1)
    >>> sink.close()
    >>> open(path).read()
    'a\\n1\\n'
    """

    _graphviz_shape: ClassVar[str] = "trapezium"

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
        if isinstance(file, (str, os.PathLike)):
            self.path: str | None = os.fspath(file)
            # mode "w" truncates on the first write, not here: a job restoring
            # from a checkpoint truncates to the checkpoint's length instead.
            self._file = open(self.path, "a", **self.open_kwargs)  # noqa: SIM115
            self._truncate_pending = mode == "w"
        elif hasattr(file, "write"):
            self._file = file
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
        """The open file (``None`` after :meth:`close`)."""
        return self._file

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        if self._file is None:
            raise ConfigurationError(
                f"{self._display_name()}: received {x!r} after close(); "
                "stop the sources before closing the sink"
            )
        if self._truncate_pending:
            self._truncate_pending = False
            self._file.truncate(0)
        self._file.write(str(x) + self.end)
        return None

    # ------------------------------------------------------------ checkpoint sink contract
    def pre_commit(self, epoch: int) -> dict[str, Any]:
        """Flush and fsync; return the file's path and length in bytes."""
        f = self._require_file("pre_commit")
        if self._truncate_pending:
            self._truncate_pending = False
            f.truncate(0)
        f.flush()
        os.fsync(f.fileno())
        length = os.fstat(f.fileno()).st_size
        logger.debug("%s: pre-commit epoch %s at %d bytes", self._display_name(), epoch, length)
        return {"path": self.path, "length": length}

    def commit(self, epoch: int, handle: Any) -> None:
        """Nothing to do: the bytes written before the barrier are already durable."""

    def restore(self, handle: Any) -> None:
        """Truncate to the checkpoint's length (or to 0 for ``mode="w"`` without one)."""
        if handle is None:
            if self.mode != "w":
                return
            length = 0
        else:
            length = int(handle["length"])
        if self.path is None:
            raise ConfigurationError(
                f"{self._display_name()}: cannot restore a file given as an object without a "
                "path; pass the file name to sink_to_textfile"
            )
        if self._file is not None:
            self._file.close()
        with open(self.path, "r+b") as raw:
            size = os.fstat(raw.fileno()).st_size
            if size < length:
                raise ConfigurationError(
                    f"{self._display_name()}: {self.path!r} has {size} bytes, fewer than the "
                    f"{length} the checkpoint recorded; the file was changed outside the job"
                )
            raw.truncate(length)
            raw.flush()
            os.fsync(raw.fileno())
        self._file = open(self.path, "a", **self.open_kwargs)  # noqa: SIM115
        self._truncate_pending = False
        logger.info("%s: restored %r to %d bytes", self._display_name(), self.path, length)

    def _require_file(self, what: str) -> IO[str]:
        if self._file is None:
            raise ConfigurationError(f"{self._display_name()}: {what}() after close()")
        return self._file

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        if self._file is not None:
            try:
                self._file.flush()
            finally:
                self._file.close()
                self._file = None

    def state_signature(self) -> str:
        return f"SinkToTextfile(path={self.path!r})"
