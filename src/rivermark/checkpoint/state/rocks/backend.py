"""Keyed state in RocksDB for a job: which nodes, their checkpoints, their restore.

``Job(state="rocksdb", state_dir=..., state_cache=...)`` (or
``state={"node-id": "rocksdb", ...}`` for some nodes) keeps every
:class:`rivermark.KeyedState` of those nodes in a RocksDB database
(:class:`~.mapping.RocksKeyedState`) in the job's local state directory.
The job calls, at its steps:

* :meth:`StateBackend.bind` before recovery (the store, the job's id); the
  state directory is created and locked only when a node keeps RocksDB
  state (its first :meth:`StateBackend.home`);
* :meth:`StateBackend.restored` from recovery, for a node whose state in the
  checkpoint is RocksDB state (the manifest's ``files`` names it): the local
  checkpoint is used if it verifies, else the files are fetched and checked;
* :meth:`StateBackend.adopt` after recovery: a node's in-memory
  ``KeyedState`` (a fresh start, or a checkpoint of the in-memory backend)
  is written into a new database and handed to the node (``set_state``);
* at a barrier, :func:`rocks_view` (from :func:`.views.view_of`) takes a
  RocksDB checkpoint of each mapping; the worker thread uploads its new
  files and :func:`files_of` puts their names and digests in the manifest;
* :meth:`StateBackend.release` when the job ends: the state directory's
  lock released; a default state directory removed but for the databases
  still open, which :meth:`StateBackend.close` (or the process's exit)
  removes.

The state directory is the job's alone while it runs: a lock (``.lock``,
``fcntl.flock``, naming the holder) refuses a second job on it, in this
process or another.  Without ``state_dir`` it is
``<temporary directory>/rivermark-state-<uid>/<job id>``; that parent must
be a directory of this user's with mode 0700 (created so), else the job is
refused (:func:`private_base`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import pickle
import socket
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rivermark._fileid import lock_or_holder
from rivermark.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointLockedError,
    CheckpointWriteError,
)
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.rocks.local import (
    LOCK_NAME,
    Home,
    LocalCheckpoint,
    Restored,
    remove_unused,
    safe_name,
)
from rivermark.checkpoint.state.rocks.mapping import DEFAULT_CACHE, RocksKeyedState, RocksSettings
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.store import Store
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError, StateStoreError
from rivermark.state import KeyedState, KeyedStore

logger = logging.getLogger(__name__)

__all__ = [
    "StateBackend",
    "RocksView",
    "rocks_attrs",
    "files_of",
    "copy_shared",
    "parse_cache",
    "default_state_base",
    "private_base",
]

_KINDS = ("memory", "rocksdb")
#: every open home of this process, by path: a new job on the same directory closes it
_OPEN: dict[Path, Home] = {}


#: backends with a default state directory: what is left of it goes when the process
#: exits (held here until then, as their databases are held in _OPEN)
_DEFAULT_DIRS: set[StateBackend] = set()


@atexit.register
def _remove_default_dirs() -> None:
    for backend in list(_DEFAULT_DIRS):
        try:
            backend.close()
        except Exception as e:  # the process is exiting: say it, do not raise
            logger.warning("could not remove %s (%s)", backend.state_dir, e)


def default_state_base() -> Path:
    """Where default state directories go: ``<temporary directory>/rivermark-state-<uid>``."""
    return Path(tempfile.gettempdir()) / f"rivermark-state-{os.getuid()}"


def private_base() -> Path:
    """:func:`default_state_base`, created with mode 0700, or refused unless this user's alone.

    Another user who owns it, or may write to it, could read the job's state
    or move it away while the job runs: refused with one line.
    """
    base = default_state_base()
    remedy = (
        "remove it, or pass a state directory of your own (Job(state_dir=...), --state-dir or "
        "RIVERMARK_STATE_DIR)"
    )
    try:
        base.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise ConfigurationError(
            f"Job: the default state directory {str(base)!r} cannot be created ({e.strerror}); "
            "pass a state directory of your own (Job(state_dir=...), --state-dir or "
            "RIVERMARK_STATE_DIR)"
        ) from None
    st = os.lstat(base)
    uid = os.getuid()
    if not stat.S_ISDIR(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise ConfigurationError(
            f"Job: the default state directory {str(base)!r} is {what}; {remedy}"
        )
    if st.st_uid != uid:
        raise ConfigurationError(
            f"Job: the default state directory {str(base)!r} belongs to uid {st.st_uid}, not "
            f"to this user (uid {uid}), who could read or move the job's state; {remedy}"
        )
    if st.st_mode & 0o077:
        raise ConfigurationError(
            f"Job: the default state directory {str(base)!r} has mode "
            f"{stat.S_IMODE(st.st_mode):04o}: other users may read it or move the job's state "
            f"away; make it 0700 (chmod 700 {str(base)!r}), or {remedy}"
        )
    return base


def rocks_attrs(state: Any) -> dict[str, RocksKeyedState]:
    """The RocksDB mappings among a node's state (empty: none)."""
    if not isinstance(state, dict):
        return {}
    return {a: v for a, v in state.items() if isinstance(v, RocksKeyedState)}


