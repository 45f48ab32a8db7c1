"""What the file sinks share: a location (a local directory or fsspec URL), its lock, rows to Arrow.

``to_parquet`` (:mod:`rivermark.lake.parquet`) and ``to_delta``
(:mod:`rivermark.lake.delta`) write files under a root: a local directory
(a path or ``file://``) or object storage (``s3://bucket/prefix``, through
fsspec and s3fs).  :class:`Location` gives them the few operations they
need, each durable before it returns: write a file (fsynced, with its
directory, on a local disk; one complete PUT on object storage), publish a
file under its final name (a rename; a copy then a delete on object
storage, which is idempotent: a publish repeated after a crash finds the
file already there), list, remove.

A sink's own files live under ``ROOT/_rivermark/<digest of the sink id>/``:
readers skip names that start with ``_`` or ``.`` (pyarrow, pandas, Spark,
DuckDB's Hive reader), and Delta readers read only the files its log names.
On object storage the clients are opened as the checkpoint store opens
them (:mod:`rivermark.checkpoint.stores.filesystems`), their connect, read
and retry timeouts following the sink's ``timeout``, and
:meth:`Location.failed` words a store that did not answer as such, naming
its endpoint (``host:port``).
The lock of one sink id is a lease there (:mod:`rivermark.checkpoint.stores.lease`):
a second job writing through the same sink id is refused while the first
holds it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import IO, Any
from urllib.parse import quote as url_quote
from urllib.parse import urlsplit

from rivermark.checkpoint.errors import CheckpointLockedError
from rivermark.checkpoint.stores.filesystems import open_filesystem, s3_options
from rivermark.checkpoint.stores.lease import Lease, LocalLeaseBackend, S3LeaseBackend
from rivermark.errors import ConfigurationError, RivermarkError
from rivermark.sinks.base import sink_digest

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TIMEOUT",
    "LakeSinkError",
    "Location",
    "RecordSchemaError",
    "endpoint_of",
    "hive_dir",
    "no_answer",
    "rows_to_table",
    "schema_of",
    "sink_digest",
]

#: seconds a file sink waits for an answer of the object store (its ``timeout`` option)
DEFAULT_TIMEOUT = 30.0
#: what a client says when the store does not answer (botocore, aiohttp, fsspec)
_NO_ANSWER = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
              "ConnectionClosedError", "ClientConnectorError", "ServerDisconnectedError",
              "ClientOSError", "FSTimeoutError")  # fmt: skip
#: ... and how deltalake (Rust's object_store) says it
#: (a connection cut in the middle of an answer is one the store did not give)
_NO_ANSWER_TEXT = ("error sending request", "connection refused", "timed out",
                   "connection reset", "tcp connect error", "dns error",
                   "error reading a body from connection",
                   "end of file before message length reached")  # fmt: skip


def endpoint_of(scheme: str, options: Mapping[str, object]) -> str:
    """``host:port`` of the store that ``options`` (or the AWS variables) point at; no credentials.

    >>> endpoint_of("s3", {"endpoint_url": "http://user:pw@127.0.0.1:9000/"})
    '127.0.0.1:9000'
    """
    found: object = None
    for k, v in options.items():
        if k.lower() in ("endpoint_url", "aws_endpoint_url", "aws_endpoint", "endpoint"):
            found = v
    client = options.get("client_kwargs")
    if isinstance(client, Mapping) and client.get("endpoint_url"):
        found = client["endpoint_url"]
    if not found and scheme in ("s3", "s3a"):
        found = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not found:
        return "s3.amazonaws.com" if scheme in ("s3", "s3a") else f"the {scheme}:// service"
    parts = urlsplit(str(found) if "://" in str(found) else f"//{found}")
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.hostname}:{port}" if port else str(parts.hostname)


def one_line(e: BaseException, limit: int = 400) -> str:
    """``e``'s text on one line: deltalake's multi-line causes (``↳``, colours) joined, cut at ``limit``.

    >>> one_line(OSError("Generic S3 error\\n  \\x1b[31m↳\\x1b[0m error sending\\n  \\x1b[31m↳\\x1b[0m request"))
    'Generic S3 error error sending request'
    """
    out = " ".join(re.sub(r"\x1b\[[0-9;]*m|↳", " ", str(e)).split()) or type(e).__name__
    return out if len(out) <= limit else out[: limit - 3] + "..."


def no_answer(e: BaseException) -> bool:
    """Whether ``e`` says that the store did not answer (refused, cut, timed out).

    >>> no_answer(OSError("Generic S3 error: error sending request for url"))
    True
    >>> no_answer(OSError("Generic S3 error Error getting list response body HTTP error "
    ...                   "request or response body error error reading a body from connection "
    ...                   "end of file before message length reached"))  # cut mid-answer
    True
    >>> no_answer(OSError("Generic S3 error: Access Denied"))
    False
    """
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (ConnectionError, TimeoutError)) or type(cur).__name__ in _NO_ANSWER:
            return True
        cur = cur.__cause__ or cur.__context__
    text = one_line(e, limit=100_000).lower()
    return any(t in text for t in _NO_ANSWER_TEXT)


#: Hive's name of the partition of a null value
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


class LakeSinkError(RivermarkError):
    """A file sink cannot write, publish or resolve its files (the message says what to do)."""


class RecordSchemaError(RivermarkError, ValueError):
    """A record or batch that does not fit a file sink's schema (dropped by ``on_error='skip'``)."""


