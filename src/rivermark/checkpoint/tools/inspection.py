"""Reading a checkpoint directory for people: list, show, verify, diff.

The ``rivermark checkpoints`` command prints what these functions return;
they hold no printing of their own, so other front ends (a notebook, the
live page) can use them too; reading what a checkpoint holds (a location
opened read-only, nodes' state decoded) is :mod:`.contents`, whose functions
this module offers as well.  Every function takes a :class:`Store` and
works on a directory that no job needs to be running on.  They are
read-only: :func:`open_checkpoint_location` opens a directory or URL without
creating anything and raises
:class:`~rivermark.checkpoint.errors.NotACheckpointDirectoryError` where no
checkpoints are; an epoch that does not exist raises
:class:`~rivermark.checkpoint.errors.CheckpointNotFoundError` (both usage
errors, exit status 2); a damaged manifest raises
:class:`~rivermark.checkpoint.errors.CheckpointCorruptError`.

>>> import tempfile
>>> from rivermark import Stream
>>> from rivermark.checkpoint import Job, LocalDirectoryStore
>>> d = tempfile.mkdtemp()
>>> source = Stream.from_iterable([1, 2, 3])
>>> _ = source.accumulate(lambda a, x: a + x, start=0, name="total").sink_to_list()
>>> Job(source, checkpoint=d, every=None).run()
>>> store = LocalDirectoryStore(d)
>>> [row["epoch"] for row in list_checkpoints(store)]
[1, 2]
>>> read_node_state(store, 2, "total")
{'state': 6}
>>> verify_checkpoints(store)[-1]["signature"]
'unsigned'
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from typing import Any

from rivermark.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    CheckpointSignatureError,
)
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.stores.manifest import Manifest, sha256_of
from rivermark.checkpoint.stores.signing import key_id
from rivermark.checkpoint.stores.store import Store
from rivermark.checkpoint.tools.contents import (
    CheckpointContents,
    chain_sizes,
    entry_count,
    open_checkpoint_location,
    pick_epoch,
    read,
    read_node_state,
    render_value,
    state_rows,
    untrusted_reason,
    where,
)
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "CheckpointContents",
    "read",
    "open_checkpoint_location",
    "where",
    "list_checkpoints",
    "show_checkpoint",
    "checkpoint_history",
    "verify_checkpoints",
    "diff_checkpoints",
    "describe_position",
    "read_node_state",
    "render_value",
    "state_rows",
    "chain_sizes",
    "format_time",
]


def format_time(t: float) -> str:
    """UTC time with milliseconds, e.g. ``2026-12-02 16:19:00.125Z``.

    >>> format_time(0.5)
    '1970-01-01 00:00:00.500Z'
    """
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def list_checkpoints(store: Store) -> list[dict[str, Any]]:
    """One row per checkpoint: epoch, time, state size, or the error reading its manifest.

    ``run`` is what the manifest says of the run that wrote it (``None`` for
    a checkpoint of an older rivermark); ``run_began`` says where a run
    begins in the list: ``"started fresh"`` or ``"resumed from N"`` on the
    first checkpoint listed of each run, ``None`` on the others.
    ``duration`` (end to end), ``write`` and ``pause`` are the manifest's
    ``timing`` in seconds (``None`` for a checkpoint of an older rivermark).
    """
    return [row for row, _ in _listed(store)]


def _listed(store: Store) -> list[tuple[dict[str, object], Manifest | None]]:
    """The rows of :func:`list_checkpoints`, each with its manifest (None: damaged), read once."""
    rows: list[tuple[dict[str, Any], Manifest | None]] = []
    previous = None
    for e in store.list_epochs():
        try:
            m = store.load_manifest(e)
        except CheckpointCorruptError as err:
            rows.append(({"epoch": e, "time": None, "size": None, "error": str(err)}, None))
            continue
        began = None
        if m.run is not None and m.run.get("started") != previous:
            resumed = m.run.get("resumed_from")
            began = "started fresh" if resumed is None else f"resumed from {resumed}"
        previous = m.run.get("started") if m.run is not None else None
        row = {
            "epoch": e,
            "time": m.time,
            "size": m.total_size,
            "kind": kind_of(m),
            "duration": None if m.timing is None else m.timing["duration"],
            "pause": None if m.timing is None else m.timing["pause"],
            "write": None if m.timing is None else m.timing.get("write"),
            "sources": len(m.positions),
            "state_files": len(m.state),
            "run": m.run,
            "run_began": began,
            "error": None,
        }
        rows.append((row, m))
    return rows


def checkpoint_history(store: Store) -> list[dict[str, Any]]:
    """:func:`list_checkpoints` with each checkpoint's positions explained and state per node.

    What ``rivermark ui DIR`` shows of a job that ran on ``store``; damaged
    checkpoints keep their row with the error.  Each manifest is read once.
    """
    rows = []
    for row, m in _listed(store):
        if m is not None:
            row["positions"] = {
                sid: " / ".join(meaning) for sid, meaning in _position_meanings(m).items()
            }
            row["state"] = {nid: int(info.get("size", 0)) for nid, info in sorted(m.state.items())}
        rows.append(row)
    return rows


def _position_meanings(m: Manifest) -> dict[str, list[str]]:
    """What each source's position in ``m`` means, in words (see :func:`describe_position`)."""
    return {
        sid: describe_position(m.fingerprint.get(sid), pos)
        for sid, pos in sorted(m.positions.items())
    }


