"""``to_delta``: write records into a Delta Lake table (the ``deltalake`` package), exactly once.

Records are dicts (column -> value) or pandas DataFrame batches.
``mode="append"`` adds every record once; ``mode="merge"`` keeps the latest
row per ``key`` and deletes a key on a tombstone
(:func:`rivermark.sinks.sql.delete`).  The table is local or on object
storage (``s3://``); no Spark, no JVM.

Exactly-once through the checkpoint protocol (:mod:`rivermark.sinks.base`),
as Spark's idempotent streaming writes do it: each epoch becomes one Delta
commit that carries a transaction identifier (application id
``rivermark:<sink id>``, version = the epoch), so a commit repeated after a
crash is recognised in the table's log and skipped.

* The rows of epoch ``e`` are written durably but invisibly before its
  commit: *append* writes them as they arrive into the epoch's Parquet data
  files in the table's directory (one per partition; no Delta reader sees a
  file that the log does not name), each full buffer of ``batch_rows``
  records converted and written on the sink's writer thread
  (:mod:`rivermark.lake.worker`), and ``pre_commit(e)`` waits for those
  writes and closes the files durably; *merge* keeps the epoch in memory,
  folds it to the last operation per key, and ``pre_commit(e)`` writes it to
  ``_rivermark/<sink digest>/stage/epoch-<e>.parquet``.
  The handle lists what every epoch not yet committed wrote.
* ``commit(e)`` makes one Delta commit per pending epoch up to ``e`` (append:
  the data files' add actions; merge: a ``MERGE`` of the staged rows), with
  ``Transaction(app_id, epoch)``; an epoch whose version the table's log
  already holds is skipped.
* ``restore(handle)`` commits the epochs the checkpoint lists that the log
  does not hold yet, and deletes data and staged files of later epochs
  (never committed).  A table whose log holds an epoch after the checkpoint's
  is refused: the checkpoint does not know that output.

A reader (``deltalake``, DuckDB over the table's files, Spark) sees an epoch's
rows all at once, only after the checkpoint holding them is durable, and
never a row that later disappears.  One job at a time per sink id: a lease at
``_rivermark/<sink digest>/LEASE`` under the table.  Without a checkpoint, a
table whose log holds this sink id's epochs makes the job refuse to start;
``--from-scratch`` deletes every row in one Delta commit that also resets the
sink's transaction version (older versions stay readable by time travel
until ``VACUUM``).

>>> import os, tempfile
>>> from deltalake import DeltaTable
>>> from rivermark import Job, Stream
>>> d = tempfile.mkdtemp()
>>> src = Stream.from_iterable([{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "a", "n": 3}])
>>> _ = src.to_delta(os.path.join(d, "totals"), mode="merge", key=["k"], name="totals")
>>> _ = Job(src, checkpoint=os.path.join(d, "ckpt")).run()
>>> sorted(DeltaTable(os.path.join(d, "totals")).to_pyarrow_table().to_pylist(), key=str)
[{'k': 'a', 'n': 3}, {'k': 'b', 'n': 2}]
"""

from __future__ import annotations

import json
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
    LakeSinkError,
    Location,
    hive_dir,
    no_answer,
    one_line,
    rows_to_table,
    schema_of,
)
from rivermark.lake.sink import LakeSink, check_url
from rivermark.lake.worker import NoAnswerError
from rivermark.sinks.sqlstores import Delete

logger = logging.getLogger(__name__)

__all__ = ["ToDelta"]

T = TypeVar("T")

_DATA = re.compile(r"part-rm-([0-9a-f]{12})-(\d{12})-\d{5}-[0-9a-f]{8}\.parquet\Z")
_DELETE = "_rm_delete"
#: deltalake storage option -> fsspec (s3fs) option, for the sink's own files
_FSSPEC_KEYS = {"AWS_ENDPOINT_URL": "endpoint_url", "AWS_ACCESS_KEY_ID": "key",
                "AWS_SECRET_ACCESS_KEY": "secret"}  # fmt: skip