def hive_dir(columns: Sequence[str], values: Sequence[object]) -> str:
    """``col=value/...`` (URI-encoded values, as pyarrow's Hive partitioning reads them)."""
    parts = []
    for c, v in zip(columns, values):
        text = HIVE_NULL if v is None else url_quote(str(v), safe="")
        parts.append(f"{c}={text}")
    return "/".join(parts)


def schema_of(example: Any, label: str) -> Any:
    """The Arrow schema of a record (dict), a list of them, a DataFrame or a pyarrow schema."""
    import pyarrow as pa

    if isinstance(example, pa.Schema):
        return example
    try:
        if isinstance(example, Mapping):
            return pa.Table.from_pylist([dict(example)]).schema
        if isinstance(example, list) and example and isinstance(example[0], Mapping):
            return pa.Table.from_pylist(example).schema
        if hasattr(example, "to_dict") and hasattr(example, "columns"):  # a DataFrame
            return pa.Table.from_pandas(example, preserve_index=False).schema
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise ConfigurationError(
            f"{label}: cannot derive a schema from {example!r:.200} ({e}); pass "
            "schema=pyarrow.schema([...])"
        ) from None
    raise ConfigurationError(
        f"{label}: cannot derive a schema from {example!r:.200}; pass a dict record, a "
        "DataFrame, or schema=pyarrow.schema([...])"
    )


def rows_to_table(rows: Sequence[Mapping[str, Any]], schema: Any) -> Any:
    """``pyarrow.Table.from_pylist(rows, schema=schema)``.

    A value that does not fit its column's type raises
    ``pyarrow.ArrowInvalid``, ``ArrowTypeError`` or ``OverflowError``; a
    column missing from a record is null there; a record's other keys are
    not looked at (the sinks refuse them before).  Rows ``from_pylist``
    cannot take as a whole (a mapping type it does not know) are taken a
    column at a time, a column gathered with ``map(itemgetter(name), rows)``
    unless a record lacks it, with the same values and errors.
    """
    import pyarrow as pa

    try:
        # one call that converts every record in C++ (twice as fast as by column
        # on pyarrow 26), and the conversion the per-record check uses
        return pa.Table.from_pylist(rows, schema=schema)
    except Exception:
        pass  # the column path below gives the values, or raises the error
    arrays = []
    for field in schema:
        try:
            values = list(map(itemgetter(field.name), rows))
        except KeyError:
            values = [r.get(field.name) for r in rows]
        arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


