"""Writes to a RocksDB state database that never hang the process, and their one-line errors.

rocksdict holds the GIL while RocksDB works.  A write that RocksDB *stops*
(its memtables are full and their flush has not finished) would wait
inside RocksDB with the GIL held, and when the flush cannot finish (a full
disk) it waits for ever, with every thread of the process, the one that
would notice the failure included.  So every write is first made with
``no_slowdown``: RocksDB returns at once instead of waiting ("Write
stall"), and :func:`write` waits here, the GIL released, with a growing
pause, then writes the same operations again.  Meanwhile it reads
RocksDB's background error (the failed flush, e.g. ENOSPC) and stops with
its cause, and it gives up after :data:`STALL_TIMEOUT` seconds.

A write that RocksDB only *slows down* (many files waiting for compaction:
a delay it computes from the batch's size and its write rate, never a
wait for another event) is made again without ``no_slowdown``, so RocksDB
delays it exactly as it would have: retrying it from here would not do,
since every refused try uses up the write budget the next one needs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rivermark.errors import StateStoreError

__all__ = ["STALL_TIMEOUT", "background_error", "store_error", "write"]

#: seconds a write may wait for RocksDB to accept it before the job stops with one line
STALL_TIMEOUT = 120.0
#: the longest pause between two tries of a stalled write
_MAX_PAUSE = 0.05


def store_error(path: str, error: BaseException | str) -> StateStoreError:
    """One line for a write to the RocksDB state in ``path`` that failed with ``error``."""
    text = str(error).strip()
    low = text.lower()
    if "no space left" in low or "enospc" in low:
        cause = "no space left on the device (ENOSPC)"
        remedy = "free disk space there, or give the job a state_dir on a larger disk"
    else:
        cause = text.splitlines()[0] if text else type(error).__name__
        remedy = "fix the cause (free disk space, restore write permission), or give the job "
        remedy += "another state_dir"
    return StateStoreError(
        f"the RocksDB state in {path!r} cannot be written: {cause}; {remedy} "
        "(Job(state_dir=...), --state-dir) and run again: the job resumes from its last "
        "complete checkpoint"
    )


def _stalled(error: BaseException) -> bool:
    """RocksDB refused a ``no_slowdown`` write it would have made wait (``Status::Incomplete``)."""
    return "incomplete" in str(error).lower()


def _slowed_down(db: Any) -> bool:
    """RocksDB delays writes to a rate (a bounded delay), and has not stopped them."""
    return bool(db.property_int_value("rocksdb.actual-delayed-write-rate")) and not (
        db.property_int_value("rocksdb.is-write-stopped")
    )


def _waiting(options: Any) -> Any:
    """``options`` without ``no_slowdown``: RocksDB delays the write itself."""
    import rocksdict

    waiting: Any = rocksdict.WriteOptions()
    waiting.disable_wal = options.disable_wal
    waiting.sync = options.sync
    return waiting


def write(
    db: Any,
    fill: Callable[[Any], object],
    options: Any,
    path: str,
    *,
    timeout: float | None = None,
) -> None:
    """Write a new ``WriteBatch`` that ``fill(batch)`` fills; one line if it cannot be written.

    ``options`` are the database's write options with ``no_slowdown`` set.
    A write that RocksDB stops is tried again (``fill`` called again for a
    new batch: rocksdict consumes a batch even when the write fails) after
    a pause with the GIL released, until RocksDB takes it, reports a
    background error (its cause in the line), or ``timeout`` seconds
    (:data:`STALL_TIMEOUT`) pass; one it slows down is made at once with
    RocksDB's own delay (see the module docs).
    """
    import rocksdict

    if timeout is None:
        timeout = STALL_TIMEOUT
    deadline = 0.0
    pause = 0.001
    while True:
        batch = rocksdict.WriteBatch(raw_mode=True)
        fill(batch)
        try:
            db.write(batch, options)
            return
        except Exception as e:  # rocksdict raises a plain Exception("IO error: ...")
            if not _stalled(e):
                raise store_error(path, e) from None
        if _slowed_down(db):
            batch = rocksdict.WriteBatch(raw_mode=True)
            fill(batch)
            try:
                db.write(batch, _waiting(options))
            except Exception as e:
                raise store_error(path, e) from None
            return
        if db.property_int_value("rocksdb.background-errors"):
            raise store_error(path, background_error(db))
        now = time.monotonic()
        if not deadline:
            deadline = now + timeout
        elif now > deadline:
            raise store_error(
                path,
                f"RocksDB stalled a write for {timeout:g} s: its memtables are full and "
                "cannot be flushed (a disk that does not accept writes?)",
            )
        time.sleep(pause)
        pause = min(pause * 2, _MAX_PAUSE)


def background_error(db: Any) -> str:
    """The cause of ``db``'s background error, as far as RocksDB or the disk tell it.

    A flush that waits returns the error; else RocksDB's LOG names it; else a
    disk with (almost) no space left is the cause.
    """
    try:
        db.flush(True)
    except Exception as e:
        return str(e)
    path = Path(db.path())
    try:
        with open(path / "LOG", "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - (64 << 10)))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        tail = ""
    errors = [line for line in tail.splitlines() if "error" in line.lower()]
    if any("no space left" in line.lower() for line in errors):
        return "No space left on device"
    try:
        st = os.statvfs(path)
    except OSError:
        st = None
    if st is not None and st.f_bavail * st.f_frsize < (4 << 20):
        return f"No space left on device ({st.f_bavail * st.f_frsize} bytes free)"
    return errors[-1].strip() if errors else "a background flush or compaction failed"
