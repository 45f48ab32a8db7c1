"""Telling files apart: content fingerprints and who holds a file's lock.

A checkpoint that records "this file, up to byte N" also records a digest of
the bytes just before N (:func:`tail_digest`).  On restore, the file at that
path must still hold those bytes: a file that was truncated, replaced or
rewritten, or another file under the same name, is detected without relying
on inode numbers (which change when a file is copied or restored from a
backup, although its content is the same).

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "f.txt")
>>> _ = open(path, "w").write("hello\\nworld\\n")
>>> tail_digest(path, 6) == tail_digest(path, 6), tail_digest(path, 6) == tail_digest(path, 12)
(True, False)
"""

from __future__ import annotations

import hashlib
import logging
import os

logger = logging.getLogger(__name__)

__all__ = ["TAIL_BYTES", "tail_digest", "lock_holder"]

#: how many bytes before a position the digest covers
TAIL_BYTES = 4096


def tail_digest(path: str, length: int, tail: int = TAIL_BYTES) -> str | None:
    """SHA-256 (hex) of bytes ``[max(0, length - tail), length)`` of ``path``.

    ``None`` when the file is missing or shorter than ``length``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size < length:
            return None
        start = max(0, length - tail)
        data = os.pread(fd, length - start, start)
        if len(data) != length - start:
            return None
        return hashlib.sha256(data).hexdigest()
    finally:
        os.close(fd)


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
