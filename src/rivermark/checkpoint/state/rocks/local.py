"""The local state directory of RocksDB state: live databases and local checkpoints.

Layout (``state_dir``, one per job; ``Job(state_dir=...)``)::

    STATE_DIR/.lock                                      held by the job using it
    STATE_DIR/<node-id>/<attr>/db-<pid>-<random>/        a live database
    STATE_DIR/<node-id>/<attr>/ckpt-000000000042/        RocksDB checkpoint of epoch 42

``<node-id>`` and ``<attr>`` are encoded by
:func:`rivermark.checkpoint.stores.names.file_name` (one component each, whatever
the id holds).  Each database opened gets a live directory of its own.  A job that ended
has released its store but its process may keep the database open (the
state stays readable after ``run()``), and RocksDB goes on compacting it:
the next owner of the store, in another process on the same machine (the
new owner of a Kafka partition), must neither remove that directory nor
share it, or each database would delete the other's files by name.  A live
directory is removed when its database is closed; one left by a process
that died is removed by the next open in that home, once RocksDB's lock on
it is free (:func:`_sweep`).  A home removes only the local checkpoints it
made or restored from; a restore or a fresh start (the store's lock held)
removes those of earlier owners: a process that lost its store's lease and
has not noticed yet does not remove what its successor writes.

A checkpoint's barrier writes the mapping's changed keys to its database
and takes a RocksDB checkpoint into ``ckpt-<epoch>`` (the SST files hard
linked, the small files copied: :meth:`Home.take`).  The files are then
described (sha256 and size; an SST file's digest is computed once, as SST
files never change) and the ones the store does not hold yet are uploaded
in the worker thread.  The local checkpoint of the newest durable epoch is
kept (and the one being written); older ones are deleted at the next
barrier.

At restore (:meth:`Home.check_local`, :meth:`Home.promote`) the local
``ckpt-<epoch>`` of the checkpoint being restored is used as it is when it
holds exactly the files the manifest names, each with the manifest's
sha256 and size: its SST files are hard linked into a new live directory
(nothing downloaded, no key re-inserted).  Otherwise (a fresh machine, another epoch, or a damaged
file: a WARNING names it) the directory is replaced by the files fetched
from the store, each checked against the manifest's digest before use.
The live database of an earlier run is never used: it may hold writes
after the checkpoint.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rivermark.checkpoint.errors import CheckpointCorruptError
from rivermark.checkpoint.faults import fault_point
from rivermark.checkpoint.state.rocks.mapping import (
    Frozen,
    RocksKeyedState,
    RocksSettings,
    open_db,
)
from rivermark.checkpoint.state.rocks.writes import background_error, store_error
from rivermark.checkpoint.stores.names import file_name as safe_name
from rivermark.checkpoint.stores.store import Store, fsync_dir

logger = logging.getLogger(__name__)

__all__ = ["Home", "LocalCheckpoint", "Restored", "safe_name", "remove_unused"]

#: files of a RocksDB checkpoint other than SST files up to this size go in the state file
INLINE_MAX = 1 << 20

#: the lock of a state directory (no encoded node id starts with a dot)
LOCK_NAME = ".lock"

#: the live directories of the databases open in this process
_LIVE: set[Path] = set()


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass
class LocalCheckpoint:
    """A RocksDB checkpoint of a barrier (made in ``directory``), and what the store has."""

    epoch: int
    directory: Path
    #: sha256 of the files the newest durable checkpoint names (in the store already)
    known: frozenset[str]
    #: the newest durable epoch at the barrier (its local checkpoint is kept)
    last: int
    #: the changes handed over at the barrier
    frozen: Frozen
    #: whether the changes are written and the RocksDB checkpoint taken (see Home.make)
    made: bool = False


@dataclass
class Restored:
    """How a node's RocksDB state was restored (what the job reports)."""

    seconds: float
    local: bool
    files: int
    bytes: int
    #: why the local checkpoint was not used (None: it was, or there was none)
    damaged: str | None = None


