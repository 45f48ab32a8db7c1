"""Errors raised by checkpointing: a changed graph, a locked or damaged store."""

from __future__ import annotations

from ..errors import RivermarkError

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointLockedError",
    "CheckpointCorruptError",
    "JobFailedError",
    "ObjectStoreError",
    "CheckpointNotFoundError",
]


class CheckpointError(RivermarkError):
    """Root of the checkpoint errors."""


class CheckpointMismatchError(CheckpointError):
    """The graph differs from the one that wrote the checkpoint being restored."""


class CheckpointLockedError(CheckpointError):
    """Another job holds the checkpoint directory's lock."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint failed verification (missing file, wrong size or checksum)."""


class JobFailedError(CheckpointError):
    """A source or node of a running job failed; the job stopped without a final checkpoint.

    The failure is chained as ``__cause__``; the last complete checkpoint is
    intact, so running the job again resumes from it.
    """


class ObjectStoreError(CheckpointError):
    """The object store failed a request or could not be reached.

    The checkpoints already written are unchanged; the one being written, if
    any, has no manifest and therefore does not exist.
    """


class CheckpointNotFoundError(CheckpointError):
    """No checkpoint location at the path or URL given (inspecting, not running)."""
