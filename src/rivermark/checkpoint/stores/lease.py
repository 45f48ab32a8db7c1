"""A lease: the lock of a checkpoint location without a shared file system.

One object, ``LEASE``, next to the checkpoints, holds JSON::

    {"holder": {"pid": 4242, "host": "node-1", "pidns": "pid:[4026531836]",
                "started": "2026-12-02T20:00:00Z"},
     "token": "9f0c...", "ttl": 30.0, "expires": 1764705630.2}

Every change is a conditional write, so two processes never both believe
they hold it:

- **take**: create the object only if it does not exist (S3
  ``If-None-Match: *``; ``O_EXCL`` on a local file system).  If it exists
  and has not expired, the job is refused with the holder's identity.
- **renew**: every ``ttl / 3`` seconds, from a thread, and once more right
  before each checkpoint's manifest is written, the holder replaces the
  object only if it is still the version it wrote (S3 ``If-Match: <ETag>``).
  A failed condition means another job took the lease over: the holder marks
  it lost and its next checkpoint fails without writing a manifest.
- **take over**: a lease whose ``expires`` (the holder's wall clock) has
  passed, or whose holder is a process of this host (same host name and PID
  namespace) that no longer exists, is replaced conditionally on the version
  that was read; of two contenders exactly one wins.  A lease object that
  does not parse (torn, or written by something else) names no expiry: it
  is taken over only once it is ``ttl`` seconds old by the object's own
  modification time (the store's clock), so a holder that is alive has
  rewritten it by then.
- **release**: a conditional delete at the end of the job.

Expiry compares wall clocks of different machines: it assumes they agree to
within a small fraction of ``ttl`` (NTP).  A holder that cannot renew for
``ttl`` seconds (store unreachable, process frozen) counts its lease as lost
as well, so it does not write a manifest after another job may have taken
over.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from rivermark.checkpoint.errors import CheckpointLockedError

logger = logging.getLogger(__name__)

__all__ = ["Lease", "LeaseBackend", "S3LeaseBackend", "LocalLeaseBackend", "DEFAULT_LEASE_TTL"]

#: seconds a lease lasts without renewal (``RIVERMARK_LEASE_TTL`` overrides it)
DEFAULT_LEASE_TTL = 30.0


class LeaseBackend(Protocol):
    """Conditional operations on the one lease object.

    ``version`` is an opaque token of the object's content (an ETag); every
    write returns the new one.
    """

    def create(self, data: bytes) -> str | None:
        """Write ``data`` if the object does not exist; its version, or ``None`` if it exists."""

    def read(self) -> tuple[bytes, str] | None:
        """The object's content and version, or ``None`` if it does not exist."""

    def modified_at(self) -> float | None:
        """Unix time the object was last written (the store's clock), or ``None`` if gone."""

    def replace(self, data: bytes, version: str) -> str | None:
        """Write ``data`` if the object is at ``version``; the new version, or ``None``."""

    def delete(self, version: str) -> bool:
        """Delete the object if it is at ``version``; whether it was deleted."""


def _precondition_failed(exc: BaseException) -> bool:
    """Whether an s3fs error is S3's answer to a failed ``If-Match`` / ``If-None-Match``."""
    seen: BaseException | None = exc
    while seen is not None:
        # optional: only botocore's ClientError carries the service response
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                return True
        seen = seen.__cause__ or seen.__context__
    return False


class S3LeaseBackend:
    """The lease as one S3 object, changed with ``If-None-Match`` / ``If-Match`` on the ETag."""

    def __init__(self, fs: Any, path: str) -> None:
        self.fs = fs
        self.bucket, _, self.key = path.partition("/")

    def _put(self, data: bytes, **condition: str) -> str | None:
        try:
            out = self.fs.call_s3(
                "put_object", Bucket=self.bucket, Key=self.key, Body=data, **condition
            )
        except FileExistsError:
            return None
        except OSError as e:
            if _precondition_failed(e):
                return None
            raise
        return str(out["ETag"])

    def create(self, data: bytes) -> str | None:
        return self._put(data, IfNoneMatch="*")

    def read(self) -> tuple[bytes, str] | None:
        self.fs.invalidate_cache(f"{self.bucket}/{self.key}")
        try:
            # the version first: content read after it is as new or newer, so a
            # replace conditional on this version can only fail, never overwrite
            # something unseen
            head = self.fs.call_s3("head_object", Bucket=self.bucket, Key=self.key)
            data = self.fs.cat_file(f"{self.bucket}/{self.key}")
        except FileNotFoundError:
            return None
        return bytes(data), str(head["ETag"])

    def modified_at(self) -> float | None:
        try:
            head = self.fs.call_s3("head_object", Bucket=self.bucket, Key=self.key)
        except FileNotFoundError:
            return None
        return float(head["LastModified"].timestamp())

    def replace(self, data: bytes, version: str) -> str | None:
        try:
            return self._put(data, IfMatch=version)
        except FileNotFoundError:
            return None

    def delete(self, version: str) -> bool:
        try:
            self.fs.call_s3("delete_object", Bucket=self.bucket, Key=self.key, IfMatch=version)
        except FileNotFoundError:
            return False
        except OSError as e:
            if _precondition_failed(e):
                return False
            raise
        self.fs.invalidate_cache(f"{self.bucket}/{self.key}")
        return True