class Location:
    """Files under ``url`` (a local directory, ``file://`` or any fsspec URL), durably written."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, object] | None,
        label: str,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.url, self.label, self.timeout = url, label, timeout
        self.local = "://" not in url or url.startswith("file://")
        self.fs: Any = None
        self.endpoint = ""
        #: the store did not answer (the sink's close then leaves its files and lease alone)
        self.down = False
        if self.local:
            self.root = os.path.abspath(url[len("file://") :] if url.startswith("file://") else url)
            return
        scheme = url.split("://", 1)[0]
        options = s3_options(scheme, storage_options, timeout)
        self.fs, self.root = open_filesystem(url, options, f"{label}: {url!r}")
        self.scheme = scheme
        self.endpoint = endpoint_of(scheme, options)

    def where(self) -> str:
        return repr(self.url)

    def failed(self, what: str, e: BaseException) -> LakeSinkError:
        """The one line that stops the job when ``what`` failed with ``e``."""
        logger.debug("%s: %s failed", self.label, what, exc_info=True)
        if not self.local and no_answer(e):
            self.down = True
            return LakeSinkError(
                f"{self.label}: {what} failed: the object store at {self.endpoint} did not "
                f"answer ({type(e).__name__}: {one_line(e)}); the job stopped with its last "
                "checkpoint intact: start the store (check the network and the endpoint; the "
                f"sink waits timeout={self.timeout:g} s for an answer) and run again to resume"
            )
        return LakeSinkError(
            f"{self.label}: {what} failed in {self.where()} ({type(e).__name__}: "
            f"{one_line(e)}); the job stopped with its last checkpoint intact: fix the "
            "cause (disk space, permissions, the object store's address) and run again to resume"
        )

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    # ---------------------------------------------------------------- writing
    def open_write(self, rel: str) -> IO[bytes]:
        """A new file at ``rel`` (its directories created); finish it with :meth:`seal`."""
        p = self.path(rel)
        if self.local:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            return open(p, "wb")  # noqa: SIM115 - closed by seal()
        f: IO[bytes] = self.fs.open(p, "wb")
        return f

    def seal(self, f: IO[bytes]) -> int:
        """Close ``f`` durably (fsync on a local disk; the upload completes on object storage)."""
        if self.local:
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
            f.close()
            return size
        size = f.tell()
        f.close()
        return size

    def sync_dir(self, rel_dir: str) -> None:
        """fsync a local directory (its new and renamed entries); nothing on object storage."""
        if self.local:
            fd = os.open(self.path(rel_dir), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def publish(self, src: str, dst: str) -> bool:
        """Give ``src`` the name ``dst``; False when already done (``src`` gone, ``dst`` there).

        A file missing under both names is an error: the output it held is lost.
        """
        ps, pd = self.path(src), self.path(dst)
        if self.local:
            os.makedirs(os.path.dirname(pd), exist_ok=True)
            try:
                os.replace(ps, pd)
            except FileNotFoundError:
                if os.path.exists(pd):
                    return False
                raise self._lost(src, dst) from None
            self.sync_dir(os.path.dirname(dst))
            return True
        self.fs.invalidate_cache(os.path.dirname(ps))
        if self.fs.exists(ps):
            self.fs.copy(ps, pd)  # put, then delete: dst is complete before src goes
            self.fs.rm(ps)
            return True
        self.fs.invalidate_cache(os.path.dirname(pd))
        if self.fs.exists(pd):
            return False
        raise self._lost(src, dst)

    def _lost(self, src: str, dst: str) -> LakeSinkError:
        return LakeSinkError(
            f"{self.label}: file {src!r} of a durable checkpoint is missing from {self.where()} "
            f"and was not published as {dst!r}; someone deleted it: restore an older "
            "checkpoint, or rerun with --from-scratch"
        )

    def write_bytes(self, rel: str, data: bytes) -> None:
        f = self.open_write(rel)
        f.write(data)
        self.seal(f)
        self.sync_dir(os.path.dirname(rel))

    def read_bytes(self, rel: str) -> bytes:
        if self.local:
            with open(self.path(rel), "rb") as f:
                return f.read()
        return bytes(self.fs.cat_file(self.path(rel)))

    # ---------------------------------------------------------------- reading the tree
    def exists(self, rel: str) -> bool:
        if self.local:
            return os.path.exists(self.path(rel))
        self.fs.invalidate_cache(os.path.dirname(self.path(rel)))
        return bool(self.fs.exists(self.path(rel)))

    def files(self, rel_dir: str = "") -> list[str]:
        """Every file under ``rel_dir``, as paths relative to the root (sorted)."""
        base = self.path(rel_dir)
        if self.local:
            out: list[str] = []
            for d, _dirs, names in os.walk(base):
                out.extend(os.path.relpath(os.path.join(d, n), self.root) for n in names)
            return sorted(out)
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        n = len(self.root) + 1
        return sorted(str(p)[n:] for p in found)

    def remove(self, rels: Sequence[str]) -> None:
        """Delete ``rels`` (those already gone are fine)."""
        for rel in rels:
            try:
                if self.local:
                    os.unlink(self.path(rel))
                else:
                    self.fs.rm(self.path(rel))
            except FileNotFoundError:
                pass

    # ---------------------------------------------------------------- the lock
    def lease(self, rel: str) -> Lease:
        """Take the lease at ``rel`` or raise :class:`LakeSinkError` naming the holder."""
        if self.local:
            backend: LocalLeaseBackend | S3LeaseBackend = LocalLeaseBackend(self.path(rel))
        elif self.scheme in ("s3", "s3a"):
            backend = S3LeaseBackend(self.fs, self.path(rel))
        else:
            raise ConfigurationError(
                f"{self.label}: cannot lock {self.where()} (only local directories and s3:// "
                "have a lock); write to one of those"
            )
        lease = Lease(backend, f"{self.url}/{rel}")
        try:
            lease.acquire()
        except CheckpointLockedError as e:
            raise LakeSinkError(
                f"{self.label}: another job writes through this sink id into {self.where()} "
                f"({str(e).split('(', 1)[-1].split(')', 1)[0]}); two jobs through one sink id "
                "would mix their files. Stop that job first, or give this sink another name"
            ) from None
        return lease