@dataclass
class Home:
    """The local directory of one RocksDB mapping (one node's attribute)."""

    root: Path
    settings: RocksSettings
    #: SST file name -> (size, sha256), for this database's lifetime (SSTs never change)
    digests: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: epoch -> files described for it (name -> {"sha256", "size"}), not known durable yet
    written: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: the newest durable epoch and the digests of its files
    durable: tuple[int, frozenset[str]] = (0, frozenset())
    mapping: RocksKeyedState | None = None
    #: the live directory of ``mapping`` (None: no database open)
    live: Path | None = None
    #: the local checkpoints this home made or restored from (the ones it removes)
    mine: set[Path] = field(default_factory=set)
    #: where the files are uploaded to and fetched from
    store: Store | None = None
    #: the checkpoint taken at the last barrier, until it is made
    pending: LocalCheckpoint | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ckpt_dir(self, epoch: int) -> Path:
        return self.root / f"ckpt-{epoch:012d}"

    # ------------------------------------------------------------------ opening
    def open(self, read: object, initial: object = ()) -> RocksKeyedState:
        """A new, empty database (any earlier one removed), filled with ``initial``."""
        live = self._new_live()
        self._drop_checkpoints(keep=None)
        live.mkdir(mode=0o700)
        self.digests.clear()
        m = self._open_mapping(live, read)
        m.update(initial)
        m.flush()
        return m

    def _new_live(self) -> Path:
        """The path of a new live directory (this home's database closed, stale ones removed)."""
        self.close()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        _sweep(self.root)
        return self.root / f"db-{os.getpid()}-{secrets.token_hex(4)}"

    def _open_mapping(self, live: Path, read: Any) -> RocksKeyedState:
        self.live = live
        _LIVE.add(live)
        db = open_db(live, self.settings)
        if os.environ.get("RIVERMARK_FAULT", "").startswith("rocks-compaction"):
            _watch_compactions(db)
        self.mapping = RocksKeyedState(
            db, str(live), self.settings.limit, read, self.settings.write_options(), self
        )
        return self.mapping

    def close(self) -> None:
        """Close the database and remove its live directory (no checkpoint needs it)."""
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None
        if self.live is not None:
            shutil.rmtree(self.live, ignore_errors=True)
            _LIVE.discard(self.live)
            self.live = None

    # ------------------------------------------------------------------ checkpoints
    def take(self, epoch: int, last: int) -> LocalCheckpoint:
        """At the barrier of ``epoch`` (``last``: the newest durable one): hand the changes over.

        O(keys cached) in C; :meth:`upload` (the worker thread) writes them
        and takes the RocksDB checkpoint.
        """
        assert self.mapping is not None
        if last in self.written:
            files = self.written[last]
            self.durable = (last, frozenset(i["sha256"] for i in files.values()))
        for e in [e for e in self.written if e <= last]:
            del self.written[e]
        known = self.durable[1] if self.durable[0] == last else frozenset()
        cp = LocalCheckpoint(epoch, self.ckpt_dir(epoch), known, last, self.mapping.hand_over())
        self.pending = cp
        return cp

    def make(self, cp: LocalCheckpoint) -> None:
        """Write the changes handed over and take the RocksDB checkpoint, once.

        In the worker thread, or in the loop thread when its mapping needs the
        database first (:meth:`make_pending`).  The local checkpoints this
        home made or restored from, but the newest durable one, are removed
        first, and a leftover of ``cp``'s epoch from a run that crashed; the
        ones of other processes are not (:meth:`promote` removes those of a
        previous owner).
        """
        with self._lock:
            if cp.made:
                return
            mapping = self.mapping
            assert mapping is not None
            try:
                mapping.write_frozen(cp.frozen)
                keep = self.ckpt_dir(cp.last)
                for d in [d for d in self.mine if d != keep]:
                    shutil.rmtree(d, ignore_errors=True)
                    self.mine.discard(d)
                for d in (cp.directory, cp.directory.with_name(cp.directory.name + ".tmp")):
                    shutil.rmtree(d, ignore_errors=True)
                self.mine.add(cp.directory)
                _rocksdict_checkpoint(mapping.db, cp.directory)
                cp.made = True
            finally:
                # only now may other writes reach the database (or the job stops)
                mapping.release(cp.frozen)
                if self.pending is cp:
                    self.pending = None

    def make_pending(self) -> None:
        """The pending checkpoint made now (its mapping needs the database)."""
        cp = self.pending
        if cp is not None:
            self.make(cp)

    def describe(self, cp: LocalCheckpoint) -> tuple[dict[str, dict[str, Any]], dict[str, bytes]]:
        """Every file of ``cp`` with its sha256 and size, and the bytes of the small ones.

        SST files are shared files (uploaded once, named by the manifest);
        the other files (CURRENT, MANIFEST, OPTIONS: small, rewritten at every
        checkpoint) go inside the node's state file (``"inline": true``).
        """
        files: dict[str, dict[str, Any]] = {}
        small: dict[str, bytes] = {}
        for entry in sorted(os.scandir(cp.directory), key=lambda e: e.name):
            size = entry.stat().st_size
            if not entry.name.endswith(".sst") and size <= INLINE_MAX:
                data = Path(entry.path).read_bytes()
                small[entry.name] = data
                files[entry.name] = {
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "inline": True,
                }
                continue
            known = self.digests.get(entry.name)
            if known is not None and known[0] == size:
                digest = known[1]
            else:
                digest = _sha256_file(Path(entry.path))
                if entry.name.endswith(".sst"):
                    self.digests[entry.name] = (size, digest)
            files[entry.name] = {"sha256": digest, "size": size}
        self.written[cp.epoch] = files
        return files, small

    def upload(
        self, cp: LocalCheckpoint, store: Store
    ) -> tuple[dict[str, dict[str, Any]], dict[str, bytes]]:
        """Write, checkpoint, describe ``cp`` and upload the files the store lacks (worker)."""
        self.make(cp)
        files, small = self.describe(cp)
        sent: set[str] = set()
        for name, info in files.items():
            digest = info["sha256"]
            if info.get("inline") or digest in cp.known or digest in sent:
                continue
            store.write_shared_file(digest, cp.directory / name)
            sent.add(digest)
            fault_point("rocks-upload")
        return files, small

    # ------------------------------------------------------------------ restore
    def check_local(
        self, epoch: int, files: dict[str, dict[str, Any]], small: dict[str, bytes]
    ) -> str | None:
        """None if ``ckpt-<epoch>`` holds exactly ``files``; else what differs."""
        d = self.ckpt_dir(epoch)
        if not d.is_dir():
            return "absent"
        why = _differs(d, files, small)
        if why is not None:
            return why
        names = sorted(n for n in files if n not in small)
        with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
            digests = list(pool.map(lambda n: _sha256_file(d / n), names))
        for name, digest in zip(names, digests):
            if digest != files[name]["sha256"]:
                return f"{name} does not match its sha256 in the manifest"
        for name, digest in zip(names, digests):
            if name.endswith(".sst"):
                self.digests[name] = (files[name]["size"], digest)
        return None

    def fetch(
        self,
        epoch: int,
        files: dict[str, dict[str, Any]],
        small: dict[str, bytes],
        store: Store,
        where: str,
    ) -> int:
        """Replace ``ckpt-<epoch>`` by ``files`` from ``store``, each checked; the bytes read."""
        d = self.ckpt_dir(epoch)
        shutil.rmtree(d, ignore_errors=True)
        tmp = d.with_name(d.name + ".fetching")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True, mode=0o700)
        total = 0
        for name, info in sorted(files.items()):
            data = small[name] if info.get("inline") else store.read_shared(info["sha256"])
            if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
                raise CheckpointCorruptError(
                    f"{where}: file {name!r} of the RocksDB state ({info['sha256'][:16]}) "
                    "does not match its sha256 in the manifest: the store is damaged; restore "
                    "a good copy of it, or start over with --from-scratch"
                )
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            total += 0 if info.get("inline") else len(data)
            if name.endswith(".sst"):
                self.digests[name] = (info["size"], info["sha256"])
        fsync_dir(tmp)
        os.rename(tmp, d)
        return total

    def promote(self, epoch: int, read: object) -> RocksKeyedState:
        """A new live database from ``ckpt-<epoch>``: SST files hard linked, the rest copied."""
        live = self._new_live()
        src = self.ckpt_dir(epoch)
        self._drop_checkpoints(keep=src)
        live.mkdir(mode=0o700)
        for entry in os.scandir(src):
            if entry.name.endswith(".sst"):
                os.link(entry.path, live / entry.name)
            else:
                shutil.copyfile(entry.path, live / entry.name)
        return self._open_mapping(live, read)

    def _drop_checkpoints(self, keep: Path | None) -> None:
        """At a restore or a fresh start: remove every local checkpoint but ``keep``.

        The store's lock is held, so they are those of earlier owners (of
        this process or another); ``keep`` becomes this home's.
        """
        for d in self.root.glob("ckpt-*"):
            if d != keep:
                shutil.rmtree(d, ignore_errors=True)
        self.mine = set() if keep is None else {keep}