@dataclass
class RocksView:
    """One node's RocksDB state at a barrier: local checkpoints, uploaded in the worker."""

    node_id: str
    rest: bytes
    parts: dict[str, tuple[Home, LocalCheckpoint, int]]
    #: attr -> file name -> {"sha256", "size"}; filled by :meth:`serialise`
    files: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def serialise(self) -> bytes:
        small: dict[str, dict[str, bytes]] = {}
        for attr, (home, cp, _) in self.parts.items():
            assert home.store is not None
            try:
                self.files[attr], small[attr] = home.upload(cp, home.store)
            except StateStoreError as e:  # the local disk (full), not the store
                raise CheckpointWriteError(
                    f"Job: checkpoint {cp.epoch} could not be taken: {e}; every source and "
                    "sink was stopped, the last complete checkpoint is intact"
                ) from e
        return codec.dumps(
            {
                "rest": pickle.loads(self.rest),
                "rocks": {a: n for a, (_, _, n) in self.parts.items()},
                "small": small,
            }
        )


def rocks_view(node_id: str, state: dict[str, Any], epoch: int, last: int) -> RocksView:
    """At the barrier of ``epoch``: write each mapping out and take its RocksDB checkpoint."""
    rocks = rocks_attrs(state)
    rest = pickle.dumps({a: v for a, v in state.items() if a not in rocks})
    parts: dict[str, tuple[Home, LocalCheckpoint, int]] = {}
    for attr, m in rocks.items():
        home = m.home
        assert isinstance(home, Home)
        parts[attr] = (home, home.take(epoch, last), len(m))
    return RocksView(node_id, rest, parts)


def files_of(views: Mapping[str, object]) -> dict[str, dict[str, dict[str, dict[str, object]]]]:
    """The manifest's ``files``: each RocksDB view's (filled while the checkpoint is written)."""
    return {nid: v.files for nid, v in views.items() if isinstance(v, RocksView)}


def copy_shared(source: Store, target: Store, manifest: Manifest) -> None:
    """Copy the shared files ``manifest`` names from ``source`` to ``target``, each checked."""
    for digest, size in sorted(manifest.shared_files().items()):
        data = source.read_shared(digest)
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointCorruptError(
                f"{source.describe(manifest.epoch)}: shared file {digest} does not match its "
                "sha256 in the manifest: the store is damaged"
            )
        target.write_shared(digest, data)


#: the largest ``state_cache`` taken: a cache larger than any machine's memory bounds nothing
MAX_CACHE = 1 << 40


def parse_cache(value: object, what: str = "Job: state_cache") -> int:
    """The bytes of RocksDB cache ``value`` asks for (``None``: the default, 256 MiB).

    An int, or a string such as ``'256MiB'`` or ``'1.5G'``, from 8 MiB to
    1 TiB; anything else is a :class:`ConfigurationError` naming ``what``.

    >>> parse_cache("256MiB"), parse_cache("1.5G"), parse_cache(None) == DEFAULT_CACHE
    (268435456, 1610612736, True)
    """
    if value is None:
        return DEFAULT_CACHE
    n = -1
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str):
        text = value.strip().upper().removesuffix("B").removesuffix("I")
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        mult = units.get(text[-1:], 1)
        number = text[:-1] if text[-1:] in units else text
        try:
            n = int(float(number) * mult)
        except (ValueError, OverflowError):  # not a number, nan; inf (1e999)
            n = -1
    if 8 << 20 <= n <= MAX_CACHE:
        return n
    raise ConfigurationError(
        f"{what} must be a number of bytes from 8 MiB to 1 TiB (e.g. '256MiB'), got {value!r}"
    )