def kind_of(m: Manifest) -> str:
    """``"savepoint"``, ``"delta"`` if some keyed state of ``m`` builds on an older one, or ``"full"``."""
    if m.savepoint:
        return "savepoint"
    return "delta" if any(link["base"] < m.epoch for link in m.chains.values()) else "full"


def prune_checkpoints(store: Store, keep: int, dry_run: bool = False) -> dict[str, Any]:
    """Delete all but the newest ``keep`` checkpoints of ``store``, as the job's retention does.

    A checkpoint that a kept one's delta chain needs stays (see
    :meth:`Store.prunable`).  The store's lock is taken first, so a job
    running on the store refuses the prune (it prunes itself to its own
    ``keep``).  Returns the epochs ``deleted`` (or, with ``dry_run``, those
    that would be) and the epochs ``kept``.
    """
    store.lock()
    try:
        epochs = store.list_epochs()
        doomed = store.prunable(epochs, keep) if dry_run else store.prune(keep)
    finally:
        store.unlock()
    return {"deleted": doomed, "kept": [e for e in epochs if e not in doomed]}


_KAFKA_KEY = re.compile(r"^(?P<topic>.+):(?P<partition>\d+)$")
#: the ids of a Kafka source's topics (``rivermark.kafka.topic_ids.TOPIC_IDS_KEY``)
_KAFKA_TOPIC_IDS = "topic_ids"
_PATH_ARG = re.compile(r"path=(?P<path>'[^']*'|\"[^\"]*\")")


def _line_of(path: str, offset: int) -> int | None:
    """The 1-based line that byte ``offset`` of ``path`` starts (None if unreadable)."""
    try:
        with open(path, "rb") as f:
            lines = 0
            left = offset
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                left -= len(chunk)
        return lines + 1
    except OSError:
        return None


def describe_position(signature: str | None, position: object) -> list[str]:
    """What a source's stored position means, one line per part.

    ``signature`` is the source's entry in the manifest's fingerprint (it
    names the source type and, for files, the path).

    >>> describe_position("FromIterable()", 3)
    ['item 3 of the iterable is the next to emit']
    >>> describe_position("FromKafka(topics=['t'], keys=False)", {"t:0": 42})
    ['topic t partition 0: offset 42 is the next to read']
    >>> describe_position("", {"t:0": 42, "topic_ids": {"t": "951d0gBFQTeDsmfAPqaBiQ"}})
    ['topic t partition 0: offset 42 is the next to read', "topic t: topic id '951d0gBFQTeDsmfAPqaBiQ' (a recreated topic is refused)"]
    """
    sig = signature or ""
    if sig.startswith("FromTextfile") and isinstance(position, dict) and "offset" in position:
        position = position["offset"]  # with the digest of the bytes before it
    if isinstance(position, dict):
        return _describe_parts(position)
    if sig.startswith("FromTextfile") and isinstance(position, int):
        return [_describe_file_offset(sig, position)]
    if sig.startswith("FromIterable") and isinstance(position, int):
        return [f"item {position} of the iterable is the next to emit"]
    if sig.startswith("Filenames") and isinstance(position, list):
        return [f"{len(position)} file name(s) already emitted"]
    return [repr(position)]


