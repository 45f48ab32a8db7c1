"""Errors raised by checkpointing: a changed graph, a locked or damaged store."""

from __future__ import annotations

from rivermark.errors import RivermarkError

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointLockedError",
    "CheckpointCorruptError",
    "ManifestError",
    "ManifestFormatError",
    "NoValidCheckpointError",
    "UnaccountedOutputError",
    "NotACheckpointDirectoryError",
    "CheckpointNotFoundError",
    "JobFailedError",
    "CheckpointWriteError",
    "ObjectStoreError",
]


class CheckpointError(RivermarkError):
    """Root of the checkpoint errors."""


class CheckpointMismatchError(CheckpointError):
    """The graph differs from the one that wrote the checkpoint being restored."""


class CheckpointLockedError(CheckpointError):
    """Another job holds the checkpoint directory's lock."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint failed verification (missing file, wrong size or checksum)."""


class ManifestError(CheckpointCorruptError):
    """A manifest does not parse, lacks a field, has a mistyped one or fails its checksum."""


class ManifestFormatError(ManifestError):
    """A manifest's ``format`` is not one this version reads (a newer writer, or damage)."""


class NoValidCheckpointError(CheckpointError):
    """The store holds checkpoints and none of them verifies: the job refuses to start.

    ``damaged`` maps each epoch to why it failed.  The ways forward are named
    in the message: restore a good copy of the store, or start over
    explicitly (``Job(..., from_scratch=True)``, ``rivermark run --from-scratch``).
    """

    def __init__(self, message: str, damaged: dict[int, str]) -> None:
        super().__init__(message)
        self.damaged = dict(damaged)


class UnaccountedOutputError(CheckpointError):
    """A job without any checkpoint found output that no checkpoint accounts for."""


class NotACheckpointDirectoryError(CheckpointError):
    """A path given to inspect checkpoints is not a checkpoint directory."""


class CheckpointNotFoundError(CheckpointError):
    """Nothing to inspect there: no checkpoint with the epoch asked for, or no location at all."""


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


class ObjectStoreError(CheckpointError):
    """The object store failed a request or could not be reached.

    The checkpoints already written are unchanged; the one being written, if
    any, has no manifest and therefore does not exist.
    """


class UntrustedStateError(CheckpointError):
    """A checkpoint's state holds pickled objects and the checkpoint is not trusted.

    Unpickling runs code, so it is done only for a checkpoint whose
    signature verified, or when the user trusts the store explicitly
    (``--trust-store``, ``Job(trust_store=True)``).
    """


class CheckpointSignatureError(CheckpointCorruptError):
    """A checkpoint is unsigned, signed with a key this job lacks, or its signature is wrong."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        #: ``unsigned``, ``foreign-signed`` or ``bad-signature``
        self.status = status