class StateBackend:
    """Where a job keeps each node's keyed state: in memory, or in RocksDB."""

    def __init__(
        self, state: Any = "memory", state_dir: Any = None, state_cache: Any = None
    ) -> None:
        if isinstance(state, Mapping):
            bad = {k: v for k, v in state.items() if v not in _KINDS or not isinstance(k, str)}
            if bad:
                raise ConfigurationError(
                    f"Job: state={dict(state)!r}: each node id maps to 'memory' or 'rocksdb', "
                    f"not {bad!r}"
                )
            self.default, self.per_node = "memory", dict(state)
        elif state in _KINDS:
            self.default, self.per_node = str(state), {}
        else:
            raise ConfigurationError(
                f"Job: state must be 'memory' (the default), 'rocksdb', or a dict of node ids "
                f"to either, got {state!r}"
            )
        if state_dir is not None and not isinstance(state_dir, (str, os.PathLike)):
            raise ConfigurationError(f"Job: state_dir must be a directory, got {state_dir!r}")
        self.state_dir: Path | None = None if state_dir is None else Path(state_dir)
        #: whether the state directory is the default one (the job's to remove)
        self.default_dir = state_dir is None
        self.job_id = ""
        self._lock_fd: int | None = None
        self.settings = RocksSettings(parse_cache(state_cache))
        self.store: Store | None = None
        self.homes: dict[tuple[str, str], Home] = {}
        #: node id -> how its RocksDB state was restored (time, local or fetched)
        self.restores: dict[str, Restored] = {}

    @property
    def used(self) -> bool:
        return self.default == "rocksdb" or "rocksdb" in self.per_node.values()

    def wants(self, node_id: str) -> bool:
        return bool(self.per_node.get(node_id, self.default) == "rocksdb")

    def bind(self, store: Store, job_id: str, stateful_ids: list[str]) -> None:
        """Before recovery: the store and the state directory (created)."""
        unknown = sorted(set(self.per_node) - set(stateful_ids))
        if unknown:
            raise ConfigurationError(
                f"Job: state={self.per_node!r} names {', '.join(map(repr, unknown))}, which "
                f"is no stateful node of the graph (those are: {', '.join(stateful_ids)})"
            )
        self.store = store
        self.job_id = job_id

    def directory(self) -> Path:
        """The state directory, created and locked (by the first node that keeps RocksDB state)."""
        if self._lock_fd is not None:
            assert self.state_dir is not None
            return self.state_dir
        if self.default_dir:
            self.state_dir = private_base() / safe_name(self.job_id)
        assert self.state_dir is not None
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise ConfigurationError(
                f"Job: state_dir {str(self.state_dir)!r} cannot be created ({e.strerror}); "
                "pass a writable directory on a local disk"
            ) from None
        self._lock_fd = self._lock(self.state_dir)
        if self.default_dir:
            _DEFAULT_DIRS.add(self)
        return self.state_dir

    def _lock(self, d: Path) -> int:
        """Take the lock of state directory ``d``; raise :class:`CheckpointLockedError` if held."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(d / LOCK_NAME, flags, 0o600)
        except OSError as e:
            raise ConfigurationError(
                f"Job: state_dir {str(d)!r} cannot be written ({e.strerror}: {e.filename!r}); "
                "pass a writable directory on a local disk"
            ) from None
        held_by = lock_or_holder(fd, "unknown holder")
        if held_by is not None:
            os.close(fd)
            raise CheckpointLockedError(
                f"Job: state directory {str(d)!r} is in use by another job ({held_by}); stop "
                "that job first, or give each job its own state directory (Job(state_dir=...), "
                "--state-dir)"
            ) from None
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        holder = (
            f"pid={os.getpid()} host={socket.gethostname()} started={started} "
            f"checkpoint={self.store!r}\n"
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        return fd

    def _unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # releases the flock

    def _remove_default(self) -> None:
        """The default state directory removed but for open databases (its lock held)."""
        d = self.state_dir
        assert d is not None and self._lock_fd is not None
        remove_unused(d)
        with contextlib.suppress(FileNotFoundError):
            if [p.name for p in d.iterdir()] == [LOCK_NAME]:
                os.unlink(d / LOCK_NAME)
                d.rmdir()

    def release(self) -> None:
        """At the job's end: the lock released (a default directory removed, open databases kept)."""
        if self._lock_fd is None:
            return
        try:
            if self.default_dir:
                self._remove_default()
        except OSError as e:
            logger.warning("could not remove the state directory %s (%s)", self.state_dir, e)
        finally:
            self._unlock()

    def home(self, node_id: str, attr: str) -> Home:
        key = (node_id, attr)
        home = self.homes.get(key)
        directory = self.directory()  # locked again by a job run a second time
        if home is None:
            root = directory / safe_name(node_id) / safe_name(attr)
            other = _OPEN.pop(root, None)
            if other is not None:  # a job before this one in this process
                other.close()
            home = self.homes[key] = Home(root, self.settings, store=self.store)
            _OPEN[root] = home
        return home

    # ------------------------------------------------------------------ restore
    def restored(
        self,
        n: Stream,
        nid: str,
        manifest: Manifest,
        blob: bytes,
        allow: bool,
        what: str,
        stored_id: str | None = None,
    ) -> dict[str, object]:
        """Node ``nid``'s state from checkpoint ``manifest``: its RocksDB state verified."""
        assert self.store is not None
        started = time.perf_counter()
        part = codec.loads(blob, allow_pickle=allow, what=what)
        state: dict[str, Any] = dict(part["rest"])
        where = self.store.describe(manifest.epoch)
        local, fetched, damaged = True, 0, None
        for attr, files in manifest.files[nid].items():
            home = self.home(nid, attr)
            small = part["small"].get(attr, {})
            why = home.check_local(manifest.epoch, files, small)
            if why is not None:
                local = False
                if why != "absent":
                    damaged = why
                    logger.warning(
                        "the local state directory %s does not hold checkpoint %d of node %s "
                        "(%s): fetching it from %r",
                        home.root, manifest.epoch, nid, why, self.store,
                    )  # fmt: skip
                fetched += home.fetch(manifest.epoch, files, small, self.store, where)
            m = home.promote(manifest.epoch, codec.reader(allow_pickle=allow, what=what))
            home.durable = (manifest.epoch, frozenset(i["sha256"] for i in files.values()))
            home.written.clear()
            expected = part["rocks"].get(attr)
            if len(m) != expected:
                raise CheckpointCorruptError(
                    f"{where}: the RocksDB state {attr!r} of {nid!r} holds {len(m)} keys, its "
                    f"state file says {expected}"
                )
            if self.wants(nid):
                state[attr] = m
            else:  # restored into the in-memory backend
                state[attr] = KeyedState.restored(m.copy())
                home.close()
        info = Restored(
            time.perf_counter() - started,
            local,
            sum(len(f) for f in manifest.files[nid].values()),
            fetched,
            damaged,
        )
        self.restores[nid] = info
        logger.info(
            "restored the RocksDB state of node %s (checkpoint %d) in %.3f s %s",
            nid, manifest.epoch, info.seconds,
            "from the local state directory (no download)" if local
            else f"from {self.store!r} ({info.files} files, {fetched} bytes fetched)",
            extra={"epoch": manifest.epoch, "duration_seconds": round(info.seconds, 6)},
        )  # fmt: skip
        return state

    # ------------------------------------------------------------------ adoption
    def adopt(self, nodes: list[tuple[str, Stream]]) -> None:
        """After recovery: each wanted node's other keyed state (in memory) into RocksDB."""
        if not self.used:
            return
        for nid, n in nodes:
            if not self.wants(nid):
                continue
            state = n.get_state()
            if not isinstance(state, dict):
                continue
            moved = {
                a: v
                for a, v in state.items()
                if isinstance(v, KeyedStore)
                and not (isinstance(v, RocksKeyedState) and v.home is self.homes.get((nid, a)))
            }
            if not moved:
                continue
            new = dict(state)
            for attr, ks in moved.items():
                content = ks.copy() if isinstance(ks, RocksKeyedState) else ks
                new[attr] = self.home(nid, attr).open(codec.reader(allow_pickle=True), content)
            n.set_state(new)
            logger.info(
                "node %s keeps %s in RocksDB (%s)",
                nid, ", ".join(sorted(moved)), self.state_dir,
            )  # fmt: skip

    def close(self) -> None:
        """Close every database of this backend (each live directory removed).

        The state directory's lock is released; a default state directory
        is removed, unless another job holds it now.
        """
        for home in self.homes.values():
            home.close()
            if _OPEN.get(home.root) is home:
                del _OPEN[home.root]
        _DEFAULT_DIRS.discard(self)
        d = self.state_dir
        if not self.default_dir or d is None:
            self._unlock()
            return
        if self._lock_fd is None:
            try:
                self._lock_fd = self._lock(d)
            except (CheckpointLockedError, ConfigurationError):
                return  # gone, or another job's now
        self.release()