@dataclass
class _DataFile:
    """A data file of the current epoch being written (append mode): its writer and contents."""

    rel: str
    partition: dict[str, str | None]
    handle: IO[bytes]
    writer: Any
    rows: int = 0

    def write(self, table: Any) -> None:
        self.writer.write_table(table)
        self.rows += table.num_rows


@Stream.register_api(attribute_name="to_delta")
class ToDelta(LakeSink):
    """Write dict records or DataFrame batches into the Delta table at ``url``, exactly once.

    ``mode``: ``"append"`` or ``"merge"`` (by ``key``).  ``partition_by``:
    the table's partition columns (when it creates the table).  ``schema`` /
    ``example``: a pyarrow schema, or a record or DataFrame to derive it
    from (default: the first record or batch).  ``storage_options``: for
    ``deltalake`` (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ...).  ``sink_id``:
    the name of the application id, lock and files (default: the node's
    ``name``, else the URL).  ``batch_rows`` (append mode): records buffered
    before they are converted and written into the epoch's data files, on a
    writer thread, while the next ones arrive.  ``timeout``: seconds the
    sink waits for an answer of the object store (each request, and each of
    its waits for the writer thread); a store that does not answer within it
    stops the job with its last checkpoint intact.  See the module docs for
    the protocol.
    """

    api: ClassVar[str] = "to_delta"
    schema_words: ClassVar[str] = "the table's schema"

    def __init__(
        self,
        upstream: Stream,
        url: str,
        *,
        mode: str = "append",
        key: Sequence[str] = (),
        partition_by: Sequence[str] = (),
        schema: object = None,
        example: object = None,
        sink_id: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        batch_rows: int = 50_000,
        timeout: float = DEFAULT_TIMEOUT,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        if not isinstance(batch_rows, int) or isinstance(batch_rows, bool) or batch_rows <= 0:
            raise ConfigurationError(
                f"to_delta: batch_rows must be a positive integer, got {batch_rows!r}"
            )
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigurationError(
                f"to_delta: timeout must be a positive number, got {timeout!r}"
            )
        if mode not in ("append", "merge"):
            raise ConfigurationError(f"to_delta: mode must be 'append' or 'merge', got {mode!r}")
        key = [key] if isinstance(key, str) else list(key)
        if mode == "merge" and not key:
            raise ConfigurationError(
                "to_delta: mode='merge' needs key=[...]: the columns that identify a row"
            )
        check_url(self.api, url)
        self.url, self.mode, self.key = url, mode, key
        self.batch_rows, self.timeout = batch_rows, float(timeout)
        self.partition_by = [partition_by] if isinstance(partition_by, str) else list(partition_by)
        self.storage_options = {str(k): str(v) for k, v in (storage_options or {}).items()}
        super().__init__(upstream, **kwargs)
        self._fast_append = False  # append mode, with a schema
        #: a table that existed: its schema, which records must fit
        self._table_schema: Any = None
        #: records buffered before that schema was known are checked against it once
        self._refit = False
        self._init_files(url, sink_id, schema, example)
        self.app_id = f"rivermark:{self.sink_id}"
        self._rows: list[Mapping[str, Any]] = []
        self._ops: dict[tuple[Any, ...], Mapping[str, Any] | None] = {}
        self._pending: list[dict[str, Any]] = []
        self._dt: Any = None  # the DeltaTable, once opened
        #: what the writer thread could not convert: (records, None) or (a DataFrame, its error)
        self._misfits: list[tuple[Any, BaseException | None]] = []
        #: append mode: DataFrame batches converted, collected until they make a row group
        self._stashed: list[Any] = []
        #: append mode: the current epoch's data files by partition, and the epoch in their names
        self._files: dict[tuple[Any, ...], _DataFile] = {}
        self._file_no = 0
        self._next_epoch = 0

    def _set_schema(self, schema: Any) -> None:
        if self._table_schema is not None:  # records take the table's columns and types
            import pyarrow as pa

            table = self._table_schema
            schema = pa.schema([table.field(f.name) for f in schema if f.name in table.names])
        missing = [c for c in [*self.partition_by, *self.key] if c not in schema.names]
        if missing:
            raise ConfigurationError(
                f"{self.label()}: column(s) {missing!r} of partition_by/key are not in the "
                f"schema (its columns: {schema.names!r})"
            )
        self._schema = schema
        self._names = frozenset(schema.names)
        self._fast_append = self.mode == "append"

    # ---------------------------------------------------------------- the table
    def _location_options(self) -> Mapping[str, object]:
        return {_FSSPEC_KEYS[k]: v for k, v in self.storage_options.items() if k in _FSSPEC_KEYS}

    def _table(self) -> Any:
        """The Delta table, created (empty, with the schema) if it does not exist."""
        from deltalake import DeltaTable

        if self._dt is not None:  # this job is the only writer (the lease): kept up to date
            return self._dt
        opts = self.storage_options or None
        if "://" in self.url and not self.url.startswith("file://"):
            # object_store's waits bounded by the timeout (the user's own settings win)
            t = f"{self.timeout:g}s"
            opts = {"timeout": t, "connect_timeout": f"{min(self.timeout, 5.0):g}s",
                    "retry_timeout": t, **self.storage_options}  # fmt: skip
        if DeltaTable.is_deltatable(self.url, storage_options=opts):
            self._dt = DeltaTable(self.url, storage_options=opts)
            import pyarrow as pa

            self._table_schema = pa.schema(self._dt.schema().to_arrow())
            if self._schema is not None:
                self._set_schema(self._schema)
                self._refit = True
        elif self._schema is not None:
            self._dt = DeltaTable.create(
                self.url, self._schema, mode="ignore", partition_by=self.partition_by or None,
                storage_options=opts,
            )  # fmt: skip
        return self._dt

    def _version(self, dt: Any) -> int | None:
        v = dt.transaction_version(self.app_id)
        return None if v is None or v < 0 else int(v)

    # ---------------------------------------------------------------- records
    @step
    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        if type(x) is dict and self._fast_append and self._names.issuperset(x):  # the common case
            rows = self._rows
            rows.append(x)
            if len(rows) >= self.batch_rows:
                self._flush_rows()
            return None
        self._add(x)
        return None

    def _add(self, x: Any) -> None:
        """A record or batch off the common path (a tombstone, merge mode, a DataFrame)."""
        if isinstance(x, Mapping):
            self._add_record(x)
        elif isinstance(x, Delete):
            if self.mode != "merge":
                raise ConfigurationError(
                    f"{self.label()}: received {x!r}; a tombstone needs mode='merge'"
                )
            if self._schema is None:
                raise ConfigurationError(
                    f"{self.label()}: a tombstone {x!r} came before any record, so the table's "
                    "schema is unknown; pass example={...} or schema=pyarrow.schema([...])"
                )
            k = self._key_of(x.key, x)
            self._ops.pop(k, None)
            self._ops[k] = None
        elif hasattr(x, "to_dict") and hasattr(x, "columns"):
            self._add_frame(x)
        else:
            raise self._not_a_record(x)

    def _add_record(self, x: Mapping[str, object]) -> None:
        if not self._record_fits(x):
            return
        if self.mode == "append":
            self._rows.append(x)
            if len(self._rows) >= self.batch_rows:
                self._flush_rows()
        else:
            k = self._key_of(x, x)
            self._ops.pop(k, None)
            self._ops[k] = x

    def _add_frame(self, df: Any) -> None:  # a pandas DataFrame (pandas is untyped here)
        if self._schema is None:
            self._set_schema(schema_of(df, self.label()))
        if self.mode == "append":
            self._flush_rows()
            loc = self._ready()  # (the table's columns, if it existed, known from here on)
            self._refit = False
            if not self._frame_fits(df):
                return
            self._submit(lambda: self._convert_frame(loc, df))
            return
        table = self._frame_table(df)
        if table is None:
            return
        for rec in table.to_pylist():
            k = self._key_of(rec, rec)
            self._ops.pop(k, None)
            self._ops[k] = rec

    def _key_of(self, rec: Mapping[str, Any], whole: Any) -> tuple[Any, ...]:
        try:
            return tuple(rec[k] for k in self.key)
        except KeyError:
            raise ConfigurationError(
                f"{self.label()}: record {whole!r:.200} lacks a key column of {self.key!r}"
            ) from None

    def _frame_table(self, df: Any) -> Any:
        import pyarrow as pa

        try:
            extra = [c for c in df.columns if c not in self._names]
            if extra:
                raise ValueError(f"column(s) {extra!r} are not in the schema")
            return pa.Table.from_pandas(df, schema=self._schema, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError, OverflowError, KeyError) as e:
            self._user_error(df, self._misfit("DataFrame batch", e), self.update)
            return None

    def _records_table(self, rows: Sequence[Mapping[str, Any]], schema: Any) -> Any:
        """``rows`` as a table; rows that do not fit go through the error policy, one by one."""
        import pyarrow as pa

        errors = (pa.ArrowException, ValueError, TypeError, OverflowError)
        try:
            return rows_to_table(rows, schema)
        except errors:
            pass
        return rows_to_table(self._rows_that_fit(rows, schema), schema)

    # ---------------------------------------------------------------- append: data files
    def _ready(self) -> Location:
        """The location, the table created before its first data file."""
        loc = self._location()
        if self._dt is None:
            self._io(loc, "opening the table", self._table)
        return loc

    def _flush_rows(self) -> None:
        """Hand the buffered records to the writer thread (a row group of the epoch's files)."""
        rows = self._rows
        if not rows:
            return
        self._rows = []
        loc = self._ready()
        if self._refit:  # (once) the table's columns became known after these arrived
            self._refit = False
            rows = [r for r in rows if self._record_fits(r)]
        self._submit(lambda: self._convert_rows(loc, rows))

    def _settle(self) -> None:
        """Wait for the write in flight (raising its error); pass its misfits through the policy."""
        try:
            self._bg.wait()
        except NoAnswerError as err:
            assert self._loc is not None  # a write was submitted there
            raise self._failed(
                self._loc, f"writing the data files of epoch {self._next_epoch}", err
            ) from None
        while self._misfits:
            payload, e = self._misfits.pop(0)
            if e is not None:  # a DataFrame batch: refused whole
                self._user_error(payload, self._misfit("DataFrame batch", e), self.update)
                continue
            table = self._records_table(payload, self._schema)
            loc = self._location()
            self._io(loc, "writing the data files", partial(self._write_part, loc, table))

    def _convert_rows(self, loc: Location, rows: list[Mapping[str, Any]]) -> None:
        """On the writer thread: records to Arrow, written; rows that do not fit handed back."""
        import pyarrow as pa

        try:
            table = rows_to_table(rows, self._schema)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            self._misfits.append((rows, None))
            return
        self._write_part(loc, table)

    def _convert_frame(self, loc: Location, df: Any) -> None:
        """On the writer thread: a DataFrame to Arrow, written (or handed back)."""
        import pyarrow as pa

        try:
            table = pa.Table.from_pandas(df, schema=self._schema, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError, OverflowError, KeyError) as e:
            self._misfits.append((df, e))
            return
        # batches collected until batch_rows rows: one row group, not many small ones
        self._stashed.append(table)
        if sum(t.num_rows for t in self._stashed) >= self.batch_rows:
            self._write_stashed(loc)

    def _write_stashed(self, loc: Location) -> None:
        import pyarrow as pa

        tables, self._stashed = self._stashed, []
        if tables:
            self._write_part(loc, tables[0] if len(tables) == 1 else pa.concat_tables(tables))

    def _write_part(self, loc: Location, table: Any) -> None:
        """Append ``table`` to the epoch's data file of each partition it holds."""
        if table.num_rows == 0:
            return
        try:
            if not self.partition_by:
                self._file(loc, ()).write(table)
                return
            groups: dict[tuple[Any, ...], list[int]] = {}
            keys = zip(*(table.column(c).to_pylist() for c in self.partition_by))
            for i, k in enumerate(keys):
                groups.setdefault(k, []).append(i)
            for k, idx in groups.items():
                self._file(loc, k).write(table.take(idx).drop_columns(self.partition_by))
        except Exception as e:
            raise self._failed(
                loc, f"writing the data files of epoch {self._next_epoch}", e
            ) from None

    def _file(self, loc: Location, key: tuple[Any, ...]) -> _DataFile:
        f = self._files.get(key)
        if f is None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            # a token: a run after --from-scratch never reuses an older version's name
            name = (
                f"part-rm-{self.digest}-{self._next_epoch:012d}-{self._file_no:05d}-"
                f"{uuid.uuid4().hex[:8]}.parquet"
            )
            self._file_no += 1
            d = hive_dir(self.partition_by, key)
            rel = f"{d}/{name}" if d else name
            schema = self._schema
            if self.partition_by:
                schema = pa.schema([x for x in schema if x.name not in self.partition_by])
            handle = loc.open_write(rel)
            values = {c: None if v is None else str(v) for c, v in zip(self.partition_by, key)}
            f = self._files[key] = _DataFile(rel, values, handle, pq.ParquetWriter(handle, schema))
        return f

    def _seal_files(self, loc: Location, epoch: int) -> dict[str, Any] | None:
        """Write the stashed batches, close the epoch's data files durably; their pending entry."""
        self._write_stashed(loc)
        files = []
        try:
            for f in self._files.values():
                f.writer.close()
                size = loc.seal(f.handle)
                loc.sync_dir(os.path.dirname(f.rel))
                files.append({"path": f.rel, "size": size, "partition": f.partition,
                              "rows": f.rows})  # fmt: skip
        except Exception as e:
            raise self._failed(loc, f"writing the data files of epoch {epoch}", e) from None
        self._files, self._file_no = {}, 0
        return {"epoch": epoch, "files": files} if files else None

    def _drop_unwritten(self) -> None:
        """Forget buffered records and open data files (a restore, a start over or close follows)."""
        self._bg.drain()
        for f in self._files.values():
            try:
                f.handle.close()
            except Exception:  # an upload that cannot complete: never named by the log
                logger.debug("%s: close failed", self.label(), exc_info=True)
        self._rows, self._ops, self._pending, self._misfits, self._stashed = [], {}, [], [], []
        self._files, self._file_no = {}, 0

    # ---------------------------------------------------------------- checkpoint contract
    def pre_commit(self, epoch: int) -> dict[str, object]:
        """Write the epoch durably, unreferenced by the log; the handle lists every pending epoch."""
        loc = self._location()
        entry: dict[str, Any] | None = None
        if self.mode == "append":
            self._flush_rows()
            self._settle()  # every write of the epoch done (or its error raised) before the seal
            entry = self._io(loc, f"writing the data files of epoch {epoch}",
                             partial(self._seal_files, loc, epoch))  # fmt: skip
        elif self._ops:
            ops, self._ops = self._ops, {}
            entry = self._write_stage(loc, epoch, ops)
        self._next_epoch = epoch + 1
        if entry is not None:
            self._pending.append(entry)
        return {"sink": self.sink_id, "epoch": epoch, "pending": [dict(p) for p in self._pending]}

    def _write_stage(
        self, loc: Location, epoch: int, ops: dict[tuple[object, ...], Mapping[str, object] | None]
    ) -> dict[str, object]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._ready()  # the table opened first: rows that do not fit its schema are refused
        schema = self._schema.append(pa.field(_DELETE, pa.bool_()))
        rows: list[Mapping[str, Any]] = []
        for k, rec in ops.items():
            if rec is None:
                rows.append({**dict(zip(self.key, k)), _DELETE: True})
            else:
                rows.append({**rec, _DELETE: False})
        table = self._records_table(rows, schema)
        rel = f"{self.home}/stage/epoch-{epoch:012d}.parquet"

        def stage() -> None:
            f = loc.open_write(rel)
            pq.write_table(table, f)
            loc.seal(f)
            loc.sync_dir(os.path.dirname(rel))

        self._io(loc, f"staging epoch {epoch}", stage)
        return {"epoch": epoch, "stage": rel}

    def commit(self, epoch: int, handle: object) -> None:
        """One Delta commit per pending epoch up to ``epoch``; epochs the log holds are skipped."""
        loc = self._location()
        while self._pending and self._pending[0]["epoch"] <= epoch:
            entry = self._pending[0]
            self._io(loc, f"committing epoch {entry['epoch']}", partial(self._apply, loc, entry))
            self._pending.pop(0)

    def _apply(self, loc: Location, entry: dict[str, Any]) -> bool:
        """Commit one epoch's entry unless the table's log already holds it."""
        from deltalake import CommitProperties, Transaction

        epoch = int(entry["epoch"])
        try:
            dt = self._table()
            done = self._version(dt)
            if done is not None and done >= epoch:
                if "stage" in entry:
                    loc.remove([entry["stage"]])
                return False
            props = CommitProperties(app_transactions=[Transaction(self.app_id, epoch)])
            if "files" in entry:
                self._commit_files(loc, dt, entry["files"], props)
            else:
                self._commit_merge(loc, dt, entry["stage"], props, epoch)
                loc.remove([entry["stage"]])
        except LakeSinkError:
            raise
        except Exception as e:
            raise self._failed(loc, f"committing epoch {epoch}", e) from None
        logger.debug("%s: epoch %d committed", self.label(), epoch)
        return True

    def _commit_files(
        self, loc: Location, dt: Any, files: list[dict[str, Any]], props: Any
    ) -> None:
        from deltalake.transaction import AddAction

        now = int(time.time() * 1000)
        actions = []
        for f in files:
            if not loc.exists(f["path"]):
                raise LakeSinkError(
                    f"{self.label()}: data file {f['path']!r} of a durable checkpoint is missing "
                    f"from {loc.where()}; someone deleted it: rerun with --from-scratch"
                )
            stats = json.dumps({"numRecords": f["rows"]})
            # the file's path relative to the table: deltalake escapes it in the log itself
            actions.append(AddAction(f["path"], f["size"], f["partition"], now, True, stats))
        dt.create_write_transaction(
            actions, mode="append", schema=dt.schema(), partition_by=self.partition_by or None,
            commit_properties=props,
        )  # fmt: skip
        dt.update_incremental()  # the object does not follow a commit made this way

    def _commit_merge(self, loc: Location, dt: Any, stage: str, props: Any, epoch: int) -> None:
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        if not loc.exists(stage):
            raise LakeSinkError(
                f"{self.label()}: staged epoch {stage!r} of a durable checkpoint is missing from "
                f"{loc.where()}; someone deleted it: rerun with --from-scratch"
            )
        source = pq.read_table(io.BytesIO(loc.read_bytes(stage)))
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self.key)
        cols = {c: f"s.`{c}`" for c in source.column_names if c != _DELETE}
        try:
            (
                dt.merge(source, on, source_alias="s", target_alias="t", commit_properties=props)
                .when_matched_delete(predicate=f"s.{_DELETE}")
                .when_matched_update(cols, predicate=f"NOT s.{_DELETE}")
                .when_not_matched_insert(cols, predicate=f"NOT s.{_DELETE}")
                .execute()
            )
        except Exception as e:
            table = pa.schema(dt.schema().to_arrow())
            wrong = [f"{c!r} ({source.schema.field(c).type}, the table's {table.field(c).type})"
                     for c in cols if c in table.names
                     and source.schema.field(c).type != table.field(c).type]  # fmt: skip
            if not wrong or no_answer(e):
                raise
            raise LakeSinkError(
                f"{self.label()}: the rows staged for epoch {epoch} do not fit the table's schema "
                f"in column(s) {', '.join(wrong)} and cannot be merged ({type(e).__name__}: "
                f"{one_line(e)}); change those columns of the table to the records' types, or "
                "run again with a new checkpoint directory"
            ) from None

    def restore(self, handle: Any) -> None:
        """Commit the checkpoint's pending epochs; delete files of later (never committed) ones."""
        loc = self._location()
        epoch = self._handle_epoch(handle, "Delta")
        self._drop_unwritten()
        self._next_epoch = epoch + 1
        self._dt = None  # read the log afresh
        done = self._io(loc, "reading the table's log", self._done)
        if done is not None and done > epoch:
            raise LakeSinkError(
                f"{self.label()}: the table {loc.where()} holds this sink's epochs up to {done}, "
                f"newer than the checkpoint being restored (epoch {epoch}); resuming would write "
                f"epochs {epoch + 1}..{done} twice. Restore the newest checkpoint, or rerun with "
                "--from-scratch"
            )
        pending = (handle or {}).get("pending", [])
        committed = self._io(loc, "committing the checkpoint's epochs",
                             lambda: sum(self._apply(loc, p) for p in pending))  # fmt: skip

        def delete_later() -> list[str]:
            dt = self._table()
            live = set() if dt is None else self._live_names(dt)
            later = [r for r, e in self._own_files(loc)
                     if e > epoch and os.path.basename(r) not in live]  # fmt: skip
            loc.remove(later)
            return later

        later = self._io(loc, "deleting files of epochs after the checkpoint", delete_later)
        logger.info(
            "%s: restored to epoch %d in %s: %d epoch(s) committed, %d uncommitted file(s) deleted",
            self.label(), epoch, loc.where(), committed, len(later),
        )  # fmt: skip

    def _done(self) -> int | None:
        """The last epoch of this sink the table's log holds (``None``: none, or no table)."""
        dt = self._table()
        return None if dt is None else self._version(dt)

    @staticmethod
    def _live_names(dt: Any) -> set[str]:
        """The names of the data files the table's current version holds."""
        paths = dt.get_add_actions(flatten=True).column("path").to_pylist()
        return {os.path.basename(str(p)) for p in paths}

    def _own_files(self, loc: Location) -> list[tuple[str, int]]:
        """The sink's data and staged files (committed or not) and their epochs."""
        out = []
        for rel in loc.files():
            if rel.startswith("_delta_log/"):
                continue
            base = os.path.basename(rel)
            m = _DATA.match(base)
            if m is not None and m.group(1) == self.digest:
                out.append((rel, int(m.group(2))))
            elif rel.startswith(f"{self.home}/stage/epoch-"):
                out.append((rel, int(base[len("epoch-") : len("epoch-") + 12])))
        return out

    def start_over(self) -> None:
        """Delete every row in one commit that resets the sink's version (``--from-scratch``)."""
        from deltalake import CommitProperties, Transaction

        loc = self._location()
        self._drop_unwritten()

        def delete() -> None:
            dt = self._table()
            if dt is not None:
                dt.delete(commit_properties=CommitProperties(
                    app_transactions=[Transaction(self.app_id, -1)]))  # fmt: skip
            loc.remove([r for r, _ in self._own_files(loc) if r.startswith(self.home)])

        self._io(loc, "starting over", delete)
        logger.warning(
            "%s: starting over from scratch: deleted every row of %s (one Delta commit; older "
            "versions stay readable by time travel until VACUUM)", self.label(), loc.where(),
        )  # fmt: skip

    def unaccounted_output(self) -> str | None:
        """The epoch the table's log holds for this sink id when no checkpoint knows it."""
        loc = self._location()
        done = self._io(loc, "reading the table's log", self._done)
        if done is None:
            return None
        return (
            f"{self.label()}: the table {loc.where()} holds this sink's output up to epoch "
            f"{done} from an earlier run"
        )

    def close(self) -> None:
        """Release the lock (idempotent); open data files are left unnamed by the log."""
        self._closed = True
        files, self._files = list(self._files.values()), {}
        self._shut(files)
        self._drop_unwritten()

    def state_signature(self) -> str:
        return f"ToDelta(url={self.url!r}, sink_id={self.sink_id!r})"
