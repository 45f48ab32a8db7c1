"""Consistent checkpoints: :class:`Job`, the store, and their errors.

See :mod:`rivermark.checkpoint.job` for the protocol and
``docs/checkpointing.md`` for the crash points.
"""

from __future__ import annotations

from .errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointLockedError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    JobFailedError,
    ManifestError,
    ManifestFormatError,
    NotACheckpointDirectoryError,
    NoValidCheckpointError,
    UnaccountedOutputError,
)
from .job import Job
from .manifest import Manifest
from .store import LocalDirectoryStore, Store

__all__ = [
    "Job",
    "Store",
    "LocalDirectoryStore",
    "Manifest",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointLockedError",
    "CheckpointCorruptError",
    "JobFailedError",
    "ManifestError",
    "ManifestFormatError",
    "NoValidCheckpointError",
    "UnaccountedOutputError",
    "NotACheckpointDirectoryError",
    "CheckpointNotFoundError",
    "CheckpointWriteError",
]
