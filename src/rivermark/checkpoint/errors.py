"""Errors raised by checkpointing: a changed graph, a locked or damaged store."""

from __future__ import annotations

from ..errors import RivermarkError

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointLockedError",
    "CheckpointCorruptError",
    "JobFailedError",
    "CheckpointWriteError",
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

    exit_code = 1


class CheckpointWriteError(JobFailedError):
    """A checkpoint could not be taken or written (disk full, permission lost, unpicklable state).

    Every source and sink was stopped before this was raised, and nothing of
    the failed epoch was committed; the previous checkpoint is intact.
    """