def _describe_parts(position: dict[object, object]) -> list[str]:
    """A position with parts (Kafka partitions and topic ids, or other keys)."""
    out: list[str] = []
    for key, off in sorted(position.items(), key=lambda kv: str(kv[0])):
        m = _KAFKA_KEY.match(str(key))
        if key == _KAFKA_TOPIC_IDS and isinstance(off, dict):
            out.extend(
                f"topic {t}: topic id {i!r} (a recreated topic is refused)"
                for t, i in sorted(off.items())
            )
        elif m:
            out.append(
                f"topic {m['topic']} partition {m['partition']}: offset {off!r} is the next to read"
            )
        else:
            out.append(f"{key}: {off!r}")
    return out


def _describe_file_offset(sig: str, position: int) -> str:
    """A text file's byte offset, with its line and the bytes left where the file is here."""
    pm = _PATH_ARG.search(sig)
    path = pm["path"][1:-1] if pm else None
    if path is None:
        return f"byte {position} is the next to read"
    line = _line_of(path, position)
    size = None
    with contextlib.suppress(OSError):
        size = os.path.getsize(path)
    where = f"byte {position} of {path}"
    if line is not None:
        where += f" (line {line})"
    if size is not None:
        where += f", {max(size - position, 0)} of {size} bytes left"
    return f"{where} is the next to read"


def show_checkpoint(store: Store, epoch: int | None = None) -> dict[str, Any]:
    """The manifest of ``epoch`` (default: the newest) with the positions explained.

    ``rocks`` gives, for each node whose keyed state is in RocksDB, the
    number of files of each mapping's RocksDB checkpoint and their bytes.
    """
    e = pick_epoch(store, epoch)
    m = store.load_manifest(e)
    return {
        "epoch": e,
        "time": m.time,
        "size": m.total_size,
        "positions": {
            sid: {"value": m.positions[sid], "meaning": meaning}
            for sid, meaning in _position_meanings(m).items()
        },
        "state": {nid: dict(info) for nid, info in sorted(m.state.items())},
        "chains": {nid: chain_sizes(store, e, nid) for nid in sorted(m.chains)},
        "rocks": {
            nid: {
                attr: {"files": len(names), "bytes": sum(int(i["size"]) for i in names.values())}
                for attr, names in sorted(attrs.items())
            }
            for nid, attrs in sorted(m.files.items())
        },
        "sinks": dict(sorted(m.sinks.items())),
        "fingerprint": dict(m.fingerprint),
    }


def verify_checkpoints(
    store: Store, epoch: int | None = None, deep: bool = False
) -> list[dict[str, Any]]:
    """Verify ``epoch`` (or every checkpoint).

    With ``deep``, each shared file of RocksDB state is also read and its
    sha256 compared (without it, as at a job's start, its size: a job checks
    a shared file's sha256 when it fetches it).

    One row per checkpoint: ``{"epoch", "ok", "error", "problem", "signature",
    "pickled"}``.  ``signature`` is ``ok``, ``unsigned``, ``foreign-signed``,
    ``bad-signature`` or ``unchecked`` (signed, and no key to check it with);
    ``pickled`` lists the nodes whose state holds pickled parts (found without
    unpickling anything).  ``problem`` names what is wrong: ``damaged``, a
    signature status, or ``untrusted`` (pickled state in a checkpoint that is
    neither verified nor in a trusted store: loading it would run code).

    ``superseded`` is true for an unsigned or foreign-signed checkpoint older
    than every checkpoint signed with the store's keys: what a store keeps
    from before a key was set (or rotated) until it is pruned.  A job with
    the key never resumes from it; it is not a failure of the store.
    ``savepoint`` says whether the checkpoint is marked a savepoint.
    """
    epochs = store.list_epochs() if epoch is None else [pick_epoch(store, epoch)]
    rows = [_verify_one(store, e, deep) for e in epochs]
    signed = [r["epoch"] for r in rows if r["signature"] == "ok"]
    for r in rows:
        r["superseded"] = bool(
            signed
            and epoch is None
            and r["problem"] in ("unsigned", "foreign-signed")
            and r["epoch"] < signed[0]
        )
    return rows


