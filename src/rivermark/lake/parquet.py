"""``to_parquet``: write records into Parquet files (a directory or object storage), exactly once.

Records are dicts (column -> value) or pandas DataFrame batches.  The files
are laid out as pyarrow, pandas, DuckDB and Spark read a dataset: Hive
partitions by ``partition_by`` columns (``date=2026-12-06/``, the column
left out of the file), files named ``part-<sink digest>-<epoch>-<n>.parquet``.

Exactly-once through the checkpoint protocol (:mod:`rivermark.sinks.base`),
as Flink's file sink does it (in-progress, pending, finished):

* records are written as they arrive into *in-progress* files under
  ``ROOT/_rivermark/<sink digest>/inprogress/_<uuid>.inprogress``, a name
  every reader skips; a file is rolled (closed, a new one opened) when it
  reaches ``roll_rows`` rows, ``roll_bytes`` bytes or ``roll_seconds`` age;
  each full buffer is converted and written on the sink's writer thread
  (:mod:`rivermark.lake.worker`) while the next one fills;
* ``pre_commit(e)`` waits for the writes in flight, closes every open file
  durably (fsync; a complete upload on object storage) and gives each its
  final name; the handle lists the files of every epoch not yet published,
  in-progress name -> final name;
* ``commit(e)`` publishes them: a rename (``os.replace`` and a directory
  fsync), or on object storage a copy then a delete, so that the final file
  is complete before its in-progress copy goes;
* ``restore(handle)`` publishes the files the checkpoint lists that a crash
  left unpublished, deletes every other in-progress file of the sink, and
  deletes published files of epochs after the checkpoint's (output that no
  checkpoint holds, after an older checkpoint was restored).

A reader of the directory therefore sees an epoch's files only once the
checkpoint holding them is durable, and never a file that later disappears.
One job at a time per sink id: a lease at ``ROOT/_rivermark/<sink digest>/LEASE``.
Without a checkpoint, published files of the sink id make the job refuse to
start (``unaccounted_output``); ``--from-scratch`` deletes the sink's files
(its ``part-<sink digest>-*`` files and in-progress files; other files stay).

The schema is ``schema=`` (a pyarrow schema), else derived from
``example=`` (a record or a DataFrame), else from the first record or
batch.  A record or batch that does not fit it is refused through the node's
error policy (``on_error``) with one line naming the column.

>>> import os, tempfile, pyarrow.parquet as pq
>>> from rivermark import Job, Stream
>>> d = tempfile.mkdtemp()
>>> src = Stream.from_iterable([{"day": "mon", "n": 1}, {"day": "tue", "n": 2}])
>>> _ = src.to_parquet(os.path.join(d, "out"), partition_by=["day"], name="days")
>>> _ = Job(src, checkpoint=os.path.join(d, "ckpt")).run()
>>> pq.read_table(os.path.join(d, "out")).sort_by("n").to_pylist()
[{'n': 1, 'day': 'mon'}, {'n': 2, 'day': 'tue'}]
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import IO, Any, ClassVar, TypeVar, Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.core.refs import Metadata
from rivermark.errors import ConfigurationError
from rivermark.execution.steps import step
from rivermark.lake.files import (
    DEFAULT_TIMEOUT,
    Location,
    hive_dir,
    rows_to_table,
    schema_of,
)
from rivermark.lake.sink import LakeSink, check_url
from rivermark.lake.worker import NoAnswerError

logger = logging.getLogger(__name__)

__all__ = ["ToParquet"]

T = TypeVar("T")

_FINAL = re.compile(r"part-([0-9a-f]{12})-(\d{12})-\d{5}\.parquet\Z")


@dataclass
class _OpenFile:
    """An in-progress file being written: its writer, name and what is in it."""

    rel: str
    part: str
    handle: IO[bytes]
    writer: Any
    opened: float
    rows: int = 0


@Stream.register_api(attribute_name="to_parquet")
class ToParquet(LakeSink):
    """Write dict records or DataFrame batches as Parquet files under ``url``, exactly once.

    ``url``: a directory, ``file://...`` or an fsspec URL (``s3://bucket/prefix``;
    ``storage_options`` go to fsspec).  ``partition_by``: Hive partition
    columns.  ``roll_rows`` / ``roll_bytes`` / ``roll_seconds``: when a file
    is closed and a new one opened (files are also closed at every
    checkpoint).  ``schema`` / ``example``: see the module docs.
    ``sink_id``: the name the files, the lock and the handle carry (default:
    the node's ``name``, else the URL).  ``batch_rows``: records buffered
    before they are converted and written as a row group.  ``timeout``:
    seconds the sink waits for an answer of the object store (each request,
    and each of its waits for the writer thread); a store that does not
    answer within it stops the job with its last checkpoint intact.
    """

    api: ClassVar[str] = "to_parquet"

    def __init__(
        self,
        upstream: Stream,
        url: str,
        *,
        partition_by: Sequence[str] = (),
        schema: object = None,
        example: object = None,
        roll_rows: int = 1_000_000,
        roll_bytes: int = 128 * 1024 * 1024,
        roll_seconds: float = 3600.0,
        batch_rows: int = 50_000,
        sink_id: str | None = None,
        storage_options: Mapping[str, object] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        check_url(self.api, url)
        partition_by = [partition_by] if isinstance(partition_by, str) else list(partition_by)
        for name, value in (("roll_rows", roll_rows), ("roll_bytes", roll_bytes),
                            ("batch_rows", batch_rows), ("roll_seconds", roll_seconds),
                            ("timeout", timeout)):  # fmt: skip
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(
                    f"to_parquet: {name} must be a positive number, got {value!r}"
                )
        self.url = url
        self.partition_by = partition_by
        self.roll_rows, self.roll_bytes = int(roll_rows), int(roll_bytes)
        self.roll_seconds, self.batch_rows = float(roll_seconds), int(batch_rows)
        #: records buffered before they are written: a buffer never holds more than a file takes
        self._flush_at = min(self.batch_rows, self.roll_rows)
        self.storage_options = dict(storage_options or {})
        self.timeout = float(timeout)
        super().__init__(upstream, **kwargs)
        self._init_files(url, sink_id, schema, example)
        self._buffers: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        #: without partition_by: the one buffer (``_buffers[()]``) while it exists
        self._unpartitioned: list[Mapping[str, Any]] | None = None
        self._open: dict[tuple[Any, ...], _OpenFile] = {}
        self._sealed: list[_OpenFile] = []
        self._pending: list[dict[str, Any]] = []  # {"epoch": e, "files": [[src, dst], ...]}
        #: what the writer thread could not convert: (partition, rows or a DataFrame, error)
        self._misfits: list[tuple[tuple[Any, ...] | None, Any, BaseException]] = []
        #: DataFrame batches converted, by partition, until they make a row group
        self._stashed: dict[tuple[Any, ...], list[Any]] = {}

    def _set_schema(self, schema: Any) -> None:
        missing = [c for c in self.partition_by if c not in schema.names]
        if missing:
            raise ConfigurationError(
                f"{self.label()}: partition_by column(s) {missing!r} are not in the schema "
                f"(its columns: {schema.names!r})"
            )
        self._schema = schema
        self._names = frozenset(schema.names)
        keep = [f for f in schema if f.name not in self.partition_by]
        import pyarrow as pa

        self._file_schema = pa.schema(keep)

    def _location_options(self) -> Mapping[str, object]:
        return self.storage_options

    # ---------------------------------------------------------------- records
    @step
    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        buf = self._unpartitioned
        if buf is not None and type(x) is dict and self._names.issuperset(x):  # the common case
            buf.append(x)
            if len(buf) >= self._flush_at:
                self._flush(())
            return None
        self._add(x)
        return None

    def _add(self, x: Any) -> None:
        """A record or batch off the common path (the first, a partitioned one, a DataFrame)."""
        if type(x) is dict or isinstance(x, Mapping):
            if not self._record_fits(x):
                return
            key = tuple(map(x.get, self.partition_by))
            buf = self._buffers.get(key)
            if buf is None:
                buf = self._buffers[key] = []
                if not self.partition_by:
                    self._unpartitioned = buf
            buf.append(x)
            if len(buf) >= self._flush_at:
                self._flush(key)
        elif hasattr(x, "to_dict") and hasattr(x, "columns"):
            self._write_frame(x)
        else:
            raise self._not_a_record(x)

    def _flush(self, key: tuple[Any, ...]) -> None:
        """Hand the buffered records of one partition to the writer thread (a row group)."""
        rows = self._buffers.pop(key, None)
        if not key:
            self._unpartitioned = None
        if not rows:
            return
        loc = self._location()
        self._submit(lambda: self._convert_rows(loc, key, rows))

    def _settle(self) -> None:
        """Wait for the write in flight (raising its error); pass its misfits through the policy."""
        try:
            self._bg.wait()
        except NoAnswerError as err:
            assert self._loc is not None  # a write was submitted there
            raise self._failed(self._loc, "writing an in-progress file", err) from None
        while self._misfits:
            key, payload, e = self._misfits.pop(0)
            if key is None:  # a DataFrame batch: refused whole
                self._user_error(payload, self._misfit("DataFrame batch", e), self.update)
                continue
            table = self._fitting(payload)
            if table is not None:
                loc = self._location()
                self._io(loc, "writing an in-progress file", partial(self._write, loc, key, table))

    def _convert_rows(self, loc: Location, key: tuple[Any, ...], rows: list[Any]) -> None:
        """On the writer thread: records to Arrow, written; rows that do not fit handed back."""
        import pyarrow as pa

        try:
            table = rows_to_table(rows, self._schema)
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            self._misfits.append((key, rows, e))
            return
        self._write(loc, key, table)

    def _fitting(self, rows: list[Mapping[str, object]]) -> object:
        """The rows that fit the schema; the others go through the error policy, one by one."""
        good = self._rows_that_fit(rows, self._schema)
        return rows_to_table(good, self._schema) if good else None

    def _write_frame(self, df: Any) -> None:
        if self._schema is None:
            self._set_schema(schema_of(df, self.label()))
        if not self._frame_fits(df):
            return
        # records buffered before the batch go first (the writer thread keeps the order)
        for key in list(self._buffers):
            self._flush(key)
        loc = self._location()
        self._submit(lambda: self._convert_frame(loc, df))

    def _convert_frame(self, loc: Location, df: Any) -> None:
        """On the writer thread: a DataFrame to Arrow, written by partition (or handed back)."""
        import pyarrow as pa

        try:
            table = pa.Table.from_pandas(df, schema=self._schema, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError, OverflowError, KeyError) as e:
            self._misfits.append((None, df, e))
            return
        if not self.partition_by:
            self._stash(loc, (), table)
            return
        keys = list(zip(*(table.column(c).to_pylist() for c in self.partition_by)))
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(k, []).append(i)
        for k, idx in groups.items():
            self._stash(loc, k, table.take(idx))

    def _stash(self, loc: Location, key: tuple[Any, ...], table: Any) -> None:
        """Collect a partition's batches until ``batch_rows`` rows: one row group, not many small."""
        tables = self._stashed.setdefault(key, [])
        tables.append(table)
        if sum(t.num_rows for t in tables) >= self.batch_rows:
            self._write_stashed(loc, key)

    def _write_stashed(self, loc: Location, key: tuple[Any, ...]) -> None:
        import pyarrow as pa

        tables = self._stashed.pop(key)
        self._write(loc, key, tables[0] if len(tables) == 1 else pa.concat_tables(tables))

    def _write(self, loc: Location, key: tuple[Any, ...], table: Any) -> None:
        """Write ``table`` (the whole schema) into the partition's open file, rolling it first.

        A file takes at most ``roll_rows`` rows: the rest go into the next one.
        """
        f = self._open.get(key)
        try:
            if self.partition_by:
                table = table.drop_columns(self.partition_by)
            while True:
                now = time.monotonic()
                if f is not None and (
                    f.rows >= self.roll_rows
                    or f.handle.tell() >= self.roll_bytes
                    or now - f.opened >= self.roll_seconds
                ):
                    self._seal(key)
                    f = None
                if f is None:
                    f = self._open_file(loc, key, now)
                part = table.slice(0, max(self.roll_rows - f.rows, 1))
                f.writer.write_table(part)
                f.rows += part.num_rows
                table = table.slice(part.num_rows)
                if table.num_rows == 0:
                    break
        except Exception as e:
            raise self._failed(loc, "writing an in-progress file", e) from None

    def _open_file(self, loc: Location, key: tuple[object, ...], now: float) -> _OpenFile:
        import pyarrow.parquet as pq

        rel = f"{self.home}/inprogress/_{uuid.uuid4().hex}.inprogress"
        handle = loc.open_write(rel)
        part = hive_dir(self.partition_by, key)
        f = _OpenFile(rel, part, handle, pq.ParquetWriter(handle, self._file_schema), now)
        self._open[key] = f
        return f

    def _seal(self, key: tuple[object, ...]) -> None:
        f = self._open.pop(key)
        f.writer.close()
        assert self._loc is not None
        self._loc.seal(f.handle)
        self._sealed.append(f)

    # ---------------------------------------------------------------- checkpoint contract
    def pre_commit(self, epoch: int) -> dict[str, object]:
        """Close every file durably and name it; the handle lists the unpublished files."""
        for key in list(self._buffers):
            self._flush(key)
        self._settle()  # every write of the epoch done (or its error raised) before the seal
        loc = self._location()
        self._io(loc, f"closing the files of epoch {epoch}", lambda: self._seal_all(loc))
        files = []
        for n, f in enumerate(self._sealed):
            name = f"part-{self.digest}-{epoch:012d}-{n:05d}.parquet"
            files.append([f.rel, f"{f.part}/{name}" if f.part else name])
        self._sealed = []
        if files:
            self._pending.append({"epoch": epoch, "files": files})
        return {"sink": self.sink_id, "epoch": epoch, "pending": [dict(p) for p in self._pending]}

    def _seal_all(self, loc: Location) -> None:
        """Write the stashed batches, close every open file durably (the epoch's files)."""
        for key in list(self._stashed):
            self._write_stashed(loc, key)
        for key in list(self._open):
            self._seal(key)
        if self._sealed:
            loc.sync_dir(f"{self.home}/inprogress")

    def commit(self, epoch: int, handle: object) -> None:
        """Publish the files of every epoch up to ``epoch`` (idempotent)."""
        loc = self._location()
        while self._pending and self._pending[0]["epoch"] <= epoch:
            files = self._pending[0]["files"]
            self._io(
                loc, f"publishing the files of epoch {epoch}", partial(self._publish, loc, files)
            )
            self._pending.pop(0)

    def _publish(self, loc: Location, files: list[list[str]]) -> int:
        return sum(loc.publish(src, dst) for src, dst in files)

    def restore(self, handle: Any) -> None:
        """Publish the checkpoint's unpublished files; delete every other in-progress file."""
        loc = self._location()
        epoch = self._handle_epoch(handle, "Parquet")
        self._drop_unwritten()
        published, stale, later = self._io(
            loc, "resolving the last epoch", lambda: self._resolve(loc, handle, epoch)
        )
        if later:
            logger.warning(
                "%s: deleted %d published file(s) of epochs after the checkpoint's (%d): %s",
                self.label(), len(later), epoch, later[:5],
            )  # fmt: skip
        logger.info(
            "%s: restored to epoch %d in %s: %d file(s) published, %d in-progress dropped",
            self.label(), epoch, loc.where(), published, len(stale),
        )  # fmt: skip

    def _resolve(self, loc: Location, handle: Any, epoch: int) -> tuple[int, list[str], list[str]]:
        """Publish the handle's files, delete the others; (published, stale, later) files."""
        published = 0
        listed: set[str] = set()
        for p in handle["pending"] if handle is not None else []:
            published += self._publish(loc, p["files"])
            listed.update(src for src, _ in p["files"])
        stale = [r for r in loc.files(f"{self.home}/inprogress") if r not in listed]
        # no handle: the job refused to start if the sink had published files
        later = [r for r, e in self._final_files(loc) if e > epoch] if handle else []
        loc.remove(stale + later)
        return published, stale, later

    def _final_files(self, loc: Location) -> list[tuple[str, int]]:
        """The sink's published files and their epochs."""
        out = []
        for rel in loc.files():
            if rel.startswith("_rivermark/"):
                continue
            m = _FINAL.match(os.path.basename(rel))
            if m is not None and m.group(1) == self.digest:
                out.append((rel, int(m.group(2))))
        return out

    def _drop_unwritten(self) -> None:
        """Forget buffered records and open files (a restore or a start over follows)."""
        self._bg.drain()
        self._misfits, self._stashed = [], {}
        for f in self._open.values():
            f.handle.close()
        self._buffers, self._open, self._sealed, self._pending = {}, {}, [], []
        self._unpartitioned = None

    def start_over(self) -> None:
        """Delete the sink's files, published and in progress (``--from-scratch``)."""
        loc = self._location()
        self._drop_unwritten()

        def delete() -> list[str]:
            final = [r for r, _ in self._final_files(loc)]
            loc.remove(final + loc.files(f"{self.home}/inprogress"))
            return final

        final = self._io(loc, "starting over", delete)
        logger.warning(
            "%s: starting over from scratch: deleted %d file(s) of this sink in %s",
            self.label(), len(final), loc.where(),
        )  # fmt: skip

    def unaccounted_output(self) -> str | None:
        """The sink's published files when no checkpoint knows them."""
        loc = self._location()
        final = self._io(loc, "listing the sink's files", lambda: self._final_files(loc))
        if not final:
            return None
        return (
            f"{self.label()}: {loc.where()} holds {len(final)} file(s) of this sink up to epoch "
            f"{max(e for _, e in final)} from an earlier run"
        )

    def close(self) -> None:
        """Close open files (left in progress) and release the lock (idempotent)."""
        self._closed = True
        files, self._open = list(self._open.values()), {}
        self._shut(files)

    def state_signature(self) -> str:
        return f"ToParquet(url={self.url!r}, sink_id={self.sink_id!r})"
