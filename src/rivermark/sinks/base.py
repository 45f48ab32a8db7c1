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
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["CheckpointedSink"]


@runtime_checkable
class CheckpointedSink(Protocol):
    """What a sink implements to take part in checkpoints (see module docs)."""

    def pre_commit(self, epoch: int) -> Any:
        """Make epoch ``epoch``'s output durable; return its JSON handle."""

    def commit(self, epoch: int, handle: Any) -> None:
        """Make the output of ``epoch`` visible; the checkpoint is durable."""

    def restore(self, handle: Any) -> None:
        """Roll the output back or forward to the checkpoint holding ``handle``."""