def _verify_one(store: Store, e: int, deep: bool = False) -> dict[str, Any]:
    row: dict[str, Any] = {"epoch": e, "ok": False, "error": None, "problem": None}
    row.update(signature=None, pickled=[], savepoint=False, refused=False)
    try:
        m, chains = store.load_chains(e)
    except CheckpointSignatureError as err:
        row.update(error=str(err), problem=err.status, signature=err.status)
        row["savepoint"] = bool(store.read_manifest(e).savepoint)  # read: its checksum held
        return row
    except CheckpointCorruptError as err:
        row.update(error=str(err), problem="damaged")
        return row
    row["signature"] = m.signature_status
    row["savepoint"] = bool(m.savepoint)
    if deep and (bad := _altered_shared_file(store, e, m)) is not None:
        # its size is right, so a job does not skip it: it stops at it
        row.update(error=bad, problem="damaged", refused=True)
        return row
    pickled = []
    for nid, blobs in chains.items():
        try:
            if any(map(codec.has_pickle, blobs)):
                pickled.append(nid)
        except ValueError as err:
            row.update(error=codec.undecodable(store.describe(e), nid, err), problem="damaged")
            row["refused"] = True  # its files pass their checks: a job stops at it, not past it
            return row
    row["pickled"] = sorted(pickled)
    if row["pickled"] and not store.trust.allow_pickle(m.signature_status):
        row.update(
            problem="untrusted",
            error=untrusted_reason(store, e, row["pickled"][0], m.signature_status),
            refused=True,
        )
        return row
    row["ok"] = True
    return row


def _altered_shared_file(store: Store, e: int, m: Manifest) -> str | None:
    """Why a shared file of checkpoint ``e`` is not what its manifest says (None: all are)."""
    for nid, attrs in m.files.items():
        for attr, names in attrs.items():
            for name, info in names.items():
                if info.get("inline"):
                    continue  # inside the state file, checked with it
                if sha256_of(store.read_shared(info["sha256"])) != info["sha256"]:
                    return (
                        f"{store.describe(e)}: file {name!r} of the RocksDB state {attr!r} of "
                        f"{nid!r} (shared/{info['sha256']}) does not match its sha256 (a job "
                        "that fetches it refuses to start): restore a good copy of it, or "
                        "start over with --from-scratch"
                    )
    return None


def resign_checkpoints(store: Store, dry_run: bool = False) -> list[dict[str, object]]:
    """Sign with the store's first key every checkpoint that an old key (or none) signed.

    The last step of a key rotation (``docs/security.md``): with the new key
    first and the old ones after it, each checkpoint (savepoints included,
    which retention never deletes) that verifies with an old key gets a new
    signature of the same manifest text with the new key; a store trusted
    with ``trust_store`` has its unsigned checkpoints signed too.  A
    checkpoint that does not verify is left as it is and reported.  Returns
    one row per checkpoint: ``{"epoch", "was", "action"}`` (``resigned``,
    ``kept``: already signed with the first key, or ``refused`` with
    ``error``).  Takes the store's lock: refused while a job runs there.
    """
    keyring = store.trust.keyring
    if keyring is None:
        raise ConfigurationError(
            f"re-signing {where(store)} needs the keys: set RIVERMARK_CHECKPOINT_KEY_FILE to a "
            "file with the new key first and the old keys after it (see docs/security.md)"
        )
    first = key_id(keyring.keys[0])
    rows: list[dict[str, Any]] = []
    store.lock()
    try:
        for e in store.list_epochs():
            try:
                m = store.load_manifest(e)
            except CheckpointSignatureError as err:
                rows.append({"epoch": e, "was": err.status, "action": "refused", "error": str(err)})
                continue
            except CheckpointCorruptError as err:
                rows.append({"epoch": e, "was": "damaged", "action": "refused", "error": str(err)})
                continue
            signer = m.signature.get("key") if isinstance(m.signature, dict) else None
            was = "unsigned" if signer is None else f"key {signer}"
            if signer == first:
                rows.append({"epoch": e, "was": was, "action": "kept"})
                continue
            body = json.loads(m.canonical)
            body["checksum"] = sha256_of(m.canonical.encode())
            body["signature"] = keyring.sign(m.canonical)
            if not dry_run:
                store.replace_manifest(e, json.dumps(body, indent=2, sort_keys=True).encode())
                store.load_manifest(e)  # read back: verifies with the first key
            rows.append({"epoch": e, "was": was, "action": "resigned"})
    finally:
        store.unlock()
    return rows


