"""Where checkpoints live: a local directory (the :class:`Store` interface is :mod:`.storebase`).

Layout of :class:`LocalDirectoryStore` (readable by a person)::

    DIR/LOCK                                    holder: pid, host, start time
    DIR/job.json                                format, fingerprint, node ids
    DIR/checkpoints/000000000042/manifest.json
    DIR/checkpoints/000000000042/state/<node-id>.pkl   the node id encoded by
                                                names.file_name (one safe component)
    DIR/shared/<sha256>                         files of RocksDB state, named by content;
                                                the manifests that need one name it
    DIR/set-aside-<UTC time>/000000000041/...  checkpoints set aside by a
                                                job started from scratch

Write order (torn writes): every state file is written and fsynced, then the
manifest goes to ``manifest.json.tmp``, is fsynced, renamed to
``manifest.json``, and the directory is fsynced.  A directory without
``manifest.json`` is not a checkpoint (leftovers are deleted on the next
write or prune), nor is a file named like a checkpoint directory (deleted
by the prune that follows a newer checkpoint, as a torn directory is).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import IO

from rivermark._fileid import lock_or_holder
from rivermark.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointLockedError,
    CheckpointNotFoundError,
)
from rivermark.checkpoint.faults import fault_error, fault_point
from rivermark.checkpoint.stores.manifest import FORMAT_VERSION, Manifest, sha256_of
from rivermark.checkpoint.stores.names import checked_relative, file_name
from rivermark.checkpoint.stores.storebase import Store as Store
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["Store", "LocalDirectoryStore", "open_store"]


def _is_digest(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` durable (renames and new files in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: files a store writes are its owner's alone (state holds the job's data)
FILE_MODE = 0o600
DIR_MODE = 0o700


def _write_durable(path: Path, data: bytes) -> None:
    """Write ``path`` and fsync it; a write that fails (a full disk) leaves no part of it."""
    # O_NOFOLLOW: a symlink planted where a file is written is not followed
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quietly(path)
        raise


def _unlink_quietly(path: Path) -> None:
    """Remove a file a failed write left (its space back on a full disk)."""
    with contextlib.suppress(OSError):
        os.unlink(path)


#: bytes copied at a time where the kernel cannot copy a file itself
COPY_CHUNK = 1 << 20


def _copy_file(src: int, dst: int, source: Path) -> None:
    """Copy the file open as ``src`` into ``dst`` without holding it in memory.

    In the kernel (``sendfile``); where the file systems do not allow that,
    :data:`COPY_CHUNK` bytes at a time.  A file that ends before its size
    was copied raises: a part of it is never stored.
    """
    size, done = os.fstat(src).st_size, 0
    while done < size:
        try:
            sent = os.sendfile(dst, src, done, size - done)
        except OSError as e:
            if done or e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            break
        if not sent:
            raise OSError(f"{source} ended at {done} of its {size} bytes")
        done += sent
    while done < size:
        piece = os.pread(src, min(COPY_CHUNK, size - done), done)
        if not piece:
            raise OSError(f"{source} ended at {done} of its {size} bytes")
        view = memoryview(piece)
        while view:
            view = view[os.write(dst, view) :]
        done += len(piece)


def _read_no_symlink(path: Path, within: Path) -> bytes:
    """The bytes of ``path``, refusing a symlink on the way from ``within`` (the store)."""
    rel = path.relative_to(within)
    p = within
    for part in rel.parts:
        p = p / part
        if p.is_symlink():
            raise CheckpointCorruptError(
                f"{str(p)!r} is a symbolic link (to {os.readlink(p)!r}); a checkpoint store "
                "holds no links and rivermark does not follow them: replace it by the file "
                "itself or restore a good copy of the store"
            )
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with open(fd, "rb") as f:
        return f.read()


def _refuse_dangling_link(path: Path) -> None:
    """Refuse a path (or a parent of it) that is a symbolic link to nothing, naming its target."""
    for p in (path, *path.parents):
        if p.is_symlink() and not p.exists():
            raise ConfigurationError(
                f"checkpoint directory {str(path)!r}: {str(p)!r} is a symbolic link to "
                f"{os.readlink(p)!r}, which does not exist; create that directory, or pass "
                "another checkpoint path"
            )


def _unusable(path: Path, e: OSError) -> ConfigurationError:
    """A one-line error for a checkpoint directory that cannot be created or written."""
    why = e.strerror or str(e)
    return ConfigurationError(
        f"checkpoint directory {str(path)!r} cannot be written ({why}: {e.filename!r}); "
        "choose a directory on a writable file system that this user may write to"
    )


class LocalDirectoryStore(Store):
    """Checkpoints in a local directory (layout in the module docs).

    >>> import tempfile
    >>> from rivermark.checkpoint.stores.manifest import Manifest
    >>> store = LocalDirectoryStore(tempfile.mkdtemp())
    >>> store.write_checkpoint(Manifest(1, 0.0, {}), {"acc": b"state"})
    >>> store.list_epochs(), store.read_state(1, "acc")
    ([1], b'state')
    """

    def __init__(self, path: str | os.PathLike[str], create: bool = True) -> None:
        if not str(path):
            raise ConfigurationError(
                f"LocalDirectoryStore: path must be a directory name, got {path!r}; "
                "pass e.g. 'ckpt/job1'"
            )
        self.path: Path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.shared = self.path / "shared"
        if self.path.exists() and not self.path.is_dir():
            raise ConfigurationError(
                f"checkpoint directory {str(self.path)!r} is a file, not a directory; "
                "pass the name of a directory (it is created if missing)"
            )
        if create:
            _refuse_dangling_link(self.path)
            try:
                self.path.mkdir(DIR_MODE, parents=True, exist_ok=True)
                self.checkpoints.mkdir(DIR_MODE, exist_ok=True)
            except OSError as e:
                raise _unusable(self.path, e) from None
        self._lock_file: IO[str] | None = None

    def __repr__(self) -> str:
        return f"LocalDirectoryStore({str(self.path)!r})"

    def epoch_dir(self, epoch: int) -> Path:
        return self.checkpoints / f"{epoch:012d}"

    def describe(self, epoch: int) -> str:
        return f"checkpoint {str(self.epoch_dir(epoch))!r}"

    def _epoch_dirs(self) -> list[Path]:
        if not self.checkpoints.is_dir():  # opened with create=False
            return []
        return list(self.checkpoints.iterdir())

    def list_epochs(self) -> list[int]:
        out = []
        for d in self._epoch_dirs():
            if d.name.isdigit() and (d / "manifest.json").exists():
                out.append(int(d.name))
        return sorted(out)

    def list_incomplete(self) -> list[Path]:
        """Checkpoint directories without a manifest (torn writes), and files named like one."""
        return [
            d
            for d in self._epoch_dirs()
            if (d.is_dir() or d.name.isdigit()) and not (d / "manifest.json").exists()
        ]

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        d = self.epoch_dir(manifest.epoch)
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(DIR_MODE)
        (d / "state").mkdir(DIR_MODE)
        fault_error("checkpoint-write")
        for node_id, blob in states.items():
            rel = f"state/{file_name(node_id)}.pkl"
            _write_durable(d / rel, blob)
            manifest.state[node_id] = {"file": rel, "size": len(blob), "sha256": sha256_of(blob)}
        fsync_dir(d / "state")
        fsync_dir(d)
        fsync_dir(self.checkpoints)
        fault_point("after-state-files")
        if manifest.savepoint:
            fault_point("savepoint-after-state-files")
        tmp = d / "manifest.json.tmp"
        _write_durable(tmp, manifest.to_json(self.trust.keyring).encode())
        os.replace(tmp, d / "manifest.json")
        fsync_dir(d)
        self.wrote_manifest(manifest)

    def replace_manifest(self, epoch: int, data: bytes) -> None:
        self.forget_manifest(epoch)
        d = self.epoch_dir(epoch)
        tmp = d / "manifest.json.tmp"
        _write_durable(tmp, data)
        os.replace(tmp, d / "manifest.json")
        fsync_dir(d)

    def read_manifest(self, epoch: int) -> Manifest:
        path = self.epoch_dir(epoch) / "manifest.json"
        return Manifest.from_json(_read_no_symlink(path, self.path))

    def read_state(self, epoch: int, node_id: str) -> bytes:
        entry = self.read_manifest(epoch).state[node_id]
        return self.read_state_entry(epoch, node_id, entry)

    def read_state_entry(self, epoch: int, node_id: str, entry: dict[str, object]) -> bytes:
        rel = Path(checked_relative(node_id, str(entry["file"])))
        return _read_no_symlink(self.epoch_dir(epoch) / rel, self.path)

    def set_aside(self, epochs: list[int]) -> str:
        """Move the directories of ``epochs`` to ``DIR/set-aside-<UTC time>/``."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = self.path / f"set-aside-{stamp}"
        n = 1
        while dest.exists():
            n += 1
            dest = self.path / f"set-aside-{stamp}-{n}"
        dest.mkdir(DIR_MODE)
        for e in epochs:
            self.forget_manifest(e)
            os.rename(self.epoch_dir(e), dest / self.epoch_dir(e).name)
        fsync_dir(dest)
        fsync_dir(self.checkpoints)
        return str(dest)

    def delete(self, epoch: int) -> None:
        self.forget_manifest(epoch)
        d = self.epoch_dir(epoch)
        # remove the manifest first: a half-deleted checkpoint must not look complete
        with contextlib.suppress(FileNotFoundError):
            os.unlink(d / "manifest.json")
        shutil.rmtree(d, ignore_errors=True)

    def prune(self, keep: int) -> list[int]:
        """Delete all but the newest ``keep`` checkpoints and any torn leftovers."""
        epochs = self.list_epochs()
        newest = epochs[-1] if epochs else -1
        for d in self.list_incomplete():
            if d.name.isdigit() and int(d.name) < newest:
                if d.is_dir():
                    shutil.rmtree(d, ignore_errors=True)
                else:  # not a directory: nothing a write left, but no checkpoint either
                    with contextlib.suppress(OSError):
                        d.unlink()
        doomed = self.prunable(epochs, keep)
        for e in doomed:
            self.delete(e)
        self.prune_shared()
        return doomed

    # ------------------------------------------------------------------ shared files
    def _shared_path(self, digest: str) -> Path:
        if not _is_digest(digest):
            raise CheckpointCorruptError(f"shared file name {digest!r} is not a sha256")
        return self.shared / digest

    def write_shared(self, digest: str, data: bytes) -> None:
        path = self._shared_path(digest)
        self.shared.mkdir(DIR_MODE, exist_ok=True)
        tmp = path.with_name(f"{digest}.tmp")
        _write_durable(tmp, data)
        os.replace(tmp, path)
        fsync_dir(self.shared)

    def write_shared_file(self, digest: str, source: Path) -> None:
        path = self._shared_path(digest)
        self.shared.mkdir(DIR_MODE, exist_ok=True)
        tmp = path.with_name(f"{digest}.tmp")
        # O_NOFOLLOW: a symlink planted where a file is written is not followed
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        try:
            with open(source, "rb") as src:
                _copy_file(src.fileno(), fd, source)
            os.fsync(fd)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.shared)

    def read_shared(self, digest: str) -> bytes:
        return _read_no_symlink(self._shared_path(digest), self.path)

    def list_shared(self) -> dict[str, int]:
        if not self.shared.is_dir():
            return {}
        out: dict[str, int] = {}
        with os.scandir(self.shared) as it:
            for entry in it:
                if _is_digest(entry.name) and entry.is_file(follow_symlinks=False):
                    out[entry.name] = entry.stat(follow_symlinks=False).st_size
        return out

    def delete_shared(self, digests: list[str]) -> None:
        for d in digests:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._shared_path(d))

    def shared_references(self) -> set[str] | None:
        """What the checkpoints name, those set aside by ``--from-scratch`` included."""
        needed = super().shared_references()
        if needed is None:
            return None
        for manifest in self.path.glob("set-aside-*/*/manifest.json"):
            try:
                needed |= set(Manifest.from_json(manifest.read_bytes()).shared_files())
            except Exception:
                return None
        return needed

    # ------------------------------------------------------------------ job info
    def write_job_info(self, info: dict[str, object]) -> None:
        data = {"format": FORMAT_VERSION, **info}
        tmp = self.path / "job.json.tmp"
        _write_durable(tmp, json.dumps(data, indent=2, sort_keys=True).encode())
        os.replace(tmp, self.path / "job.json")
        fsync_dir(self.path)

    def read_job_info(self) -> dict[str, object] | None:
        try:
            info = json.loads((self.path / "job.json").read_bytes())
        except (OSError, ValueError, RecursionError):
            return None
        return info if isinstance(info, dict) else None

    # ------------------------------------------------------------------ lock
    def lock(self) -> None:
        try:
            # private like every store file (a LOCK of an older version is made so below)
            fd = os.open(
                self.path / "LOCK", os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE
            )
            f = os.fdopen(fd, "a+")  # held until unlock()
        except OSError as e:
            raise _unusable(self.path, e) from None
        holder = lock_or_holder(f.fileno(), "unknown holder")
        if holder is not None:
            f.close()
            raise CheckpointLockedError(
                f"checkpoint directory {str(self.path)!r} is in use by another job ({holder}); "
                "stop that job first, or use a different checkpoint directory"
            ) from None
        with contextlib.suppress(OSError):  # another user's file: left as it is
            os.fchmod(f.fileno(), FILE_MODE)
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


def open_store(checkpoint: str | os.PathLike[str] | Store, *, create: bool = True) -> Store:
    """The store for a ``checkpoint`` argument: a :class:`Store`, a directory or a URL.

    ``"ckpt/job1"`` is a :class:`LocalDirectoryStore`; ``"s3://bucket/prefix"``
    (any ``scheme://`` that fsspec knows) is an
    :class:`~rivermark.checkpoint.stores.objectstore.ObjectStore`.  With
    ``create=False`` (inspecting) a location without checkpoints raises
    :class:`CheckpointNotFoundError` instead of being created.

    >>> import tempfile
    >>> open_store(tempfile.mkdtemp()).list_epochs()
    []
    """
    if isinstance(checkpoint, Store):
        return checkpoint
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise ConfigurationError(
            f"checkpoint must be a directory, a URL such as 's3://bucket/prefix' or a "
            f"Store, got {checkpoint!r}"
        )
    text = os.fspath(checkpoint)
    if "://" in text:
        from rivermark.checkpoint.stores.objectstore import ObjectStore

        return ObjectStore(text, create=create)
    if not create and not Path(text).is_dir():
        raise CheckpointNotFoundError(f"no checkpoint directory {text!r}")
    return LocalDirectoryStore(text, create=create)
