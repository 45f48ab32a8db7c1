"""``to_sql``: write records into a SQL table (PostgreSQL or SQLite), exactly once.

Records are dicts (column -> value) or pandas DataFrame batches (one row a
record).  ``mode="append"`` inserts every record once; ``mode="upsert"``
keeps the latest value per ``key`` (the table's primary key or a unique
index on those columns) and deletes a key on a tombstone, :func:`delete`.

Exactly-once through the checkpoint protocol (:mod:`rivermark.sinks.base`).
The records of epoch ``e`` are held in memory until ``pre_commit(e)``;
within an epoch, upserts are folded to the last operation per key.

* PostgreSQL: ``pre_commit(e)`` opens a transaction, writes the epoch's
  rows in one batch (``COPY`` for append, a pipelined ``executemany`` for
  upsert) and the sink's marker row (sink id, ``e``) in ``_rivermark_epochs``,
  then ``PREPARE TRANSACTION 'rivermark:<db digest>:<sink id>:<e>'``: durable on the
  server, invisible to every reader.  ``commit(e)`` runs ``COMMIT PREPARED``.
  ``restore(handle)`` resolves what a crash left: the prepared transaction of
  the checkpoint's epoch (or an older one) is committed, later ones are
  rolled back; the marker then says the checkpoint's epoch.  The server needs
  ``max_prepared_transactions`` > 0.
* SQLite (one file, stdlib ``sqlite3``): ``pre_commit(e)`` writes the
  epoch's rows into a staging table ``_rivermark_stage_<table>`` in the same
  file (one transaction, ``synchronous=FULL``); ``commit(e)`` moves them into
  the table and sets the marker, in one transaction, and does nothing when the
  marker already says ``e`` or later.  ``restore(handle)`` moves a staged
  epoch up to the checkpoint's into the table and drops staged later ones.

Either way a reader sees an epoch's rows all at once, only after the
checkpoint holding them is durable, and never a row that later disappears.
The handle holds only the sink id, the epoch and the table: no connection
settings.  A marker newer than the checkpoint being restored (the table holds
output the checkpoint does not know) is refused, never written twice.

One job at a time per sink id: PostgreSQL holds an advisory lock on the
sink id for the connection's life; SQLite an exclusive ``flock`` on
``<file>.rivermark-<digest of the sink id>.lock``.  Without a checkpoint, a
marker of an earlier run is reported (``unaccounted_output``) and the job
refuses to start; ``--from-scratch`` (``start_over``) empties the table,
drops the sink's staged or prepared epochs and its marker, in one transaction.

>>> import contextlib, os, sqlite3, tempfile
>>> from rivermark import Job, Stream
>>> db = os.path.join(tempfile.mkdtemp(), "out.db")
>>> src = Stream.from_iterable([{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "a", "n": 3}])
>>> _ = src.to_sql(f"sqlite:///{db}", "totals", mode="upsert", key=["k"],
...                columns={"k": "TEXT", "n": "INTEGER"}, create=True)
>>> _ = Job(src, checkpoint=os.path.join(os.path.dirname(db), "ckpt")).run()
>>> with contextlib.closing(sqlite3.connect(db)) as c:
...     sorted(c.execute("SELECT k, n FROM totals"))
[('a', 3), ('b', 2)]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.core.refs import Metadata
from rivermark.errors import ConfigurationError
from rivermark.execution.steps import step
from rivermark.sinks.basic import Sink
from rivermark.sinks.sqlconnect import (
    check_target,
    connect,
    first_line,
    is_unreachable,
    sqlite_path,
    unreachable,
)
from rivermark.sinks.sqlstores import (
    Delete,
    PostgresStore,
    SQLiteStore,
    SQLSinkError,
    SQLStore,
    delete,
)

logger = logging.getLogger(__name__)


def _frame_records(df: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts of the values a driver takes.

    A missing value (``NaN``, ``None``, ``pd.NA``, ``NaT``; pandas 3's
    strings hold ``NaN`` for one) is ``None``, SQL's NULL, and a timestamp a
    ``datetime``, whatever the column's dtype.

    >>> import pandas as pd
    >>> df = pd.DataFrame({"s": ["a", None], "t": pd.to_datetime(["2026-01-01", None])})
    >>> _frame_records(df)
    [{'s': 'a', 't': datetime.datetime(2026, 1, 1, 0, 0)}, {'s': None, 't': None}]
    """
    import pandas as pd

    columns = []
    for name in df.columns:
        col = df[name]
        if pd.api.types.is_datetime64_any_dtype(col.dtype):
            values = [None if v is pd.NaT else v.to_pydatetime() for v in col]
        else:
            values = col.astype(object).where(col.notna(), None).tolist()
        columns.append(values)
    names = list(df.columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


__all__ = ["Delete", "SQLSinkError", "ToSQL", "delete"]


if TYPE_CHECKING:
    from rivermark.sinks.base import CheckpointedSink


class SQLHandle(TypedDict):
    """A SQL sink's handle: which sink wrote which epoch into which table."""

    sink: str
    epoch: int
    table: str


@Stream.register_api(attribute_name="to_sql")
class ToSQL(Sink):
    """Write dict records or DataFrame batches into ``table``, exactly once under a Job.

    ``target``: ``"sqlite:///path/to/file.db"``, ``"postgresql://user@host:port/db"``,
    or a function returning a new DB-API connection (``sqlite3`` or psycopg 3).
    ``mode``: ``"append"`` (every record a row) or ``"upsert"`` (by ``key``;
    :func:`delete` deletes).  ``columns``: the column names, or a mapping
    name -> SQL type (needed with ``create=True``, which creates the table,
    ``key`` as its primary key); by default the table's own columns.
    ``sink_id``: the name the marker, the lock and prepared transactions carry
    (default: the node's ``name``, else the table).  ``timeout``: seconds to
    connect and per statement.  See the module docs for the protocol.
    """

    _graphviz_shape: ClassVar[str] = "trapezium"
    #: rows after pre_commit(e) are buffered for the next epoch
    seals_epoch_at_pre_commit: ClassVar[bool] = True

    def __init__(
        self,
        upstream: Stream,
        target: str | Callable[[], Any],
        table: str,
        *,
        mode: str = "append",
        key: Sequence[str] = (),
        columns: Sequence[str] | Mapping[str, str] | None = None,
        create: bool = False,
        sink_id: str | None = None,
        timeout: float = 30.0,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        if mode not in ("append", "upsert"):
            raise ConfigurationError(f"to_sql: mode must be 'append' or 'upsert', got {mode!r}")
        key = [key] if isinstance(key, str) else list(key)
        if mode == "upsert" and not key:
            raise ConfigurationError(
                "to_sql: mode='upsert' needs key=[...]: the columns that identify a row"
            )
        if not isinstance(table, str) or not table:
            raise ConfigurationError(f"to_sql: table must be a non-empty string, got {table!r}")
        if create and not isinstance(columns, Mapping):
            raise ConfigurationError(
                f"to_sql: create=True needs the column types: columns={{'name': 'TYPE', ...}}, "
                f"got columns={columns!r}"
            )
        check_target("to_sql", target)
        if (
            isinstance(target, str)
            and target.startswith("sqlite://")
            and sqlite_path(target) in ("", ":memory:")
        ):
            raise ConfigurationError(
                f"to_sql: {target!r} is a database in memory (or a temporary one), gone "
                "when the job ends: what a checkpoint says was written would be lost; "
                "give a file, 'sqlite:///path/to/out.db'"
            )
        self.target = target
        self.table = table
        self.mode = mode
        self.key = key
        self.create = bool(create)
        self.timeout = float(timeout)
        self.column_types = dict(columns) if isinstance(columns, Mapping) else None
        self.column_names: list[str] = list(columns) if columns is not None else []
        self._column_set = frozenset(self.column_names)
        super().__init__(upstream, **kwargs)
        self.sink_id = sink_id or self.name or table
        if len(self.sink_id) > 150:
            raise ConfigurationError(
                f"to_sql: sink_id {self.sink_id[:40]!r}... is longer than 150 characters; "
                "pass a shorter sink_id="
            )
        self._store: SQLiteStore | PostgresStore | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._ops: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
        #: where a row goes: appended to ``_rows``, or folded into ``_ops`` by key
        self._put: Callable[[tuple[Any, ...]], None] = self._rows.append
        #: the number of columns when a plain dict with exactly these keys may take
        #: the short path of :meth:`update` (``_row_of``); -1 until the table is known
        self._width = -1
        self._row_of: Callable[[dict[str, Any]], tuple[Any, ...]] = tuple
        #: the key of a row: its one key column's position, or -1 and ``_key_of_row``
        self._key_one = -1
        self._key_of_row: Callable[[tuple[Any, ...]], tuple[Any, ...]] = tuple
        self._reset()
        self._closed = False

    def label(self) -> str:
        return f"to_sql sink {self.sink_id!r} (table {self.table!r})"

    def newer_marker(self, marker: int, epoch: int, where: str) -> SQLSinkError:
        return SQLSinkError(
            f"{self.label()}: {where} holds this sink's output up to epoch {marker}, newer "
            f"than the checkpoint being restored (epoch {epoch}); resuming would write epochs "
            f"{epoch + 1}..{marker} twice. Restore the newest checkpoint, or rerun with "
            "--from-scratch"
        )

    # ---------------------------------------------------------------- connection
    def _connect(self) -> SQLiteStore | PostgresStore:
        if self._store is not None:
            return self._store
        if self._closed:
            raise ConfigurationError(f"{self.label()}: used after close()")
        store: SQLiteStore | PostgresStore | None = None
        try:
            store = self._open()
            if isinstance(store, PostgresStore):
                store.conn.execute(f"SET statement_timeout = {int(self.timeout * 1000)}")
            store.lock()
        except BaseException:
            if store is not None:
                store.close()
            raise
        self._store = store
        return store

    def _open(self) -> SQLiteStore | PostgresStore:
        """A store on a new connection (:func:`~rivermark.sinks.sqlconnect.connect`)."""
        c = connect(self.target, self.timeout, self.label(), SQLSinkError)
        if c.postgres:
            return PostgresStore(self, c.conn)
        return SQLiteStore(self, c.conn, c.path)

    def _failed(self, store: SQLStore, what: str, e: Exception) -> SQLSinkError:
        logger.debug("%s: %s failed", self.label(), what, exc_info=True)
        if is_unreachable(e):
            return SQLSinkError(unreachable(self.label(), what, store.where(), e))
        return SQLSinkError(
            f"{self.label()}: {what} failed in {store.where()} ({type(e).__name__}: "
            f"{first_line(e)}); check that the records fit the table's columns"
        )

    # ---------------------------------------------------------------- records
    @step
    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        # the common record first: a plain dict with exactly the table's columns
        # becomes its row in one C call (a key the table lacks raises KeyError)
        if type(x) is dict and len(x) == self._width:
            try:
                self._put(self._row_of(x))
            except KeyError:
                self._update_other(x)  # names the column the table lacks
            return None
        self._update_other(x)
        return None

    def _update_other(self, x: Any) -> None:
        """A record the short path of :meth:`update` does not take, or the first one."""
        if not self.column_names:
            self._prepare_table()
        if type(x) is dict:
            self._add(x)
        elif hasattr(x, "to_dict") and hasattr(x, "columns"):
            for rec in _frame_records(x):
                self._add(rec)
        else:
            self._add(x)

    def _reset(self) -> None:
        """Empty the epoch's buffers (after they were written, or on restore)."""
        self._rows, self._ops = [], {}
        self._put = self._rows.append if self.mode == "append" else self._put_upsert

    def _put_upsert(self, row: tuple[Any, ...]) -> None:
        i = self._key_one
        k = (row[i],) if i >= 0 else self._key_of_row(row)
        self._ops.pop(k, None)  # re-insert at the end: the order of last operations
        self._ops[k] = row

    def _columns_known(self) -> None:
        """Set up the short path of :meth:`update` for the table's columns."""
        cols = self.column_names
        # itemgetter of one name returns the value, not a 1-tuple; a name given
        # twice would let a dict with another key through
        if len(cols) < 2 or len(set(cols)) != len(cols) or not set(self.key) <= set(cols):
            self._width = -1
            return
        self._row_of = itemgetter(*cols)
        at = [cols.index(k) for k in self.key]
        if len(at) == 1:
            self._key_one = at[0]
        elif at:  # two or more positions: itemgetter returns their tuple
            self._key_one, self._key_of_row = -1, itemgetter(*at)
        self._width = len(cols)

    def _add(self, rec: object) -> None:
        cols = self.column_names
        if type(rec) is dict and len(rec) == self._width:
            try:
                self._put(self._row_of(rec))
                return
            except KeyError:
                pass  # a column the table lacks: named below
        if type(rec) is not dict:
            if isinstance(rec, Delete):
                self._add_delete(rec)
                return
            if not isinstance(rec, Mapping):
                raise ConfigurationError(
                    f"{self.label()}: received {rec!r}; to_sql writes dicts (column -> value) "
                    "or DataFrames: add a .map(...) that builds one"
                )
        if not rec.keys() <= self._column_set:
            extra = [c for c in rec if c not in self._column_set]
            raise ConfigurationError(
                f"{self.label()}: record {rec!r} has column(s) {extra!r} that the table does "
                f"not have (its columns: {cols!r})"
            )
        row = tuple(map(rec.get, cols))
        if self.mode == "append":
            self._rows.append(row)
        else:
            k = self._key_of(rec, rec)
            self._ops.pop(k, None)  # re-insert at the end: the order of last operations
            self._ops[k] = row

    def _add_delete(self, rec: Delete) -> None:
        if self.mode != "upsert":
            raise ConfigurationError(
                f"{self.label()}: received {rec!r}; a tombstone needs mode='upsert'"
            )
        k = self._key_of(rec.key, rec)
        self._ops.pop(k, None)
        self._ops[k] = None

    def _key_of(self, rec: Mapping[str, Any], whole: Any) -> tuple[Any, ...]:
        try:
            return tuple(rec[k] for k in self.key)
        except KeyError:
            raise ConfigurationError(
                f"{self.label()}: record {whole!r} lacks a key column of {self.key!r}"
            ) from None

    def _prepare_table(self) -> None:
        store = self._connect()
        try:
            existing = store.columns()
            if not existing:
                if not self.create:
                    raise SQLSinkError(
                        f"{self.label()}: table {self.table!r} does not exist in {store.where()}; "
                        "create it, or pass create=True with columns={'name': 'TYPE', ...}"
                    )
                store.conn.execute(store.create_sql())
                existing = store.columns()
            if not self.column_names:
                self.column_names = existing
                self._column_set = frozenset(existing)
            missing = [c for c in self.column_names if c not in existing]
            if missing:
                raise SQLSinkError(
                    f"{self.label()}: table {self.table!r} in {store.where()} has no column(s) "
                    f"{missing!r} (its columns: {existing!r})"
                )
            self._columns_known()
            store.setup()
        except SQLSinkError:
            raise
        except Exception as e:
            raise self._failed(store, "preparing the table", e) from None

    # ---------------------------------------------------------------- checkpoint contract
    def pre_commit(self, epoch: int) -> SQLHandle:
        """Write epoch ``epoch``'s rows durably but invisibly; the handle names sink, epoch, table."""
        if not self.column_names:
            self._prepare_table()
        store = self._connect()
        rows, ops = self._rows, self._ops
        self._reset()
        if self.mode == "upsert":
            rows = [r for r in ops.values() if r is not None]
            deletes = [k for k, r in ops.items() if r is None]
        else:
            deletes = []
        try:
            store.prepare(epoch, rows, deletes)
        except Exception as e:
            raise self._failed(store, f"writing epoch {epoch}", e) from None
        logger.debug("%s: epoch %d prepared (%d rows)", self.label(), epoch, len(rows))
        return {"sink": self.sink_id, "epoch": epoch, "table": self.table}

    def commit(self, epoch: int, handle: SQLHandle) -> None:
        """Make epoch ``epoch``'s rows visible (idempotent)."""
        store = self._connect()
        try:
            store.commit(epoch)
        except SQLSinkError:
            raise
        except Exception as e:
            raise self._failed(store, f"committing epoch {epoch}", e) from None

    def restore(self, handle: SQLHandle | None) -> None:
        """Commit the checkpoint's epoch if still pending; drop every later one."""
        self._prepare_table()
        store = self._connect()
        epoch = None if handle is None else int(handle["epoch"])
        if handle is not None and (handle.get("sink"), handle.get("table")) != (
            self.sink_id,
            self.table,
        ):
            raise SQLSinkError(
                f"{self.label()}: the checkpoint's SQL sink wrote {handle.get('table')!r} "
                f"as sink id {handle.get('sink')!r}; write there again, or use a new "
                "checkpoint directory"
            )
        try:
            done = store.resolve(epoch)
        except SQLSinkError:
            raise
        except Exception as e:
            raise self._failed(store, "resolving the last epoch", e) from None
        self._reset()
        logger.info("%s: restored to epoch %s in %s: %s", self.label(), epoch, store.where(), done)

    def start_over(self) -> None:
        """Empty the table and forget this sink's epochs (``--from-scratch``)."""
        self._prepare_table()
        store = self._connect()
        try:
            n = store.start_over()
        except Exception as e:
            raise self._failed(store, "starting over", e) from None
        self._reset()
        logger.warning(
            "%s: starting over from scratch: emptied table %r in %s (%d rows deleted)",
            self.label(), self.table, store.where(), n,
        )  # fmt: skip

    def unaccounted_output(self) -> str | None:
        """The epoch an earlier run of this sink id committed, when no checkpoint knows it."""
        self._prepare_table()
        store = self._connect()
        marker = store.marker()
        if marker is None:
            return None
        return (
            f"{self.label()}: {store.where()} holds this sink's output up to epoch {marker} "
            "from an earlier run"
        )

    def close(self) -> None:
        """Close the connection and release the sink id's lock (idempotent)."""
        self._closed = True
        store, self._store = self._store, None
        if store is not None:
            try:
                store.close()
            except Exception:  # a connection to a dead server
                logger.debug("%s: close failed", self.label(), exc_info=True)

    def state_signature(self) -> str:
        return f"ToSQL(table={self.table!r}, sink_id={self.sink_id!r})"


if TYPE_CHECKING:  # the type checker holds the sink to the contract, with its handle type
    _checkpointed: type[CheckpointedSink[SQLHandle]] = ToSQL
