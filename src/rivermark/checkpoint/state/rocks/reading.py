"""Reading the RocksDB state of a checkpoint without a job: what the state tools show.

A node whose keyed state a job kept in RocksDB (``Job(state="rocksdb")``)
is stored as a state file ``{"rest", "rocks", "small"}`` (its other state,
the number of keys of each mapping, the small files of each mapping's
RocksDB checkpoint) and the SST files the manifest's ``files`` names, in
the store's shared area (see :mod:`.backend`).  :func:`read_rocks_state`
gives that node's state as a checkpoint of the in-memory backend gives it
(what ``read()``, ``rivermark checkpoints export`` and ``checkpoints show
--state`` print, and what ``write_savepoint`` takes back): the other state,
and each mapping as a dict of its keys and values, in the order RocksDB
keeps them (by the encoding of the key, :func:`rivermark.checkpoint.state.codec.pack`;
the in-memory backend keeps the order the keys were added in).

Each mapping is read from a new private temporary directory (mode 0700,
in :func:`tempfile.gettempdir`: ``TMPDIR``), removed afterwards:

1. every file the manifest names for it is taken (a small one from the
   state file, an SST file from the store's shared area) and checked
   against the manifest's sha256 and size before it is written; its name
   is data: one plain file name, else the checkpoint is damaged
   (:class:`~rivermark.checkpoint.errors.CheckpointCorruptError`), and it
   is created anew (never through a link, never twice);
2. the directory is opened by RocksDB read-only, every key and value is
   decoded with the store's pickle rules (``allow_pickle``), and the number
   of keys is checked against the state file's.

Nothing of the job's local state directory is read or written, and nothing
of the store is changed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from typing import Any

from rivermark.checkpoint.errors import CheckpointCorruptError
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.rocks.mapping import META_CF, _rocksdict
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.store import Store

logger = logging.getLogger(__name__)

__all__ = ["read_rocks_state", "rocks_key_counts"]

#: a file of a RocksDB checkpoint: one path component, no leading dot
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def rocks_key_counts(blob: bytes, *, allow_pickle: bool = False, what: str = "the state") -> Any:
    """The state file's other state and number of keys of each mapping: ``(rest, {attr: n})``.

    Cheap (the state file only): what a diff counts the entries with.
    """
    part = codec.loads(blob, allow_pickle=allow_pickle, what=what)
    return part["rest"], dict(part["rocks"])


def read_rocks_state(
    store: Store,
    manifest: Manifest,
    node: str,
    blob: bytes,
    *,
    allow_pickle: bool = False,
    what: str = "the state",
) -> tuple[dict[str, object], set[str]]:
    """The state of ``node`` (RocksDB state) in checkpoint ``manifest``, and its keyed attributes.

    ``blob`` is the node's state file, already checked against the
    manifest.  The state is ``{**rest, attr: {key: value, ...}, ...}``, as
    the in-memory backend's checkpoint of the same node gives it; the set
    names the attributes that are keyed state (see the module docs).
    """
    where = store.describe(manifest.epoch)
    part = codec.loads(blob, allow_pickle=allow_pickle, what=what)
    try:
        rest, counts, small = dict(part["rest"]), part["rocks"], part["small"]
    except (KeyError, TypeError) as e:
        raise CheckpointCorruptError(
            f"{where}: the state file of {node!r} is not one of RocksDB state ({e!r} missing)"
        ) from None
    files = manifest.files[node]
    if set(counts) != set(files):
        raise CheckpointCorruptError(
            f"{where}: the state file of {node!r} names the RocksDB state "
            f"{sorted(counts)}, the manifest {sorted(files)}"
        )
    read = codec.reader(allow_pickle=allow_pickle, what=what)
    content: dict[str, dict[Any, Any]] = {}
    for attr, names in files.items():
        content[attr] = _read_mapping(
            store, where, f"{attr!r} of {node!r}", names, small.get(attr, {}), read
        )
        if len(content[attr]) != counts[attr]:
            raise CheckpointCorruptError(
                f"{where}: the RocksDB state {attr!r} of {node!r} holds {len(content[attr])} "
                f"keys, its state file says {counts[attr]}"
            )
    return {**rest, **content}, set(content)


def _read_mapping(
    store: Store,
    where: str,
    label: str,
    names: dict[str, dict[str, object]],
    small: dict[str, bytes],
    read: object,
) -> dict[object, object]:
    """One mapping's keys and values, from its files written into a private temporary directory."""
    tmp = tempfile.mkdtemp(prefix="rivermark-read-")
    try:
        for name, info in sorted(names.items()):
            _write_checked(store, where, label, tmp, name, info, small)
        return _read_db(tmp, where, label, read)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_checked(
    store: Store,
    where: str,
    label: str,
    directory: str,
    name: str,
    info: dict[str, Any],
    small: dict[str, bytes],
) -> None:
    """File ``name`` of the RocksDB state into ``directory``, once checked against ``info``."""
    if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name):
        raise CheckpointCorruptError(
            f"{where}: the RocksDB state {label} names a file {name!r}, which is not a plain "
            "file name: the manifest is damaged"
        )
    if info.get("inline"):
        data = small.get(name)
        if not isinstance(data, bytes):
            raise CheckpointCorruptError(
                f"{where}: file {name!r} of the RocksDB state {label} is missing from its "
                "state file"
            )
    else:
        data = store.read_shared(info["sha256"])
    if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise CheckpointCorruptError(
            f"{where}: file {name!r} of the RocksDB state {label} ({info['sha256'][:16]}) does "
            "not match its sha256 in the manifest: the store is damaged; restore a good copy "
            "of it"
        )
    # optional: O_NOFOLLOW is missing on some platforms
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(os.path.join(directory, name), flags, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _read_db(path: str, where: str, label: str, read: Any) -> dict[Any, Any]:
    """Every key and value of the RocksDB checkpoint in ``path``, opened read-only, decoded."""
    r = _rocksdict()
    try:
        db = r.Rdict(
            path,
            r.Options(raw_mode=True),
            column_families={META_CF: r.Options(raw_mode=True)},
            access_type=r.AccessType.read_only(),
        )
    except Exception as e:
        raise CheckpointCorruptError(
            f"{where}: the RocksDB state {label} does not open ({e}): the checkpoint is damaged"
        ) from e
    try:
        return {read(k): read(v) for k, v in db.items()}
    finally:
        db.close()
