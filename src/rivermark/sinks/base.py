"""The sink contract for checkpoints: pre-commit, commit, restore per epoch.

A sink that takes part in checkpoints (``sink_to_textfile``, ``to_kafka``
with ``exactly_once=True``, or a user's own) implements three methods; the
job calls them in this order around checkpoint ``epoch``:

1. ``pre_commit(epoch)`` during the barrier, after every record before the
   barrier reached the sink: make the epoch's output durable but not yet
   visible where that is possible (flush and fsync a file; flush a Kafka
   transaction) and return a small JSON-serialisable *handle* describing it.
   The handle is written into the checkpoint's manifest.
2. ``commit(epoch, handle)`` after the checkpoint is durable: make the
   epoch's output visible (commit the Kafka transaction, open the next one).
3. ``restore(handle)`` on recovery, with the handle of the checkpoint being
   restored (``None`` when starting without a checkpoint): roll the output
   back to that point (truncate the file) or resolve a commit whose outcome
   is unknown, then get ready to receive records again.

A plain ``sink(func)`` does not implement this: its output is at-least-once.

The contract is generic in the handle's type: ``sink_to_textfile`` is a
``CheckpointedSink[FileHandle]`` (path and length), ``to_sql`` a
``CheckpointedSink[SQLHandle]`` (sink id, epoch, table), ``to_kafka`` a
``CheckpointedSink[dict[str, Any]]``; a bare ``CheckpointedSink`` takes
any handle.  ``restore`` also takes ``None`` (no checkpoint).

The optional parts below are separate protocols because a real sink lacks
each of them: a user's own sink may implement only the three methods above
(no start over, no close), ``to_kafka`` keeps its epoch open until
``commit`` (no sealing) and writes no file, ``to_sql`` has no text per
record, and only ``sink_to_textfile`` reads back what it wrote.

Starting over (:class:`StartOverSink`, optional).  A job started with
``from_scratch=True`` (``rivermark run --from-scratch``) restores no
checkpoint and calls ``start_over()`` on every checkpointed sink instead of
``restore``: the sink discards or disowns the output of earlier runs so that
the new run's output is not appended to it (``sink_to_textfile`` truncates
its file; an exactly-once ``to_kafka`` cannot take committed records back
and starts a new epoch sequence).  A job refuses ``from_scratch`` when a
checkpointed sink does not implement it.  ``unaccounted_output()`` is asked
when a job starts on a store without any checkpoint: a sink that finds output
of an earlier run (a file with content) describes it in one line, and the
job refuses to append to it unless started from scratch.

Closing (:class:`ClosingSink`, optional).  ``close()`` releases what the
sink holds (an open file, a Kafka producer); a job calls it on every
checkpointed sink when it stops, after its final checkpoint or a failure.
It may be called more than once.

A file (:class:`FileOutputSink`, optional).  ``path`` is the file the sink
writes (``None`` when it writes to a stream without a name); ``rivermark
replay`` refuses to put its side output there.

Text output (:class:`TextOutputSink`, optional).  ``output_text(x)`` is the
text a sink writes for record ``x`` (``sink_to_textfile``: ``str(x)`` and
its line end; ``to_kafka``: the message value).  ``rivermark replay`` writes
it to a side file in place of the sink's real output.

Reading back (:class:`ReadBackSink`, optional).  ``written_between(first,
last)`` gives the text a checkpointed sink wrote between two of its handles
(the records of the epochs after ``first`` up to ``last``), as
:class:`WrittenOutput`, or raises ``ValueError`` saying why that cannot be
known.  ``rivermark replay --diff`` compares it with a replay's side output.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    # a bare CheckpointedSink takes any handle, as before the contract had a type
    # (a default of a type variable: typing has it from Python 3.13)
    from typing_extensions import TypeVar

    H = TypeVar("H", default=Any)
    H_contra = TypeVar("H_contra", contravariant=True, default=Any)
else:
    from typing import TypeVar

    H = TypeVar("H")
    H_contra = TypeVar("H_contra", contravariant=True)

__all__ = [
    "CheckpointedSink",
    "ClosingSink",
    "EpochSealingSink",
    "FileOutputSink",
    "ReadBackSink",
    "StartOverSink",
    "TextOutputSink",
    "WrittenOutput",
    "sink_digest",
]


@runtime_checkable
class CheckpointedSink(Protocol[H]):
    """What a sink implements to take part in checkpoints (see module docs)."""

    def pre_commit(self, epoch: int) -> H:
        """Make epoch ``epoch``'s output durable; return its JSON handle."""

    def commit(self, epoch: int, handle: H) -> None:
        """Make the output of ``epoch`` visible; the checkpoint is durable."""

    def restore(self, handle: H | None) -> None:
        """Roll the output back or forward to the checkpoint holding ``handle`` (``None``: none)."""


@runtime_checkable
class StartOverSink(Protocol):
    """A checkpointed sink that can start its output over (see module docs)."""

    def start_over(self) -> None:
        """Discard or disown the output of earlier runs; the next epoch starts a new one."""

    def unaccounted_output(self) -> str | None:
        """One line describing existing output that no checkpoint accounts for, or ``None``."""


@runtime_checkable
class EpochSealingSink(Protocol):
    """A checkpointed sink whose ``pre_commit`` fixes the epoch's output for good.

    ``seals_epoch_at_pre_commit`` is True when records that reach the sink
    after ``pre_commit(epoch)`` can never become part of epoch ``epoch``'s
    output (a file's handle is its length at ``pre_commit``).  Only then may
    a job resume its sources before ``commit(epoch, handle)``: it writes its
    checkpoints in the background.  A sink whose epoch stays open until
    ``commit`` (a Kafka transaction) keeps the sources paused until then.
    """

    seals_epoch_at_pre_commit: bool


@runtime_checkable
class ClosingSink(Protocol):
    """A sink that holds resources to release when the job stops (see module docs)."""

    def close(self) -> None:
        """Release the sink's file, producer or connection; idempotent."""


@runtime_checkable
class FileOutputSink(Protocol):
    """A sink that writes one file (see module docs)."""

    #: the file written (``None``: a stream without a name)
    path: str | None


@runtime_checkable
class TextOutputSink(Protocol):
    """A sink that can say what it writes for a record, as text (see module docs)."""

    def output_text(self, x: Any) -> str:  # x: a user's record, anything
        """The text written for record ``x``, its line end included."""


@dataclass(frozen=True)
class WrittenOutput:
    """What a sink wrote between two handles (see :class:`ReadBackSink`)."""

    #: the records' text, as ``output_text`` gives it, line ends included
    text: str
    #: where it was read, for a person (a file, a topic's offsets)
    where: str
    #: False when the output has no order across its parts (a topic's partitions):
    #: only the records, not their order, can then be compared
    ordered: bool = True


@runtime_checkable
class ReadBackSink(Protocol[H_contra]):
    """A checkpointed sink that reads back what it wrote between two handles (see module docs)."""

    def written_between(self, first: H_contra, last: H_contra) -> WrittenOutput:
        """The output of the epochs after handle ``first`` up to ``last``; ``ValueError`` if unknown."""


def sink_digest(sink_id: str) -> str:
    """A short name for a sink id in file names (any text, safe in a path)."""
    return hashlib.sha256(sink_id.encode()).hexdigest()[:12]