class LocalLeaseBackend:
    """The lease as a file; each operation holds ``flock`` on ``<path>.guard``.

    For ``file://`` locations (a local or shared POSIX file system).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    @staticmethod
    def _version(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:32]

    def _guarded(self) -> int:
        fd = os.open(self.path + ".guard", os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    @staticmethod
    def _unguard(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def _current(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _write(self, data: bytes) -> str:
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        return self._version(data)

    def create(self, data: bytes) -> str | None:
        fd = self._guarded()
        try:
            return None if self._current() is not None else self._write(data)
        finally:
            self._unguard(fd)

    def read(self) -> tuple[bytes, str] | None:
        fd = self._guarded()
        try:
            data = self._current()
            return None if data is None else (data, self._version(data))
        finally:
            self._unguard(fd)

    def modified_at(self) -> float | None:
        try:
            return os.stat(self.path).st_mtime
        except FileNotFoundError:
            return None

    def replace(self, data: bytes, version: str) -> str | None:
        fd = self._guarded()
        try:
            current = self._current()
            if current is None or self._version(current) != version:
                return None
            return self._write(data)
        finally:
            self._unguard(fd)

    def delete(self, version: str) -> bool:
        fd = self._guarded()
        try:
            current = self._current()
            if current is None or self._version(current) != version:
                return False
            os.unlink(self.path)
            return True
        finally:
            self._unguard(fd)


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _identity() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "pidns": _pid_namespace(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def describe_holder(holder: Any) -> str:
    """``pid=... host=... started=...`` of a lease's holder."""
    if not isinstance(holder, dict):
        return f"unknown holder {holder!r}"
    return f"pid={holder.get('pid')} host={holder.get('host')} started={holder.get('started')}"


@dataclass(frozen=True)
class _Record:
    holder: dict[str, Any]
    token: str
    ttl: float
    expires: float

    @classmethod
    def parse(cls, data: bytes) -> _Record | None:
        try:
            d = json.loads(data)
            return cls(dict(d["holder"]), str(d["token"]), float(d["ttl"]), float(d["expires"]))
        except (ValueError, KeyError, TypeError, RecursionError):
            return None

    def dead_on_this_host(self) -> bool:
        """The holder ran on this host (and PID namespace) and has exited."""
        h = self.holder
        if h.get("host") != socket.gethostname() or h.get("pidns") != _pid_namespace():
            return False
        pid = h.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            return False
        if pid == os.getpid():
            return False  # this process: another store object of ours (refuse)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False  # EPERM: it exists, under another user
        return False


