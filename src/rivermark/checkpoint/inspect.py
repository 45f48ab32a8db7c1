"""Read-only inspection of a checkpoint directory: list, show, verify, diff.

These are what ``rivermark checkpoints list|show|verify|diff DIR`` prints;
each returns a :class:`Report` (lines for stdout and stderr, and the exit
status) and never writes: the directory is opened without creating anything.
A path that is not a checkpoint directory raises
:class:`~rivermark.checkpoint.errors.NotACheckpointDirectoryError`, an epoch
that does not exist :class:`~rivermark.checkpoint.errors.CheckpointNotFoundError`
(usage errors, exit status 2).  A damaged checkpoint is reported in one line
and gives status 1.

>>> import tempfile
>>> verify_checkpoints(tempfile.mkdtemp())
Traceback (most recent call last):
...
rivermark.checkpoint.errors.NotACheckpointDirectoryError: ...
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CheckpointCorruptError, CheckpointNotFoundError, NotACheckpointDirectoryError
from .manifest import Manifest
from .store import LocalDirectoryStore, Store, open_store

logger = logging.getLogger(__name__)

__all__ = [
    "Report",
    "open_checkpoint_directory",
    "list_checkpoints",
    "show_checkpoint",
    "verify_checkpoints",
    "diff_checkpoints",
]


@dataclass(frozen=True)
class Report:
    """What an inspection prints: ``out`` and ``err`` lines, and the exit ``status``."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    status: int = 0


def open_checkpoint_directory(path: str | os.PathLike[str]) -> Store:
    """The store in ``path`` (a directory or URL), opened read-only.

    Raises :class:`NotACheckpointDirectoryError` if nothing is there.
    """
    hint = "pass the directory given to 'rivermark run --checkpoint'"
    if "://" in os.fspath(path):
        try:
            return open_store(path, create=False)
        except CheckpointNotFoundError as e:
            raise NotACheckpointDirectoryError(f"{e}; {hint}") from None
    p = Path(path)
    if not p.exists():
        raise NotACheckpointDirectoryError(f"no such checkpoint directory {str(p)!r}; {hint}")
    if not p.is_dir():
        raise NotACheckpointDirectoryError(
            f"{str(p)!r} is a file, not a checkpoint directory; {hint}"
        )
    if not (p / "checkpoints").is_dir():
        raise NotACheckpointDirectoryError(
            f"{str(p)!r} is not a rivermark checkpoint directory (it has no 'checkpoints' "
            f"directory); {hint}"
        )
    return LocalDirectoryStore(p, create=False)


def _where(store: Store) -> str:
    if isinstance(store, LocalDirectoryStore):
        return repr(str(store.path))
    return repr(store.location() or store)


def _fmt_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _positions(m: Manifest) -> list[str]:
    lines = []
    for sid, pos in sorted(m.positions.items()):
        if isinstance(pos, dict):
            for part, off in sorted(pos.items(), key=lambda kv: str(kv[0])):
                lines.append(f"  position {sid}[{part}] = {off!r}")
        else:
            lines.append(f"  position {sid} = {pos!r}")
    return lines


def _existing(store: Store, epoch: int) -> int:
    epochs = store.list_epochs()
    if epoch not in epochs:
        have = ", ".join(map(str, epochs)) or "none"
        raise CheckpointNotFoundError(
            f"{_where(store)} has no checkpoint {epoch!r} (checkpoints: {have}); "
            "see 'rivermark checkpoints list'"
        )
    return epoch


def _no_checkpoints(store: Store) -> Report:
    return Report(err=[f"no checkpoints in {_where(store)}"], status=1)


def list_checkpoints(path: str | os.PathLike[str]) -> Report:
    """One line per checkpoint: epoch, time, state size (or why its manifest is damaged)."""
    store = open_checkpoint_directory(path)
    epochs = store.list_epochs()
    if not epochs:
        return Report(out=["no checkpoints"])
    out = []
    for e in epochs:
        try:
            m = store.load_manifest(e)
            out.append(f"{e:>12}  {_fmt_time(m.time)}  {m.total_size:>10} bytes")
        except CheckpointCorruptError as err:
            out.append(f"{e:>12}  DAMAGED: {err}")
    return Report(out=out)


