"""Consistent checkpoints: :class:`Job`, its options, its listeners, the store, and their errors.

See :mod:`rivermark.checkpoint.cycle` for the protocol,
:mod:`rivermark.checkpoint.listeners` for what a job tells its watchers,
and ``docs/checkpointing.md`` for the crash points.
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
    ObjectStoreError,
    UnaccountedOutputError,
)
from .handle import JobHandle
from .inspection import CheckpointContents, read
from .job import Job
from .listeners import JobListener
from .manifest import Manifest
from .options import JobOptions
from .store import LocalDirectoryStore, Store, open_store
from .writer import write_savepoint

__all__ = [
    "Job",
    "JobOptions",
    "JobListener",
    "read",
    "write_savepoint",
    "CheckpointContents",
    "JobHandle",
    "Store",
    "LocalDirectoryStore",
    "open_store",
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
    "ObjectStoreError",
]