class Lease:
    """Take, renew and release the lease through ``backend``.

    ``where`` names the location in messages; ``ttl`` is how long the lease
    lasts without renewal; it is renewed every ``ttl / 3`` seconds by a
    daemon thread while held.
    """

    def __init__(self, backend: LeaseBackend, where: str, ttl: float = DEFAULT_LEASE_TTL) -> None:
        self.backend = backend
        self.where = where
        self.ttl = float(ttl)
        self.token = uuid.uuid4().hex
        self._identity = _identity()
        self._version: str | None = None
        self._renewed_at = 0.0  # monotonic time of the last successful write
        self._lost: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"Lease({self.where!r}, ttl={self.ttl})"

    @property
    def held(self) -> bool:
        return self._version is not None and self._lost is None

    def _payload(self) -> bytes:
        record = {
            "holder": self._identity,
            "token": self.token,
            "ttl": self.ttl,
            "expires": time.time() + self.ttl,
        }
        return json.dumps(record, sort_keys=True).encode()

    def acquire(self) -> None:
        """Take the lease or raise :class:`CheckpointLockedError` naming the holder."""
        for _ in range(20):
            started = time.monotonic()
            version = self.backend.create(self._payload())
            if version is not None:
                self._won(version, started)
                return
            current = self.backend.read()
            if current is None:
                continue  # released between our two calls
            data, seen = current
            record = _Record.parse(data)
            if record is not None:
                left = record.expires - time.time()
                if left > 0 and not record.dead_on_this_host():
                    raise CheckpointLockedError(
                        f"checkpoint location {self.where!r} is in use by another job "
                        f"({describe_holder(record.holder)}); its lease expires in "
                        f"{left:.0f} s unless renewed; stop that job first, or use a "
                        f"different checkpoint location"
                    )
            else:
                self._refuse_young_unreadable()
            started = time.monotonic()
            version = self.backend.replace(self._payload(), seen)
            if version is not None:
                logger.warning(
                    "%s: took over the lease of %s (%s)",
                    self.where,
                    describe_holder(record.holder) if record else "an unreadable lease",
                    "its process has exited"
                    if record and record.expires > time.time()
                    else "expired",
                )
                self._won(version, started)
                return
        raise CheckpointLockedError(
            f"checkpoint location {self.where!r}: other jobs keep changing its lease; "
            f"make sure only one job runs on it"
        )

    def _refuse_young_unreadable(self) -> None:
        """Refuse a lease object that does not parse until it is ``ttl`` seconds old."""
        modified = self.backend.modified_at()
        if modified is None:
            return  # gone meanwhile: the conditional replace fails and we look again
        age = time.time() - modified
        if age < self.ttl:
            raise CheckpointLockedError(
                f"checkpoint location {self.where!r} has a lease object that does not parse, "
                f"written {max(age, 0.0):.0f} s ago; it is taken over once it is {self.ttl:.0f} s "
                f"old (in {self.ttl - age:.0f} s) unless a job rewrites it: run again then, "
                "or delete it if you know no job uses this location"
            )

    def _won(self, version: str, started: float) -> None:
        self._version = version
        self._renewed_at = started
        self._lost = None
        self._stop.clear()
        logger.info("%s: lease taken (ttl %.1f s)", self.where, self.ttl)
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"rivermark-lease {self.where}", daemon=True
        )
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.renew()
            except CheckpointLockedError as e:
                logger.error("%s", e)
                return
            except Exception as e:  # the store is unreachable: try again next round
                logger.warning(
                    "%s: could not renew the lease (%s: %s)", self.where, type(e).__name__, e
                )

    def check(self) -> None:
        """Raise :class:`CheckpointLockedError` if the lease is known lost or overdue (no I/O)."""
        with self._mutex:
            self._check_held()
            if self._lost is not None:
                raise self._lost_error()

    def _check_held(self) -> str:
        """The version of the lease held; it is marked lost when not renewed within its ttl.

        A lease not held is refused (:class:`CheckpointLockedError`).
        """
        if self._version is None:
            raise CheckpointLockedError(f"checkpoint location {self.where!r}: lease not held")
        if self._lost is None and time.monotonic() - self._renewed_at > self.ttl:
            self._lost = (
                f"not renewed for more than its ttl of {self.ttl:.0f} s, so another job "
                f"may have taken it over"
            )
        return self._version

    def _lost_error(self) -> CheckpointLockedError:
        return CheckpointLockedError(
            f"checkpoint location {self.where!r}: this job lost its lease "
            f"({self._lost}); it stops without writing another checkpoint; "
            f"find out which job runs there now before running this one again"
        )

    def renew(self) -> None:
        """Extend the lease now; raise :class:`CheckpointLockedError` if it was lost."""
        with self._mutex:
            held = self._check_held()
            if self._lost is None:
                started = time.monotonic()
                try:
                    version = self.backend.replace(self._payload(), held)
                except Exception:
                    if time.monotonic() - self._renewed_at > self.ttl:
                        self._lost = f"not renewed for more than its ttl of {self.ttl:.0f} s"
                    raise
                if version is None:
                    self._lost = "another job took it over"
                else:
                    self._version = version
                    self._renewed_at = started
                    return
            raise self._lost_error()

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still ours (never raises)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self.ttl))
        with self._mutex:
            version, self._version = self._version, None
            if version is None or self._lost is not None:
                return
            try:
                if self.backend.delete(version):
                    logger.info("%s: lease released", self.where)
            except Exception as e:
                logger.warning(
                    "%s: could not release the lease (%s: %s); it expires by itself in %.0f s",
                    self.where,
                    type(e).__name__,
                    e,
                    self.ttl,
                )
