"""Consistent checkpoints: :class:`Job`, its options, its listeners, the store, and their errors.

See :mod:`rivermark.checkpoint.protocol.cycle` for the protocol,
:mod:`rivermark.checkpoint.protocol.listeners` for what a job tells its watchers,
and ``docs/checkpointing.md`` for the crash points.
"""

from __future__ import annotations

from rivermark.checkpoint.errors import (
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
from rivermark.checkpoint.protocol.handle import JobHandle
from rivermark.checkpoint.protocol.job import Job
from rivermark.checkpoint.protocol.listeners import JobListener
from rivermark.checkpoint.protocol.options import JobOptions
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.store import LocalDirectoryStore, Store, open_store
from rivermark.checkpoint.tools.inspection import CheckpointContents, read
from rivermark.checkpoint.tools.writer import write_savepoint

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
