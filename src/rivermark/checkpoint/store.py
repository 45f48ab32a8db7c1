"""Where checkpoints live: the :class:`Store` interface and a local directory.

Layout of :class:`LocalDirectoryStore` (readable by a person)::

    DIR/LOCK                                    holder: pid, host, start time
    DIR/job.json                                format, fingerprint, node ids
    DIR/checkpoints/000000000042/manifest.json
    DIR/checkpoints/000000000042/state/<node-id>.pkl

Write order (torn writes): every state file is written and fsynced, then the
manifest goes to ``manifest.json.tmp``, is fsynced, renamed to
``manifest.json``, and the directory is fsynced.  A directory without
``manifest.json`` is not a checkpoint (leftovers are deleted on the next
write or prune).
"""

from __future__ import annotations

import abc
import fcntl
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigurationError
from .errors import CheckpointCorruptError, CheckpointLockedError
from .faults import fault_point
from .manifest import FORMAT_VERSION, Manifest, sha256_of

logger = logging.getLogger(__name__)

__all__ = ["Store", "LocalDirectoryStore"]


class Store(abc.ABC):
    """Durable storage for checkpoints; see :class:`LocalDirectoryStore`."""

    @abc.abstractmethod
    def list_epochs(self) -> list[int]:
        """Epochs that have a manifest, oldest first."""

    @abc.abstractmethod
    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        """Write state blobs and then, atomically, the manifest."""

    @abc.abstractmethod
    def read_manifest(self, epoch: int) -> Manifest:
        """Parse the manifest of ``epoch`` (raises if missing or unreadable)."""

    @abc.abstractmethod
    def read_state(self, epoch: int, node_id: str) -> bytes:
        """The state blob of ``node_id`` in ``epoch``."""

    @abc.abstractmethod
    def verify(self, epoch: int) -> Manifest:
        """Check every file of ``epoch``; raise :class:`CheckpointCorruptError` if damaged."""

    @abc.abstractmethod
    def delete(self, epoch: int) -> None:
        """Remove checkpoint ``epoch``."""

    @abc.abstractmethod
    def lock(self) -> None:
        """Take the exclusive lock; raise :class:`CheckpointLockedError` if held."""

    @abc.abstractmethod
    def unlock(self) -> None:
        """Release the lock."""

    def write_job_info(self, info: dict[str, Any]) -> None:  # noqa: B027 - optional
        """Record a description of the job (optional)."""

    def list_incomplete(self) -> list[Path]:
        """Checkpoint directories without a manifest (torn writes); optional."""
        return []

    def prune(self, keep: int) -> list[int]:
        """Delete all but the newest ``keep`` checkpoints."""
        epochs = self.list_epochs()
        doomed = epochs[:-keep] if keep > 0 else []
        for e in doomed:
            self.delete(e)
        return doomed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class LocalDirectoryStore(Store):
    """Checkpoints in a local directory (layout in the module docs).

    >>> import tempfile
    >>> from rivermark.checkpoint.manifest import Manifest
    >>> store = LocalDirectoryStore(tempfile.mkdtemp())
    >>> store.write_checkpoint(Manifest(1, 0.0, {}), {"acc": b"state"})
    >>> store.list_epochs(), store.read_state(1, "acc")
    ([1], b'state')
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not str(path):
            raise ConfigurationError(
                f"LocalDirectoryStore: path must be a directory name, got {path!r}; "
                "pass e.g. 'ckpt/job1'"
            )
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self._lock_file: IO[str] | None = None

    def __repr__(self) -> str:
        return f"LocalDirectoryStore({str(self.path)!r})"

    def epoch_dir(self, epoch: int) -> Path:
        return self.checkpoints / f"{epoch:012d}"

    def list_epochs(self) -> list[int]:
        out = []
        for d in self.checkpoints.iterdir():
            if d.name.isdigit() and (d / "manifest.json").exists():
                out.append(int(d.name))
        return sorted(out)

    def list_incomplete(self) -> list[Path]:
        """Checkpoint directories without a manifest (torn writes)."""
        return [
            d
            for d in self.checkpoints.iterdir()
            if d.is_dir() and not (d / "manifest.json").exists()
        ]

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        d = self.epoch_dir(manifest.epoch)
        if d.exists():
            shutil.rmtree(d)
        (d / "state").mkdir(parents=True)
        for node_id, blob in states.items():
            rel = f"state/{node_id}.pkl"
            _write_durable(d / rel, blob)
            manifest.state[node_id] = {"file": rel, "size": len(blob), "sha256": sha256_of(blob)}
        _fsync_dir(d / "state")
        _fsync_dir(d)
        _fsync_dir(self.checkpoints)
        fault_point("after-state-files")
        tmp = d / "manifest.json.tmp"
        _write_durable(tmp, manifest.to_json().encode())
        os.replace(tmp, d / "manifest.json")
        _fsync_dir(d)

    def read_manifest(self, epoch: int) -> Manifest:
        return Manifest.from_json((self.epoch_dir(epoch) / "manifest.json").read_text())

    def read_state(self, epoch: int, node_id: str) -> bytes:
        m = self.read_manifest(epoch)
        return (self.epoch_dir(epoch) / m.state[node_id]["file"]).read_bytes()

    def verify(self, epoch: int) -> Manifest:
        d = self.epoch_dir(epoch)
        try:
            m = self.read_manifest(epoch)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointCorruptError(f"checkpoint {d}: manifest unreadable ({e})") from e
        for node_id, info in m.state.items():
            f = d / info["file"]
            try:
                blob = f.read_bytes()
            except OSError as e:
                raise CheckpointCorruptError(
                    f"checkpoint {d}: state file of {node_id!r} missing ({e})"
                ) from e
            if len(blob) != info["size"]:
                raise CheckpointCorruptError(
                    f"checkpoint {d}: state file {f.name} has {len(blob)} bytes, "
                    f"the manifest says {info['size']}"
                )
            if sha256_of(blob) != info["sha256"]:
                raise CheckpointCorruptError(
                    f"checkpoint {d}: state file {f.name} checksum mismatch"
                )
        return m

    def delete(self, epoch: int) -> None:
        d = self.epoch_dir(epoch)
        # remove the manifest first: a half-deleted checkpoint must not look complete
        try:
            os.unlink(d / "manifest.json")
        except FileNotFoundError:
            pass
        shutil.rmtree(d, ignore_errors=True)

    def prune(self, keep: int) -> list[int]:
        """Delete all but the newest ``keep`` checkpoints and any torn leftovers."""
        epochs = self.list_epochs()
        newest = epochs[-1] if epochs else -1
        for d in self.list_incomplete():
            if d.name.isdigit() and int(d.name) < newest:
                shutil.rmtree(d, ignore_errors=True)
        doomed = epochs[:-keep] if keep > 0 else []
        for e in doomed:
            self.delete(e)
        return doomed

    # ------------------------------------------------------------------ job info
    def write_job_info(self, info: dict[str, Any]) -> None:
        data = {"format": FORMAT_VERSION, **info}
        tmp = self.path / "job.json.tmp"
        _write_durable(tmp, json.dumps(data, indent=2, sort_keys=True).encode())
        os.replace(tmp, self.path / "job.json")
        _fsync_dir(self.path)

    # ------------------------------------------------------------------ lock
    def lock(self) -> None:
        f = open(self.path / "LOCK", "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "unknown holder"
            f.close()
            raise CheckpointLockedError(
                f"checkpoint directory {str(self.path)!r} is in use by another job ({holder}); "
                "stop that job first, or use a different checkpoint directory"
            ) from None
        f.seek(0)
        f.truncate()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        f.write(f"pid={os.getpid()} host={socket.gethostname()} started={started}\n")
        f.flush()
        self._lock_file = f

    def unlock(self) -> None:
        f, self._lock_file = self._lock_file, None
        if f is not None:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            finally:
                f.close()
