"""The two stores of ``to_sql`` (:mod:`rivermark.sinks.sql`): SQLite and PostgreSQL.

Each implements the same steps for one sink: take the sink id's lock, read
the table's columns, ``prepare`` an epoch (durable, invisible), ``commit``
it (idempotent), ``resolve`` what a crash left at ``restore``, and
``start_over``.  The protocol they implement is described in
:mod:`rivermark.sinks.sql`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from rivermark._fileid import lock_or_holder
from rivermark.sinks.base import sink_digest
from rivermark.sinks.sqlconnect import SQLError, pg_where, quote, sqlite_where, table_columns
from rivermark.sinks.sqlconnect import first_line as first_line
from rivermark.statedata import register_state_class

logger = logging.getLogger(__name__)

__all__ = ["MARKERS", "Delete", "SQLSinkError", "delete"]

MARKERS = "_rivermark_epochs"


class SinkTable(Protocol):
    """What a store reads of its sink (``to_sql``'s node): the table and how to name it."""

    @property
    def table(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def key(self) -> Sequence[str]: ...
    @property
    def sink_id(self) -> str: ...
    @property
    def column_names(self) -> Sequence[str]: ...
    @property
    def column_types(self) -> Mapping[str, str] | None: ...

    def label(self) -> str:
        """The sink in one phrase, for messages."""
        ...

    def newer_marker(self, marker: int, epoch: int, where: str) -> SQLSinkError:
        """The refusal of a table that holds epochs newer than the checkpoint."""
        ...


class SQLSinkError(SQLError):
    """A SQL sink cannot reach, write or resolve its table (the message says what to do)."""


@dataclass(frozen=True)
class Delete:
    """A tombstone for ``to_sql(mode="upsert")``: delete the row with this key."""

    key: Mapping[str, Any]


# an accumulator may hold a tombstone as its last output: checkpoints write it as data
register_state_class(Delete, ("key",))


def delete(**key: Hashable) -> Delete:
    """A tombstone: ``delete(user="ann")`` deletes the row whose key is ``user='ann'``."""
    return Delete(dict(key))


class SQLStore:
    """One database dialect: connection, lock, marker, and the epoch's two phases."""

    ph = "?"

    def __init__(self, sink: SinkTable, conn: Any) -> None:
        self.sink, self.conn = sink, conn

    def where(self) -> str:
        raise NotImplementedError

    # helpers shared by both dialects ------------------------------------------------
    def insert_sql(self, table: str, upsert: bool) -> str:
        cols = self.sink.column_names
        values = f"VALUES ({', '.join([self.ph] * len(cols))})"
        return f"{self.insert_head(table)} {values}{self.conflict() if upsert else ''}"

    def insert_head(self, table: str) -> str:
        return f"INSERT INTO {quote(table)} ({', '.join(map(quote, self.sink.column_names))})"

    def conflict(self) -> str:
        """The upsert clause: a row whose key exists replaces its other columns."""
        rest = [c for c in self.sink.column_names if c not in self.sink.key]
        keys = ", ".join(map(quote, self.sink.key))
        if not rest:
            return f" ON CONFLICT ({keys}) DO NOTHING"
        sets = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in rest)
        return f" ON CONFLICT ({keys}) DO UPDATE SET {sets}"

    def delete_sql(self, table: str) -> str:
        cond = " AND ".join(f"{quote(k)} = {self.ph}" for k in self.sink.key)
        return f"DELETE FROM {quote(table)} WHERE {cond}"

    def create_sql(self) -> str:
        s = self.sink
        assert s.column_types is not None
        cols = [f"{quote(c)} {t}" for c, t in s.column_types.items()]
        if s.key:
            cols.append(f"PRIMARY KEY ({', '.join(map(quote, s.key))})")
        return f"CREATE TABLE IF NOT EXISTS {quote(s.table)} ({', '.join(cols)})"


class SQLiteStore(SQLStore):
    ph = "?"

    def __init__(self, sink: SinkTable, conn: Any, path: str | None) -> None:
        super().__init__(sink, conn)
        self.path = path
        self.stage = f"_rivermark_stage_{sink.table}"
        self._lock: IO[str] | None = None
        conn.isolation_level = None  # transactions are explicit
        conn.execute("PRAGMA synchronous=FULL")

    def where(self) -> str:
        return sqlite_where(self.path)

    def lock(self) -> None:
        if self.path is None or self._lock is not None:
            return
        digest = sink_digest(self.sink.sink_id)
        lock = open(f"{self.path}.rivermark-{digest}.lock", "a+")  # noqa: SIM115 - until close()
        holder = lock_or_holder(lock.fileno(), "another process")
        if holder is not None:
            lock.close()
            raise SQLSinkError(
                f"{self.sink.label()}: another job writes through this sink id ({holder}) "
                f"into {self.where()}; two jobs through one sink id would mix their epochs. "
                "Stop that job first, or give this sink another name"
            ) from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        self._lock = lock

    def columns(self) -> list[str]:
        return table_columns(self.conn, False, self.sink.table)

    def setup(self) -> None:
        c = self.conn
        c.execute(f"CREATE TABLE IF NOT EXISTS {MARKERS} (sink_id TEXT PRIMARY KEY, epoch INTEGER)")
        cols = ", ".join(quote(x) for x in self.sink.column_names)
        c.execute(
            f"CREATE TABLE IF NOT EXISTS {quote(self.stage)} "
            f"(_rm_sink TEXT, _rm_epoch INTEGER, _rm_op INTEGER, {cols})"
        )

    def marker(self) -> int | None:
        row = self.conn.execute(
            f"SELECT epoch FROM {MARKERS} WHERE sink_id = ?", (self.sink.sink_id,)
        ).fetchone()
        return None if row is None else int(row[0])

    def prepare(
        self, epoch: int, rows: list[tuple[Any, ...]], deletes: list[tuple[Any, ...]]
    ) -> None:
        c, sid = self.conn, self.sink.sink_id
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute(
                f"DELETE FROM {quote(self.stage)} WHERE _rm_sink = ? AND _rm_epoch >= ?",
                (sid, epoch),
            )
            c.executemany(*self._staged(epoch, 0, rows))
            c.executemany(*self._staged(epoch, 1, [self._key_row(k) for k in deletes]))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _staged(
        self, epoch: int, op: int, rows: Sequence[Sequence[Any]]
    ) -> tuple[str, Sequence[Sequence[Any]]]:
        """The staging insert of one epoch's rows (op 0) or tombstones (op 1), and its rows.

        The sink id, epoch and op are written into the statement as literals, so
        that each row is bound as it is, without a longer tuple made for it; a
        sink id with a NUL character (which SQL text cannot hold) is bound instead.
        """
        sid = self.sink.sink_id
        holes = ", ".join(["?"] * len(self.sink.column_names))
        if "\x00" in sid:
            sql = f"INSERT INTO {quote(self.stage)} VALUES (?, ?, ?, {holes})"
            return sql, [(sid, epoch, op, *r) for r in rows]
        lit = "'" + sid.replace("'", "''") + "'"
        sql = f"INSERT INTO {quote(self.stage)} VALUES ({lit}, {int(epoch)}, {int(op)}, {holes})"
        return sql, rows

    def _key_row(self, key: tuple[Any, ...]) -> list[Any]:
        """A staged tombstone: the key in the key columns' places, the rest NULL."""
        row: list[Any] = [None] * len(self.sink.column_names)
        for name, v in zip(self.sink.key, key):
            row[self.sink.column_names.index(name)] = v
        return row

    def commit(self, epoch: int) -> None:
        c, s = self.conn, self.sink
        c.execute("BEGIN IMMEDIATE")
        try:
            marker = self.marker()
            if marker is not None and marker >= epoch:
                c.execute("ROLLBACK")
                return
            self._move(epoch)
            self._set_marker(epoch)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        logger.debug("%s: epoch %d committed into %s", s.label(), epoch, self.where())

    def _set_marker(self, epoch: int) -> None:
        self.conn.execute(
            f"INSERT INTO {MARKERS} (sink_id, epoch) VALUES (?, ?) "
            "ON CONFLICT (sink_id) DO UPDATE SET epoch = excluded.epoch",
            (self.sink.sink_id, epoch),
        )

    def _move(self, upto: int) -> None:
        """Move the staged epochs up to ``upto`` into the table (inside a transaction)."""
        c, s, sid = self.conn, self.sink, self.sink.sink_id
        cols = ", ".join(map(quote, s.column_names))
        upsert = s.mode == "upsert"
        # what the staging table holds, by sink and epoch (other sinks may stage here)
        staged = [
            (who, int(e))
            for who, e in c.execute(f"SELECT DISTINCT _rm_sink, _rm_epoch FROM {quote(self.stage)}")
        ]
        epochs = sorted(e for who, e in staged if who == sid and e <= upto)
        moves_all = all(who == sid and e <= upto for who, e in staged)
        # this sink's one epoch alone in the staging table (the common case): its
        # rows need no test of sink and epoch each
        which = "" if moves_all and len(epochs) == 1 else "_rm_sink = ? AND _rm_epoch = ? AND "
        for e in epochs:
            args = (sid, e) if which else ()
            if upsert:
                keys = ", ".join(map(quote, s.key))
                c.execute(
                    f"DELETE FROM {quote(s.table)} WHERE ({keys}) IN (SELECT {keys} FROM "
                    f"{quote(self.stage)} WHERE {which}_rm_op = 1)",
                    args,
                )
            c.execute(
                f"{self.insert_head(s.table)} SELECT {cols} FROM {quote(self.stage)} WHERE "
                f"{which}_rm_op = 0 ORDER BY rowid{self.conflict() if upsert else ''}",
                args,
            )
        if moves_all:
            # a DELETE without WHERE frees whole pages (SQLite's truncate
            # optimisation) instead of deleting row by row
            c.execute(f"DELETE FROM {quote(self.stage)}")
        else:
            c.execute(
                f"DELETE FROM {quote(self.stage)} WHERE _rm_sink = ? AND _rm_epoch <= ?",
                (sid, upto),
            )

    def resolve(self, epoch: int | None) -> str:
        c, sid = self.conn, self.sink.sink_id
        c.execute("BEGIN IMMEDIATE")
        try:
            marker = self.marker()
            if epoch is not None and marker is not None and marker > epoch:
                raise self.sink.newer_marker(marker, epoch, self.where())
            dropped = c.execute(
                f"DELETE FROM {quote(self.stage)} WHERE _rm_sink = ? AND _rm_epoch > ?",
                (sid, -1 if epoch is None else epoch),
            ).rowcount
            done = "nothing to resolve"
            if epoch is not None and (marker is None or marker < epoch):
                self._move(epoch)
                self._set_marker(epoch)
                done = f"epoch {epoch} committed from its staged rows"
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return f"{done}; {dropped} staged row(s) of later epochs dropped"

    def start_over(self) -> int:
        c, sid = self.conn, self.sink.sink_id
        c.execute("BEGIN IMMEDIATE")
        try:
            n = c.execute(f"DELETE FROM {quote(self.sink.table)}").rowcount
            c.execute(f"DELETE FROM {quote(self.stage)} WHERE _rm_sink = ?", (sid,))
            c.execute(f"DELETE FROM {MARKERS} WHERE sink_id = ?", (sid,))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return int(n)

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None


class PostgresStore(SQLStore):
    ph = "%s"

    def __init__(self, sink: SinkTable, conn: Any) -> None:
        super().__init__(sink, conn)
        conn.autocommit = True
        # a prepared transaction's id is unique in the whole server, not per database:
        # the database's digest keeps two databases' sinks of one name apart
        db = hashlib.sha256(str(conn.info.dbname).encode()).hexdigest()[:8]
        self.prefix = f"rivermark:{db}:{sink.sink_id}:"

    def where(self) -> str:
        return pg_where(self.conn)

    def gid(self, epoch: int) -> str:
        return f"{self.prefix}{epoch}"

    #: how long a lock held by a session that is ending is waited for: the server ends
    #: a closed connection's session (and releases its locks) a moment after the close
    LOCK_GRACE = 5.0

    def lock(self) -> None:
        name = f"rivermark-sink:{self.sink.sink_id}"
        deadline = time.monotonic() + self.LOCK_GRACE
        while True:
            got = self.conn.execute(
                "SELECT pg_try_advisory_lock(hashtext(%s))", (name,)
            ).fetchone()[0]
            if got or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if not got:
            raise SQLSinkError(
                f"{self.sink.label()}: another job writes through this sink id into "
                f"{self.where()}; two jobs through one sink id would mix their epochs. "
                "Stop that job first, or give this sink another name"
            )

    def columns(self) -> list[str]:
        return table_columns(self.conn, True, self.sink.table)

    def setup(self) -> None:
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {MARKERS} (sink_id TEXT PRIMARY KEY, epoch BIGINT)"
        )

    def marker(self) -> int | None:
        row = self.conn.execute(
            f"SELECT epoch FROM {MARKERS} WHERE sink_id = %s", (self.sink.sink_id,)
        ).fetchone()
        return None if row is None else int(row[0])

    def prepared(self) -> list[int]:
        """The epochs of this sink's prepared transactions in this database."""
        rows = self.conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND left(gid, length(%s)) = %s",
            (self.prefix, self.prefix),
        ).fetchall()
        return sorted(
            int(r[0][len(self.prefix) :]) for r in rows if r[0][len(self.prefix) :].isdigit()
        )

    def _finish(self, verb: str, epoch: int) -> None:
        from psycopg import sql

        self.conn.execute(sql.SQL(verb + " PREPARED {}").format(sql.Literal(self.gid(epoch))))

    def prepare(
        self, epoch: int, rows: list[tuple[Any, ...]], deletes: list[tuple[Any, ...]]
    ) -> None:
        from psycopg import sql

        c, s = self.conn, self.sink
        c.execute("BEGIN")
        try:
            with c.cursor() as cur:
                if deletes:
                    cur.executemany(self.delete_sql(s.table), deletes)
                if rows and s.mode == "append":
                    cols = ", ".join(map(quote, s.column_names))
                    with cur.copy(f"COPY {quote(s.table)} ({cols}) FROM STDIN") as copy:
                        for r in rows:
                            copy.write_row(r)
                elif rows:
                    cur.executemany(self.insert_sql(s.table, True), rows)
                cur.execute(
                    f"INSERT INTO {MARKERS} (sink_id, epoch) VALUES (%s, %s) "
                    "ON CONFLICT (sink_id) DO UPDATE SET epoch = excluded.epoch",
                    (s.sink_id, epoch),
                )
            c.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(self.gid(epoch))))
        except BaseException:
            try:
                c.execute("ROLLBACK")
            except Exception:  # the connection is gone: the server rolls back
                logger.debug("%s: rollback failed", s.label(), exc_info=True)
            raise

    def commit(self, epoch: int) -> None:
        if epoch in self.prepared():
            self._finish("COMMIT", epoch)
            return
        marker = self.marker()
        if marker is None or marker < epoch:
            raise SQLSinkError(
                f"{self.sink.label()}: the prepared transaction {self.gid(epoch)!r} of epoch "
                f"{epoch} is gone from {self.where()} (rolled back outside the job?); its rows "
                "are lost. Rerun the job with --from-scratch to rebuild the table"
            )

    def resolve(self, epoch: int | None) -> str:
        done: list[str] = []
        for p in self.prepared():
            if epoch is not None and p <= epoch:
                self._finish("COMMIT", p)
                done.append(f"committed prepared epoch {p}")
            else:
                self._finish("ROLLBACK", p)
                done.append(f"rolled back prepared epoch {p}")
        marker = self.marker()
        if epoch is not None:
            if marker is not None and marker > epoch:
                raise self.sink.newer_marker(marker, epoch, self.where())
            if marker is None or marker < epoch:
                raise SQLSinkError(
                    f"{self.sink.label()}: the checkpoint's epoch {epoch} is neither committed "
                    f"nor prepared in {self.where()} (its table says epoch {marker}); the rows "
                    "of that epoch are lost (a database restored from an older backup, or "
                    "prepared transactions rolled back by hand). Rerun with --from-scratch"
                )
        return "; ".join(done) or "nothing to resolve"

    def start_over(self) -> int:
        for p in self.prepared():
            self._finish("ROLLBACK", p)
        c = self.conn
        with c.transaction():
            n = c.execute(f"DELETE FROM {quote(self.sink.table)}").rowcount
            c.execute(f"DELETE FROM {MARKERS} WHERE sink_id = %s", (self.sink.sink_id,))
        return int(n)

    def close(self) -> None:
        try:
            if not self.conn.closed:  # released now, not when the server ends the session
                self.conn.execute("SELECT pg_advisory_unlock_all()")
        except Exception as e:  # noqa: BLE001 - the server went away: closing releases it
            logger.debug("%s: releasing the sink's lock: %s", self.sink.label(), e)
        finally:
            self.conn.close()