def _sweep(root: Path) -> None:
    """Remove the live directories in ``root`` that no database uses any more.

    One is in use when a database of this process has it open, or when
    RocksDB's lock on its ``LOCK`` file is held (by another process: the
    lock is a POSIX record lock, so it is probed only on directories no
    database of this process has open).  ``db`` is the live directory of an
    earlier rivermark.
    """
    for d in root.iterdir():
        if not (d.name == "db" or d.name.startswith("db-")) or d in _LIVE or not d.is_dir():
            continue
        if _locked(d / "LOCK"):
            logger.debug("%s is open in another process: left alone", d)
            continue
        shutil.rmtree(d, ignore_errors=True)


def remove_unused(root: Path) -> bool:
    """Remove everything under ``root`` but the live databases still open; whether it is gone.

    A live directory is kept when a database of this process has it open,
    or another process holds RocksDB's lock on it (see :func:`_sweep`); so
    are the directories that lead to one, and the lock of a state directory
    (``.lock``: its holder removes it last).  Symbolic links are removed,
    never followed.
    """
    kept = False
    for p in list(root.iterdir()) if root.is_dir() and not root.is_symlink() else []:
        if p.name == LOCK_NAME:
            kept = True
        elif p.is_symlink() or not p.is_dir():
            p.unlink(missing_ok=True)
        elif p.name == "db" or p.name.startswith("db-"):
            if p in _LIVE or _locked(p / "LOCK"):
                kept = True
            else:
                shutil.rmtree(p, ignore_errors=True)
        elif p.name.startswith("ckpt-"):
            shutil.rmtree(p, ignore_errors=True)
        else:
            kept = not remove_unused(p) or kept
    if kept:
        return False
    try:
        root.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _locked(path: Path) -> bool:
    """Whether another process holds RocksDB's lock on ``path`` (False: no such file)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: leave it
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _differs(d: Path, files: dict[str, dict[str, object]], small: dict[str, bytes]) -> str | None:
    """What differs between directory ``d`` and ``files`` (names, kinds, sizes, small files)."""
    present = {e.name: e for e in os.scandir(d)}
    if set(present) != set(files):
        extra = sorted(set(present) - set(files))
        missing = sorted(set(files) - set(present))
        return f"files differ (missing {missing[:3]}, extra {extra[:3]})"
    for name, info in files.items():
        entry = present[name]
        if not entry.is_file(follow_symlinks=False):
            return f"{name} is not a regular file"
        size = entry.stat().st_size
        if size != info["size"]:
            return f"{name} has {size} bytes, the manifest says {info['size']}"
    for name, data in small.items():
        if (d / name).read_bytes() != data:
            return f"{name} differs from the checkpoint's"
    return None


def _watch_compactions(db: Any) -> None:
    """Fault point ``rocks-compaction``: reached when RocksDB compacts (crash tests only).

    A thread looks every 0.2 ms whether a compaction runs in ``db``, or ran
    since its last look (fewer files in level 0): a compaction of small
    files takes less than a look on a busy machine.  It is started only when
    ``RIVERMARK_FAULT`` names the point.
    """

    def level0() -> int:
        return int(db.property_int_value("rocksdb.num-files-at-level0") or 0)

    def watch() -> None:
        try:
            seen = level0()
            while True:
                now = level0()
                if db.property_int_value("rocksdb.num-running-compactions") or now < seen:
                    fault_point("rocks-compaction")
                    time.sleep(0.05)  # the next compaction, for rocks-compaction:N
                    now = level0()
                seen = now
                time.sleep(0.0002)
        except Exception:  # the database was closed
            return

    threading.Thread(target=watch, name="rivermark-compaction-fault", daemon=True).start()


#: seconds a checkpoint's memtable flush may take before the checkpoint fails
FLUSH_TIMEOUT = 120.0


def _rocksdict_checkpoint(db: Any, target: Path, timeout: float = FLUSH_TIMEOUT) -> None:
    """A RocksDB checkpoint of ``db`` in ``target``, its memtable flushed first.

    rocksdict holds the GIL while RocksDB works, and a checkpoint flushes the
    memtable (it writes an SST file): so the flush is started in RocksDB's
    own thread and waited for here with the GIL released (the pipeline runs
    meanwhile); the checkpoint then only links the files.  Nothing else
    writes to the database until it is taken (see ``Home.make``).

    The wait is bounded: a flush that failed (a full disk) stays pending for
    ever, so RocksDB's background error is read at every look and fails the
    checkpoint at once with its cause (:class:`~rivermark.errors.StateStoreError`,
    naming the state directory), and a flush still running after ``timeout``
    seconds fails it too.
    """
    import rocksdict

    path = db.path()
    try:
        db.flush(False)
    except Exception as e:  # the background error of an earlier flush
        raise store_error(path, e) from None
    deadline = time.monotonic() + timeout
    pause = 0.001
    while db.property_int_value("rocksdb.mem-table-flush-pending") or db.property_int_value(
        "rocksdb.num-running-flushes"
    ):
        if db.property_int_value("rocksdb.background-errors"):
            raise store_error(path, background_error(db))
        if time.monotonic() > deadline:
            raise store_error(
                path,
                f"RocksDB did not finish flushing its memtable within {timeout:g} s "
                "(a disk that does not accept writes?)",
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    try:
        rocksdict.Checkpoint(db).create_checkpoint(os.fspath(target))
    except Exception as e:
        raise store_error(os.fspath(target), e) from None