def diff_checkpoints(store: Store, a: int | None = None, b: int | None = None) -> dict[str, Any]:
    """What changed from checkpoint ``a`` to ``b`` (default: the last two)."""
    epochs = store.list_epochs()
    if not epochs:
        raise CheckpointNotFoundError(f"no checkpoints in {where(store)}")
    if a is None:
        a = epochs[-2] if len(epochs) > 1 else epochs[-1]
    if b is None:
        b = epochs[-1]
    a, b = pick_epoch(store, a), pick_epoch(store, b)
    ma, mb = store.load_manifest(a), store.load_manifest(b)
    positions = {
        sid: [ma.positions.get(sid), mb.positions.get(sid)]
        for sid in sorted(set(ma.positions) | set(mb.positions))
        if ma.positions.get(sid) != mb.positions.get(sid)
    }
    moved = {
        sid: describe_move(mb.fingerprint.get(sid) or ma.fingerprint.get(sid), pa, pb)
        for sid, (pa, pb) in positions.items()
    }
    state, entries = {}, {}
    for nid in sorted(set(ma.state) | set(mb.state)):
        sa, sb = ma.state.get(nid), mb.state.get(nid)
        if sa != sb:
            state[nid] = [sa["size"] if sa else None, sb["size"] if sb else None]
            entries[nid] = [entry_count(store, a, ma, nid), entry_count(store, b, mb, nid)]
    sinks = {
        kid: [ma.sinks.get(kid), mb.sinks.get(kid)]
        for kid in sorted(set(ma.sinks) | set(mb.sinks))
        if ma.sinks.get(kid) != mb.sinks.get(kid)
    }
    return {
        "from": a,
        "to": b,
        "positions": positions,
        "moved": moved,
        "state": state,
        "entries": entries,
        "sinks": sinks,
        "fingerprint_differs": ma.fingerprint != mb.fingerprint,
    }


def describe_move(signature: str | None, before: Any, after: Any) -> dict[str, Any]:
    """How far a source's position moved between two checkpoints.

    ``count`` is the distance in ``unit`` (``None`` when it has no measure),
    ``text`` says it for a person.

    >>> describe_move("FromIterable()", 2000, 3000)["text"]
    'moved +1,000 items (2000 -> 3000)'
    >>> describe_move("FromKafka(topics=['t'])", {"t:0": 5, "t:1": 7}, {"t:0": 15, "t:1": 9})
    {'count': 12, 'unit': 'records', 'text': 'moved +12 records over 2 partitions (t:0 +10, t:1 +2)'}
    >>> rotated = {"offset": 4, "dev": 1, "ino": 3}
    >>> describe_move("FromTextfile(path='in')", {"offset": 9, "dev": 1, "ino": 2}, rotated)["text"]
    'moved to another file (rotated or replaced): byte 9 -> byte 4'
    """
    sig = signature or ""
    unit = "items" if sig.startswith("FromIterable") else "records"
    if sig.startswith("FromTextfile"):
        if _other_file(before, after):
            text = (
                f"moved to another file (rotated or replaced): byte {_offset(before)} -> "
                f"byte {_offset(after)}"
            )
            return {"count": None, "unit": "bytes", "text": text}
        before, after, unit = _offset(before), _offset(after), "bytes"
    if _is_int(before) and _is_int(after):
        text = f"moved {after - before:+,} {unit} ({before} -> {after})"
        return {"count": after - before, "unit": unit, "text": text}
    if isinstance(before, dict) and isinstance(after, dict):
        moved = _partitions_moved(before, after)
        if moved is not None:
            return moved
    return {"count": None, "unit": None, "text": f"{before!r} -> {after!r}"}


def _offset(position: Any) -> Any:
    """A file position's byte offset (a dict with its digest, or a plain offset)."""
    return position.get("offset") if isinstance(position, dict) else position


def _other_file(before: object, after: object) -> bool:
    """Whether two file positions name different files (device and inode)."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return False
    return (before.get("dev"), before.get("ino")) != (after.get("dev"), after.get("ino"))


def _partitions_moved(before: dict[Any, Any], after: dict[Any, Any]) -> dict[str, Any] | None:
    """How far a Kafka source moved over the partitions both positions hold."""
    parts = sorted(k for k in after if _KAFKA_KEY.match(str(k)) and _is_int(after[k]))
    common = [k for k in parts if _is_int(before.get(k))]
    if not common:
        return None
    steps = {k: after[k] - before[k] for k in common}
    total = sum(steps.values())
    each = ", ".join(f"{k} {v:+,}" for k, v in steps.items() if v)
    text = f"moved {total:+,} records over {len(common)} partitions"
    text += f" ({each})" if each else ""
    if len(parts) > len(common):
        text += f"; {len(parts) - len(common)} partitions not in the older checkpoint"
    return {"count": total, "unit": "records", "text": text}


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