def verify_checkpoints(path: str | os.PathLike[str], epoch: int | None = None) -> Report:
    """Check every checkpoint (or ``epoch``); status 1 if one is damaged or there is none."""
    store = open_checkpoint_directory(path)
    epochs = store.list_epochs() if epoch is None else [_existing(store, epoch)]
    if not epochs:
        return _no_checkpoints(store)
    out, good = [], []
    for e in epochs:
        try:
            store.verify(e)
            good.append(e)
            out.append(f"{e:>12}  ok")
        except CheckpointCorruptError as err:
            out.append(f"{e:>12}  DAMAGED: {err}")
    bad = len(epochs) - len(good)
    if epoch is None:
        if good:
            out.append(f"{len(good)} of {len(epochs)} verify; a job resumes from {good[-1]}")
        else:
            out.append(
                f"none of {len(epochs)} verifies; a job refuses to start (restore a good copy, "
                "or run with --from-scratch)"
            )
    return Report(out=out, status=1 if bad else 0)


def _load(store: Store, epoch: int) -> Manifest | Report:
    try:
        return store.load_manifest(epoch)
    except CheckpointCorruptError as err:
        return Report(err=[f"damaged: {err}"], status=1)


def show_checkpoint(path: str | os.PathLike[str], epoch: int | None = None) -> Report:
    """Positions, state sizes and sink handles of ``epoch`` (default: the newest)."""
    store = open_checkpoint_directory(path)
    epochs = store.list_epochs()
    if not epochs:
        return _no_checkpoints(store)
    e = epochs[-1] if epoch is None else _existing(store, epoch)
    m = _load(store, e)
    if isinstance(m, Report):
        return m
    out = [f"checkpoint {e} at {_fmt_time(m.time)}", *_positions(m)]
    for nid, info in sorted(m.state.items()):
        out.append(f"  state {nid}: {info['size']} bytes sha256={info['sha256'][:12]}")
    for kid, handle in sorted(m.sinks.items()):
        out.append(f"  sink {kid}: {handle!r}")
    return Report(out=out)


def diff_checkpoints(
    path: str | os.PathLike[str], a: int | None = None, b: int | None = None
) -> Report:
    """What changed from checkpoint ``a`` to ``b`` (default: the two newest)."""
    store = open_checkpoint_directory(path)
    epochs = store.list_epochs()
    if not epochs:
        return _no_checkpoints(store)
    ea = _existing(store, a) if a is not None else (epochs[-2] if len(epochs) > 1 else epochs[-1])
    eb = _existing(store, b) if b is not None else epochs[-1]
    ma, mb = _load(store, ea), _load(store, eb)
    if isinstance(ma, Report):
        return ma
    if isinstance(mb, Report):
        return mb
    out = [f"diff {ea} -> {eb}"]
    for sid in sorted(set(ma.positions) | set(mb.positions)):
        pa, pb = ma.positions.get(sid), mb.positions.get(sid)
        if pa != pb:
            out.append(f"  position {sid}: {pa!r} -> {pb!r}")
    for nid in sorted(set(ma.state) | set(mb.state)):
        sa, sb = ma.state.get(nid), mb.state.get(nid)
        if sa != sb:
            size_a = sa["size"] if sa else None
            size_b = sb["size"] if sb else None
            out.append(f"  state {nid}: {size_a} -> {size_b} bytes (checksum differs)")
    for kid in sorted(set(ma.sinks) | set(mb.sinks)):
        if ma.sinks.get(kid) != mb.sinks.get(kid):
            out.append(f"  sink {kid}: {ma.sinks.get(kid)!r} -> {mb.sinks.get(kid)!r}")
    if ma.fingerprint != mb.fingerprint:
        out.append("  graph fingerprint differs")
    return Report(out=out)
