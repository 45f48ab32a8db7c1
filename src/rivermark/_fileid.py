"""Telling files apart: content fingerprints and who holds a file's lock.

A checkpoint that records "this file, up to byte N" also records a digest of
the bytes just before N (:func:`tail_digest`).  On restore, the file at that
path must still hold those bytes: a file that was truncated, replaced or
rewritten, or another file under the same name, is detected without relying
on inode numbers (which change when a file is copied or restored from a
backup, although its content is the same).  A reader's position also
records the identity (:func:`identity`: device and inode) of the file it has
open, so that a file renamed under it (log rotation) is found again in its
directory (:func:`find_identity`).

>>> import os, pathlib, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "f.txt")
>>> _ = pathlib.Path(path).write_text("hello\\nworld\\n")
>>> tail_digest(path, 6) == tail_digest(path, 6), tail_digest(path, 6) == tail_digest(path, 12)
(True, False)
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import stat

logger = logging.getLogger(__name__)

__all__ = [
    "TAIL_BYTES",
    "tail_digest",
    "fd_tail_digest",
    "identity",
    "find_identity",
    "lock_holder",
    "lock_or_holder",
]

#: how many bytes before a position the digest covers
TAIL_BYTES = 4096


def tail_digest(path: str, length: int, tail: int = TAIL_BYTES) -> str | None:
    """SHA-256 (hex) of bytes ``[max(0, length - tail), length)`` of ``path``.

    ``None`` when the file is missing or shorter than ``length``.
    """
    try:
        # optional: O_CLOEXEC is missing on some platforms
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        return fd_tail_digest(fd, length, tail)
    finally:
        os.close(fd)


def fd_tail_digest(fd: int, length: int, tail: int = TAIL_BYTES) -> str | None:
    """:func:`tail_digest` of the file open as ``fd`` (read through that descriptor)."""
    if os.fstat(fd).st_size < length:
        return None
    start = max(0, length - tail)
    data = os.pread(fd, length - start, start)
    if len(data) != length - start:
        return None
    return hashlib.sha256(data).hexdigest()


def identity(info: os.stat_result) -> tuple[int, int]:
    """``(st_dev, st_ino)``: which file a descriptor or path is, while it exists."""
    return info.st_dev, info.st_ino


def find_identity(directory: str, ident: tuple[int, int]) -> str | None:
    """The path of the regular file in ``directory`` with identity ``ident``, if any.

    A file renamed within its directory (``mv in in.1``, log rotation) keeps
    its identity; symbolic links are not followed.
    """
    try:
        entries = list(os.scandir(directory or "."))
    except OSError:
        return None
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and identity(info) == ident:
            return entry.path
    return None


def lock_or_holder(fd: int, unknown: str) -> str | None:
    """Take an exclusive ``flock`` on the file open as ``fd``, without waiting.

    None once it is held; else who holds it, as the holder wrote it into the
    file (the start of the file, stripped), or ``unknown`` if it wrote
    nothing.  The caller closes ``fd`` and refuses with its own words.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("a+") as first, open(first.name) as second:
    ...     _ = first.write("pid 42"); first.flush()
    ...     lock_or_holder(first.fileno(), "?"), lock_or_holder(second.fileno(), "?")
    (None, 'pid 42')
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return os.pread(fd, TAIL_BYTES, 0).decode(errors="replace").strip() or unknown
    return None


def lock_holder(fd: int) -> str:
    """Describe the process holding a ``flock`` on the file open as ``fd`` (Linux).

    Reads ``/proc/locks``; returns e.g. ``"pid 1234 (python app.py)"``, or
    ``"another process"`` where that cannot be told.
    """
    ino = os.fstat(fd).st_ino
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return "another process"
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF"
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[2] == "->":
            continue
        try:
            pid, inode = int(parts[4]), int(parts[5].rsplit(":", 1)[1])
        except (ValueError, IndexError):
            continue
        if inode != ino:
            continue
        if pid == os.getpid():
            return f"this process (pid {pid}: another sink, or an earlier job not yet closed)"
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        return f"pid {pid}" + (f" ({cmd})" if cmd else "")
    return "another process"
