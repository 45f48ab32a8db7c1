"""Side outputs: where ``rivermark replay`` writes what a graph's sinks would have written.

:func:`put_in_place_of` puts a :class:`SideOutput` where a sink was: the
same upstreams (and downstreams), the sink's id as its ``name=``, and a file
of its own that receives, for every record, the text the sink would have
written: its ``output_text(x)`` (:class:`~.base.TextOutputSink`:
``sink_to_textfile``, ``to_kafka``), else ``str(x)`` and a newline.  The
sink itself is left out of the graph and never called: a ``sink(func)``'s
``func`` does not run, a file sink writes nothing, a Kafka sink produces
nothing.

A sink that is part of a job's fingerprint (a checkpointed sink, or a
stateful one such as ``sink_to_list``) is replaced by a :class:`StandIn`:
a checkpointed sink with the same id and signature, so a checkpoint of the
live job restores into the changed graph exactly as into the real one.  Its
``restore`` receives the live sink's handle and keeps it
(:attr:`StandIn.live_handle`) without touching the live output; its
``pre_commit`` returns the side file's own length.

>>> import os, pathlib, tempfile
>>> from rivermark import Stream
>>> s = Stream()
>>> sink = s.map(str.upper).sink(print)
>>> side = put_in_place_of(sink, "out", os.path.join(tempfile.mkdtemp(), "out.txt"))
>>> s.emit("a"); s.emit("b"); side.close()
>>> pathlib.Path(side.path).read_text(), side.records
('A\\nB\\n', 2)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, ClassVar

from rivermark.core.node import Stream
from rivermark.core.refs import Metadata
from rivermark.errors import ConfigurationError
from rivermark.sinks.base import TextOutputSink
from rivermark.sinks.textfile import FileHandle

if TYPE_CHECKING:
    from rivermark.sinks.base import CheckpointedSink

__all__ = ["SideOutput", "StandIn", "put_in_place_of"]


def _line(x: Any) -> str:
    """The text of a record for a sink that does not say what it writes: ``str(x)``, a newline."""
    return f"{x}\n"


class SideOutput(Stream):
    """Write ``text(x)`` to ``path`` for every record (in place of a sink, see module docs)."""

    _graphviz_shape: ClassVar[str] = "trapezium"

    def __init__(
        self, upstreams: list[Stream], path: str, text: Callable[[Any], str], name: str
    ) -> None:
        self.path = path
        self.text = text
        #: the records written so far
        self.records = 0
        self._file: IO[str] | None = open(path, "w", encoding="utf-8")  # noqa: SIM115 - close()
        Stream.__init__(self, upstreams=upstreams, name=name)

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        if self._file is None:
            raise ConfigurationError(f"{self.display_name()}: received {x!r} after close()")
        self._file.write(self.text(x))
        self.records += 1

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        f, self._file = self._file, None
        if f is not None:
            f.close()


class StandIn(SideOutput):
    """A :class:`SideOutput` that takes a checkpointed (or stateful) sink's part in checkpoints."""

    #: a handle is the side file's length at pre_commit: later lines are never part of it
    seals_epoch_at_pre_commit: ClassVar[bool] = True

    def __init__(
        self,
        upstreams: list[Stream],
        path: str,
        text: Callable[[Any], str],
        name: str,
        signature: str,
    ) -> None:
        self.signature = signature
        #: the handle of the live sink in the checkpoint restored (None: none)
        self.live_handle: Any = None  # the live sink's handle: of whatever type that sink has
        super().__init__(upstreams, path, text, name)

    def pre_commit(self, epoch: int) -> FileHandle:
        """Flush; the side file and its length."""
        assert self._file is not None
        self._file.flush()
        return {"path": self.path, "length": os.fstat(self._file.fileno()).st_size}

    def commit(self, epoch: int, handle: FileHandle) -> None:
        """Nothing to do: the side file is written as records come."""

    def restore(self, handle: object) -> None:
        """Keep the live sink's ``handle``; the live output is not touched."""
        self.live_handle = handle

    def state_signature(self) -> str:
        return self.signature


def put_in_place_of(sink: Stream, name: str, path: str, signature: str | None = None) -> SideOutput:
    """A side output writing to ``path`` where ``sink`` was; ``sink`` leaves the graph.

    With ``signature`` (the sink's signature in the job's fingerprint) it is
    a :class:`StandIn`.
    """
    text = sink.output_text if isinstance(sink, TextOutputSink) else _line
    ups = list(sink.upstreams)
    side = (
        SideOutput(ups, path, text, name)
        if signature is None
        else StandIn(ups, path, text, name, signature)
    )
    for up in ups:
        up.disconnect(sink)
    for down in list(sink.downstreams):
        sink.disconnect(down)
        side.connect(down)
    return side


if TYPE_CHECKING:  # the type checker holds the stand-in to the contract, with its handle type
    _checkpointed: type[CheckpointedSink[FileHandle]] = StandIn
