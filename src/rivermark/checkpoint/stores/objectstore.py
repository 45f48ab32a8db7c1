"""Checkpoints in object storage (``s3://``, ``file://``, any fsspec URL).

``Job(graph, checkpoint="s3://bucket/prefix/job1")`` keeps its checkpoints
in an :class:`ObjectStore`; the layout under the prefix is the one of
:class:`~rivermark.checkpoint.stores.store.LocalDirectoryStore`::

    PREFIX/LEASE                                       the lock (see rivermark.checkpoint.stores.lease)
    PREFIX/job.json                                    format, fingerprint, node ids
    PREFIX/checkpoints/000000000042/state/<node-id>.<writer>.pkl   (names.file_name)
    PREFIX/checkpoints/000000000042/manifest.json
    PREFIX/shared/<sha256>                             files of RocksDB state (by content)

Write order: every state object (named ``<node-id>.<writer>.pkl``, the
writer being a random id of the store object, so two writers never share a
name), then the lease is renewed (a job that lost it stops here), then the
manifest in one PUT that succeeds only if no manifest of that epoch exists
(``If-None-Match: *``).  An object store has no rename, but a single PUT is
atomic: readers see the whole manifest or none, and a checkpoint without a
manifest does not exist (its objects are deleted by the next prune).  On a
local file system (``file://``) every object is written under a temporary
name and fsynced, then renamed (the manifest: hard-linked, which fails if
the name exists).

Verification, fallback from a damaged newest checkpoint and retention are
the same as for a directory (:meth:`Store.verify`, :meth:`prune`).

Credentials and endpoints come from fsspec's usual sources (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``~/.aws``) or from
``storage_options``.  The lease is implemented for ``s3://`` (conditional
PUT and DELETE with ``If-None-Match`` / ``If-Match``) and ``file://``; other
schemes need ``lease=False`` and the promise that one job at a time uses
the location.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rivermark.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointLockedError,
    CheckpointNotFoundError,
    ObjectStoreError,
)
from rivermark.checkpoint.faults import fault_point
from rivermark.checkpoint.stores.filesystems import open_filesystem, s3_options
from rivermark.checkpoint.stores.lease import (
    DEFAULT_LEASE_TTL,
    Lease,
    LeaseBackend,
    LocalLeaseBackend,
    S3LeaseBackend,
)
from rivermark.checkpoint.stores.manifest import FORMAT_VERSION, Manifest, sha256_of
from rivermark.checkpoint.stores.names import checked_relative, file_name
from rivermark.checkpoint.stores.storebase import Store
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["ObjectStore"]

_T = TypeVar("_T")
_ENTRY = re.compile(r"checkpoints/(\d{12})/(.+)\Z")


def _quiet_io_loop() -> None:
    """Make a dropped connection on fsspec's I/O loop one DEBUG line, not a traceback.

    aiobotocore retries a request whose connection the endpoint dropped; the
    aborted attempt leaves an aiohttp task whose exception nobody retrieves,
    which asyncio logs with its traceback at ERROR, once per attempt, before
    the store's own one-line error.  Other exceptions keep asyncio's handling.
    """
    try:
        from fsspec.asyn import get_loop
    except ImportError:  # pragma: no cover - fsspec without its async part
        return
    loop = get_loop()
    if loop.get_exception_handler() is not None:
        return

    def handler(loop: Any, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError):  # aiohttp's ClientConnection*Error are OSErrors too
            logger.debug("object store I/O: %s (%s: %s)", context.get("message"),
                         type(exc).__name__, exc)  # fmt: skip
            return
        loop.default_exception_handler(context)

    loop.call_soon_threadsafe(loop.set_exception_handler, handler)


def _lease_ttl_from_env() -> float:
    raw = os.environ.get("RIVERMARK_LEASE_TTL")
    if not raw:
        return DEFAULT_LEASE_TTL
    try:
        ttl = float(raw)
    except ValueError:
        ttl = -1.0
    if ttl <= 0:
        raise ConfigurationError(
            f"RIVERMARK_LEASE_TTL must be a number of seconds > 0, got {raw!r}"
        )
    return ttl


def _checked_lease_ttl(value: object) -> float:
    """``lease_ttl`` (default: the environment's), refused unless a number of seconds > 0."""
    if value is None:
        value = _lease_ttl_from_env()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(
            f"ObjectStore: lease_ttl must be a number of seconds > 0, got {value!r}"
        )
    return float(value)


class ObjectStore(Store):
    """Checkpoints under an fsspec URL (see the module docs).

    ``storage_options`` go to ``fsspec.url_to_fs`` (e.g. ``endpoint_url``,
    ``key``, ``secret`` for S3); the caller's dict is not changed.
    ``lease_ttl`` is how long the lease outlives a holder that stopped
    renewing it (default 30 s, or ``RIVERMARK_LEASE_TTL``).

    >>> import tempfile
    >>> store = ObjectStore("file://" + tempfile.mkdtemp())
    >>> store.write_checkpoint(Manifest(1, 0.0, {}), {"acc": b"state"})
    >>> store.list_epochs(), store.read_state(1, "acc"), store.verify(1).epoch
    ([1], b'state', 1)
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, object] | None = None,
        lease: bool = True,
        lease_ttl: float | None = None,
        create: bool = True,
    ) -> None:
        scheme, sep, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
        if not sep or not scheme or not rest.strip("/"):
            raise ConfigurationError(
                f"ObjectStore: url must look like 's3://bucket/prefix', got {url!r}"
            )
        lease_ttl = _checked_lease_ttl(lease_ttl)
        self.url = url.rstrip("/")
        self.scheme = scheme
        self.fs, self.root = open_filesystem(
            self.url, s3_options(scheme, storage_options), f"ObjectStore({url!r})"
        )
        # optional: only fsspec's asynchronous filesystems define async_impl
        if getattr(self.fs, "async_impl", False):
            _quiet_io_loop()
        self._local = "file" in _protocols(self.fs)
        self.lease_enabled = lease
        self.lease_ttl = float(lease_ttl)
        self._lease: Lease | None = None
        self._writer = uuid.uuid4().hex[:8]
        if not create:
            self._io("look for checkpoints", self._require_exists)
        elif self._local:
            os.makedirs(self._path("checkpoints"), exist_ok=True)

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    def location(self) -> str | None:
        return self.url

    # ------------------------------------------------------------------ I/O
    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _epoch_rel(self, epoch: int) -> str:
        return f"checkpoints/{epoch:012d}"

    def _io(self, what: str, func: Callable[..., _T], *args: object) -> _T:
        """Run one store operation; a failure other than "not found" is an ObjectStoreError."""
        try:
            return func(*args)
        except (FileNotFoundError, FileExistsError, CheckpointError, ConfigurationError):
            raise
        except Exception as e:
            raise self._failed(what, e) from e

    def _write(self, what: str, func: Callable[..., _T], *args: object) -> _T:
        """:meth:`_io` for writes: "not found" there means a missing bucket or container."""
        try:
            return self._io(what, func, *args)
        except FileNotFoundError as e:
            raise ObjectStoreError(
                f"{self!r}: could not {what} ({e}); does the bucket exist? Create it, or "
                f"point the checkpoint at an existing one"
            ) from e

    def _failed(self, what: str, e: BaseException) -> ObjectStoreError:
        return ObjectStoreError(
            f"{self!r}: could not {what} ({type(e).__name__}: {e}); the checkpoints "
            f"written before are unchanged (a checkpoint without a manifest does not "
            f"exist); check that the store is reachable and the credentials allow it, "
            f"then run the job again to resume from the last complete checkpoint"
        )

    def _require_exists(self) -> None:
        self.fs.invalidate_cache()
        if not self.fs.exists(self._path("checkpoints")) and not self.fs.exists(
            self._path("job.json")
        ):
            raise CheckpointNotFoundError(f"no checkpoints at {self.url!r}")

    def _put(self, rel: str, data: bytes, create: bool = False) -> None:
        """Write one object; with ``create``, only if it does not exist (else FileExistsError)."""
        path = self._path(rel)
        if not self._local:
            self.fs.pipe_file(path, data, mode="create" if create else "overwrite")
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{self._writer}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if create:
            try:
                os.link(tmp, path)  # atomic, and fails if the name exists
            finally:
                os.unlink(tmp)
        else:
            os.replace(tmp, path)
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _get(self, rel: str) -> bytes:
        return bytes(self.fs.cat_file(self._path(rel)))

    def _entries(self) -> dict[int, list[str]]:
        """Every object under ``checkpoints/``, as epoch -> paths relative to the epoch."""
        base = self._path("checkpoints")
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return {}
        out: dict[int, list[str]] = {}
        prefix = self.root + "/"
        for name in found:
            name = str(name)
            rel = name[len(prefix) :] if name.startswith(prefix) else name
            m = _ENTRY.match(rel)
            if m is not None:
                out.setdefault(int(m.group(1)), []).append(m.group(2))
        return out

    def _remove(self, rels: list[str]) -> None:
        """Delete ``rels``: a manifest named first goes first, on its own.

        On an object store the rest go in one request (S3's ``DeleteObjects``:
        a checkpoint's files, a pruning's shared files), which fsspec makes
        of a list of names; a name with a glob character would be expanded
        there, so those are deleted one by one.
        """
        paths = [self._path(rel) for rel in rels]
        if paths and paths[0].endswith("/manifest.json"):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(paths.pop(0))
        if not self._local and len(paths) > 1 and not any(set(p) & set("*?[") for p in paths):
            with contextlib.suppress(FileNotFoundError):  # gone already: as wanted
                self.fs.rm(paths)
            paths = []
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(path)
        if self._local:  # object stores have no directories to leave behind
            for d in sorted({os.path.dirname(self._path(r)) for r in rels}, reverse=True):
                try:
                    os.rmdir(d)
                    os.rmdir(os.path.dirname(d))
                except OSError:
                    pass

    # ------------------------------------------------------------------ the Store contract
    def list_epochs(self) -> list[int]:
        entries = self._io("list the checkpoints", self._entries)
        return sorted(e for e, names in entries.items() if "manifest.json" in names)

    def list_incomplete(self) -> list[Path]:
        """Epochs with objects but no manifest (torn writes), as ``Path(epoch)``."""
        entries = self._io("list the checkpoints", self._entries)
        return [
            Path(f"{e:012d}")
            for e, names in sorted(entries.items())
            if "manifest.json" not in names
        ]

    def replace_manifest(self, epoch: int, data: bytes) -> None:
        self.forget_manifest(epoch)
        rel = f"{self._epoch_rel(epoch)}/manifest.json"
        self._write(f"replace the manifest of checkpoint {epoch}", self._put, rel, data)

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        """State objects, a lease renewal, then the manifest (only if none exists).

        State objects carry this store's writer id in their names, so a
        second writer (a job that lost its lease without noticing yet) never
        overwrites another's; objects of a torn write are deleted by
        :meth:`prune`.
        """
        epoch = manifest.epoch
        base = self._epoch_rel(epoch)
        if self._lease is not None:
            self._lease.check()
        for node_id, blob in states.items():
            rel = f"state/{file_name(node_id)}.{self._writer}.pkl"
            self._write(f"write the state of {node_id!r}", self._put, f"{base}/{rel}", blob)
            manifest.state[node_id] = {"file": rel, "size": len(blob), "sha256": sha256_of(blob)}
        fault_point("after-state-files")
        if manifest.savepoint:
            fault_point("savepoint-after-state-files")
        if self._lease is not None:
            self._write("renew the lease", self._lease.renew)
        try:
            self._write(
                f"write the manifest of checkpoint {epoch}",
                self._put,
                f"{base}/manifest.json",
                manifest.to_json(self.trust.keyring).encode(),
                True,
            )
        except FileExistsError:
            raise CheckpointLockedError(
                f"{self!r}: checkpoint {epoch} was written by another job meanwhile; "
                f"this job stops without replacing it; make sure one job at a time uses "
                f"this location"
            ) from None
        self.wrote_manifest(manifest)
        logger.debug("checkpoint %d written to %r", epoch, self.url)

    def read_manifest(self, epoch: int) -> Manifest:
        text = self._io(
            f"read the manifest of checkpoint {epoch}",
            self._get,
            f"{self._epoch_rel(epoch)}/manifest.json",
        )
        return Manifest.from_json(text.decode())

    def read_state_file(self, epoch: int, file: str) -> bytes:
        return self._io(
            f"read {file!r} of checkpoint {epoch}", self._get, f"{self._epoch_rel(epoch)}/{file}"
        )

    def read_state(self, epoch: int, node_id: str) -> bytes:
        entry = self.read_manifest(epoch).state[node_id]
        return self.read_state_entry(epoch, node_id, entry)

    def read_state_entry(self, epoch: int, node_id: str, entry: dict[str, object]) -> bytes:
        return self.read_state_file(epoch, checked_relative(node_id, str(entry["file"])))

    def delete(self, epoch: int) -> None:
        self._delete_listed(epoch, self._io("list the checkpoints", self._entries).get(epoch, []))

    def _delete_listed(self, epoch: int, names: list[str]) -> None:
        """Delete checkpoint ``epoch``, whose files are ``names`` (as listed)."""
        self.forget_manifest(epoch)
        # the manifest first: a half-deleted checkpoint must not look complete
        ordered = sorted(names, key=lambda n: n != "manifest.json")
        base = self._epoch_rel(epoch)
        self._io(f"delete checkpoint {epoch}", self._remove, [f"{base}/{n}" for n in ordered])

    def prune(self, keep: int) -> list[int]:
        """Delete all but the newest ``keep`` checkpoints and older torn leftovers."""
        entries = self._io("list the checkpoints", self._entries)
        complete = sorted(e for e, names in entries.items() if "manifest.json" in names)
        newest = complete[-1] if complete else -1
        for e, names in entries.items():
            if e < newest and e not in complete:
                base = self._epoch_rel(e)
                self._io(f"delete leftovers of {e}", self._remove, [f"{base}/{n}" for n in names])
        doomed = self.prunable(complete, keep)
        for e in doomed:
            self._delete_listed(e, entries[e])
        self.prune_shared()
        return doomed

    # ------------------------------------------------------------------ shared files
    def _shared_rel(self, digest: str) -> str:
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise CheckpointCorruptError(f"shared file name {digest!r} is not a sha256")
        return f"shared/{digest}"

    def write_shared(self, digest: str, data: bytes) -> None:
        rel = self._shared_rel(digest)
        self._write(f"write the shared file {digest[:16]}", self._put, rel, data)

    def read_shared(self, digest: str) -> bytes:
        rel = self._shared_rel(digest)
        return self._io(f"read the shared file {digest[:16]}", self._get, rel)

    def _shared_sizes(self) -> dict[str, int]:
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self._path("shared"), detail=True)
        except FileNotFoundError:
            return {}
        out: dict[str, int] = {}
        for name, info in found.items():
            digest = str(name).rsplit("/", 1)[-1]
            if len(digest) == 64 and info.get("type", "file") == "file":
                out[digest] = int(info.get("size") or 0)
        return out

    def list_shared(self) -> dict[str, int]:
        return self._io("list the shared files", self._shared_sizes)

    def delete_shared(self, digests: list[str]) -> None:
        rels = [self._shared_rel(d) for d in digests]
        self._io("delete shared files", self._remove, rels)

    def write_job_info(self, info: dict[str, object]) -> None:
        import json

        data = json.dumps({"format": FORMAT_VERSION, **info}, indent=2, sort_keys=True)
        self._write("write job.json", self._put, "job.json", data.encode())

    def read_job_info(self) -> dict[str, object] | None:
        import json

        try:
            info = json.loads(self._get("job.json"))
        except Exception:  # none yet, or unreadable: the history shows no end state
            logger.debug("reading job.json of %r failed", self, exc_info=True)
            return None
        return info if isinstance(info, dict) else None

    # ------------------------------------------------------------------ lease
    def _lease_backend(self) -> LeaseBackend:
        path = self._path("LEASE")
        if self._local:
            return LocalLeaseBackend(path)
        if self.scheme in ("s3", "s3a"):
            return S3LeaseBackend(self.fs, path)
        raise ConfigurationError(
            f"{self!r}: rivermark's lease (the lock without a shared file system) is "
            f"implemented for s3:// and file:// only, not {self.scheme!r}; pass "
            f"ObjectStore({self.url!r}, lease=False) if you make sure that one job at a time "
            f"uses this location"
        )

    @property
    def lease(self) -> Lease | None:
        """The lease while this store holds it."""
        return self._lease

    def lock(self) -> None:
        """Take the lease (see :mod:`rivermark.checkpoint.stores.lease`); refuse if another job holds it."""
        if not self.lease_enabled:
            return
        lease = Lease(self._lease_backend(), self.url, ttl=self.lease_ttl)
        self._write("take the lease", lease.acquire)
        self._lease = lease

    def unlock(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()


def _protocols(fs: object) -> tuple[str, ...]:
    # optional: a filesystem object may not declare its protocols
    proto = getattr(fs, "protocol", ())
    return (proto,) if isinstance(proto, str) else tuple(proto)
