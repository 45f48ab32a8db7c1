"""``lookup_sql``: join each record with its key's row in a SQL table (PostgreSQL, SQLite).

``stream.lookup_sql(target, table, key=..., on=None, columns=None,
how="inner", cache=10_000, ttl=None)`` reads, for each record, the row of
``table`` whose column ``on`` equals the record's key, and emits ``(record,
row)`` as ``join_asof`` does: ``row`` is a dict (column -> value) of
``columns`` (default: every column of the table); ``how="inner"`` leaves out
records whose key has no row, ``how="left"`` emits them with ``None``.  A
DataFrame batch (pandas) is joined as a whole: ``key`` names its column, the
row's columns (but ``on``) are added to it, and its keys not in the cache
are read in one query (``WHERE on = ANY(...)``; SQLite ``IN (...)``, up to
500 keys a query).

**Not deterministic.**  The answer is the table's row when the record is
joined (or when it entered the cache): a replay, a restart or a backfill
after the table changed joins differently.  For output that is a function
of the input alone, stream the table's changes into ``to_table`` and use
``join_asof`` (``docs/joins.md``).

**The cache** holds up to ``cache`` keys (least recently used evicted
first; ``0``: none), each for ``ttl`` (seconds or a duration string; None:
until evicted), keys without a row included.  A change to the table is seen
once its key left the cache.  The cache is **not state**: nothing is
checkpointed, a restored job starts with an empty cache and reads the table
again.  Its hits, misses and size are in the job's metrics
(:class:`~rivermark.core.figures.JoinFigures`), counted since the process
started.

**Faults.**  The table and its columns are checked when the first record
arrives (one line naming the node).  A record whose key function raises
(or whose key cannot be hashed) goes through the node's error policy.  A
server gone away is reconnected to once; if that fails, the job stops with
one line naming the node, the server (host, port, database: never a user
or a password) and the remedy, within ``timeout`` seconds (the connect
timeout and the statement timeout).  Connection settings are never logged,
nor written to a checkpoint.

>>> import contextlib, os, sqlite3, tempfile
>>> from rivermark import Stream
>>> db = os.path.join(tempfile.mkdtemp(), "tiers.db")
>>> with contextlib.closing(sqlite3.connect(db)) as c, c:
...     _ = c.execute("CREATE TABLE tiers (name TEXT PRIMARY KEY, tier TEXT)")
...     _ = c.execute("INSERT INTO tiers VALUES ('ann', 'gold')")
>>> orders = Stream()
>>> joined = orders.lookup_sql(f"sqlite:///{db}", "tiers", key="name", how="left")
>>> out = joined.sink_to_list()
>>> orders.emit({"name": "ann", "n": 2}); orders.emit({"name": "bob", "n": 1})
>>> out
[({'name': 'ann', 'n': 2}, {'name': 'ann', 'tier': 'gold'}), ({'name': 'bob', 'n': 1}, None)]
>>> f = joined.join_figures(); (f.cache_hits, f.cache_misses, f.cache_size)
(0, 2, 2)
>>> joined.close()
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Unpack

from rivermark.core.figures import JoinFigures
from rivermark.core.node import NodeOptions, Stream
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.operators.joinbase import func_name, join_key
from rivermark.sinks.sqlconnect import (
    Connection,
    SQLError,
    check_target,
    connect,
    first_line,
    is_unreachable,
    quote,
    table_columns,
    unreachable,
)

logger = logging.getLogger(__name__)

__all__ = ["LookupSQL", "SQLLookupError"]

#: the most keys one SQLite query binds (SQLite's default limit is 999 before 3.32)
SQLITE_KEYS = 500


class SQLLookupError(SQLError):
    """``lookup_sql`` cannot reach or read its table (the message says what to do)."""


class _Absent:
    """The cache's entry of a key without a row."""


#: a key that has no row in the table (cached as such)
ABSENT = _Absent()


@Stream.register_api(attribute_name="lookup_sql")
class LookupSQL(Stream):
    """Join each record with its key's row in a SQL table (see the module docs).

    ``target``: a URL (``"sqlite:///file.db"``, ``"postgresql://user@host:port/db"``)
    or a function returning a new DB-API connection (``sqlite3`` or psycopg 3), as
    for ``to_sql``.  ``key``: the record's key (a callable, or an index or
    field name for ``x[key]``; a column name for DataFrame batches).  ``on``:
    the table's column to match (default: ``key`` when it is a name).
    ``columns``: the columns to read (default: all).  ``how``: ``"inner"`` or
    ``"left"``.  ``cache``: keys kept (LRU); ``ttl``: how long each is kept.
    ``timeout``: seconds to connect and per query.
    """

    _graphviz_shape = "triangle"
    kind = "lookup_sql"

    def __init__(
        self,
        upstream: Stream,
        target: str | Callable[[], Any],
        table: str,
        key: Hashable | Callable[[Any], Any] = None,
        *,
        on: str | None = None,
        columns: Sequence[str] | None = None,
        how: str = "inner",
        cache: int = 10_000,
        ttl: float | str | None = None,
        timeout: float = 30.0,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        check_target("lookup_sql", target)
        if not isinstance(table, str) or not table:
            raise ConfigurationError(f"lookup_sql: table must be a non-empty string, got {table!r}")
        self._key_of = join_key("lookup_sql", key)
        if on is None and not isinstance(key, str):
            raise ConfigurationError(
                f"lookup_sql: on= is required when key is not a column name (key={key!r}): "
                "pass on='the table column that holds the key'"
            )
        if how not in ("inner", "left"):
            raise ConfigurationError(f"lookup_sql: how must be 'inner' or 'left', got {how!r}")
        if isinstance(cache, bool) or not isinstance(cache, int) or cache < 0:
            raise ConfigurationError(
                f"lookup_sql: cache must be the number of keys to keep (0: none), got {cache!r}"
            )
        if isinstance(columns, str):
            columns = [columns]
        self.target = target
        self.table = table
        self.key = key
        self.on: str = on if on is not None else str(key)
        self.columns: list[str] | None = None if columns is None else list(columns)
        self.how = how
        #: the most keys the cache holds, and how long each is kept (None: until evicted)
        self.cache_limit = cache
        self.ttl = None if ttl is None else parse_interval(ttl, "lookup_sql", "ttl")
        self.timeout = float(timeout)
        #: key -> (expiry on the monotonic clock, row or ABSENT), least recently used first
        self._cache: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        #: keys answered from the cache, and read from the table, since the process started
        self.cache_hits = 0
        self.cache_misses = 0
        #: queries sent to the table (each reads one batch of keys)
        self.queries = 0
        self._conn: Connection | None = None
        self._read_columns: list[str] = []
        #: where the connection points, for messages (no credentials)
        self._where = ""
        Stream.__init__(self, upstream, **kwargs)

    def label(self) -> str:
        """The node in one phrase, for messages."""
        return f"lookup_sql {self.name or self.table!r} (table {self.table!r})"

    # ---------------------------------------------------------------- records
    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> Any:
        if _is_frame(x):
            return self._emit(self._join_frame(x), metadata)
        try:
            k = self._key_of(x)
            hash(k)
        except Exception as e:
            self._user_error(x, e, self.key)
            return None
        found = self._cached(k)
        if found is None:
            try:
                found = self._read([k])[k]
            except _BadKeys as e:
                self._user_error(x, SQLLookupError(str(e)), self.key)
                return None
        row = None if found is ABSENT else found
        if row is None and self.how == "inner":
            return None
        return self._emit((x, row), metadata)

    def _join_frame(self, frame: Any) -> Any:
        """A DataFrame batch with each row's columns of the table added (one query)."""
        import pandas as pd

        if not isinstance(self.key, str) or self.key not in frame.columns:
            raise ConfigurationError(
                f"{self.label()}: a DataFrame batch needs key= one of its columns "
                f"({list(frame.columns)!r}), got key={self.key!r}"
            )
        self._check()
        added = [c for c in self._read_columns if c != self.on]
        clash = [c for c in added if c in frame.columns]
        if clash:
            raise ConfigurationError(
                f"{self.label()}: the batch already has column(s) {clash!r} that the table "
                "adds; rename them, or pass columns= without them"
            )
        keys = [None if _missing(k) else k for k in frame[self.key].tolist()]
        found: dict[Any, Any] = {}
        todo = []
        for k in dict.fromkeys(keys):
            if k is None:
                continue
            hit = self._cached(k)
            if hit is None:
                todo.append(k)
            else:
                found[k] = hit
        if todo:
            try:
                found.update(self._read(todo))
            except _BadKeys as e:
                raise SQLLookupError(str(e)) from None
        rows: list[Any] = [found.get(k, ABSENT) if k is not None else ABSENT for k in keys]
        out = frame
        if self.how == "inner":
            keep = [r is not ABSENT for r in rows]
            out = frame[pd.Series(keep, index=frame.index, dtype=bool)]
            rows = [r for r in rows if r is not ABSENT]
        values = {c: [None if r is ABSENT else r[c] for r in rows] for c in added}
        return out.assign(**values) if added else out.copy()

    # ---------------------------------------------------------------- the cache
    def _cached(self, k: Any) -> Any:
        """``k``'s row (or ABSENT) from the cache, counted; None when it must be read."""
        entry = self._cache.get(k)
        if entry is not None:
            if entry[0] >= time.monotonic():
                self._cache.move_to_end(k)
                self.cache_hits += 1
                return entry[1]
            del self._cache[k]  # expired
        self.cache_misses += 1
        return None

    def _keep(self, found: dict[Any, Any]) -> None:
        """Put what a query read into the cache, evicting the least recently used keys."""
        limit = self.cache_limit
        if not limit:
            return
        expiry = math.inf if self.ttl is None else time.monotonic() + self.ttl
        cache = self._cache
        for k, row in found.items():
            cache[k] = (expiry, row)  # a key read was not in the cache: it goes to the end
        while len(cache) > limit:
            cache.popitem(last=False)

    @property
    def cache_size(self) -> int:
        """Keys in the cache now (expired ones not yet met included)."""
        return len(self._cache)

    def clear_cache(self) -> None:
        """Forget every cached row: the next record of each key reads the table."""
        self._cache.clear()

    # ---------------------------------------------------------------- the table
    def _check(self) -> Connection:
        """The connection, opened and the table checked on first use."""
        if self._conn is None:
            self._conn = self._open()
            logger.info("%s: reading from %s", self.label(), self._where)
        return self._conn

    def _open(self) -> Connection:
        pg_options = {"tcp_user_timeout": int(self.timeout * 1000)}
        c = connect(
            self.target, self.timeout, self.label(), SQLLookupError, any_thread=True, **pg_options
        )
        where = c.where  # read before a close below (a closed connection has no info)
        try:
            if c.postgres:
                c.conn.autocommit = True
                c.conn.execute(f"SET statement_timeout = {int(self.timeout * 1000)}")
            existing = table_columns(c.conn, c.postgres, self.table)
        except Exception as e:
            _close(c)
            raise self._failed(where, "reading the table's columns", e) from None
        if not existing:
            _close(c)
            raise SQLLookupError(
                f"{self.label()}: table {self.table!r} does not exist in {where}; create it, "
                "or check table= and the database"
            )
        wanted = self.columns if self.columns is not None else existing
        missing = [n for n in [self.on, *wanted] if n not in existing]
        if missing:
            _close(c)
            raise SQLLookupError(
                f"{self.label()}: table {self.table!r} in {where} has no column(s) "
                f"{list(dict.fromkeys(missing))!r} (its columns: {existing!r}); check on= "
                "and columns="
            )
        self._read_columns = list(wanted)
        self._where = where
        return c

    def _failed(self, where: str, what: str, e: Exception) -> SQLLookupError:
        logger.debug("%s: %s failed", self.label(), what, exc_info=True)
        if is_unreachable(e):
            return SQLLookupError(unreachable(self.label(), what, where, e))
        return SQLLookupError(
            f"{self.label()}: {what} failed in {where} ({type(e).__name__}: {first_line(e)}); "
            "the job stopped with its last checkpoint intact: check the table (and timeout=), "
            "then run again to resume"
        )

    def _read(self, keys: list[Any]) -> dict[Any, Any]:
        """The rows of ``keys`` (ABSENT: none), read in one query per batch, then cached.

        A server gone away is reconnected to once; a second failure stops the job.
        """
        c = self._check()
        try:
            found = self._query(c, keys)
        except _BadKeys:
            raise
        except Exception as e:
            where = self._where
            if not is_unreachable(e):
                raise self._failed(where, "reading rows", e) from None
            logger.warning("%s: %s went away (%s); reconnecting once", self.label(), where, first_line(e))  # fmt: skip
            self.close()
            try:
                found = self._query(self._check(), keys)
            except _BadKeys:
                raise
            except Exception:
                logger.debug("%s: reconnecting failed", self.label(), exc_info=True)
                self.close()
                raise SQLLookupError(
                    unreachable(
                        self.label(), "reading rows (and again after reconnecting)", where, e
                    )
                ) from None
        self._keep(found)
        return found

    def _query(self, c: Connection, keys: list[Any]) -> dict[Any, Any]:
        cols = self._read_columns
        at = cols.index(self.on) if self.on in cols else len(cols)
        select = ", ".join(map(quote, cols if at < len(cols) else [*cols, self.on]))
        head = f"SELECT {select} FROM {quote(self.table)} WHERE {quote(self.on)}"
        found: dict[Any, Any] = dict.fromkeys(keys, ABSENT)
        for rows in self._fetch(c, head, keys):
            self.queries += 1
            for r in rows:
                k = r[at]
                if k in found:  # a key of another type that the database equated is not ours
                    found[k] = dict(zip(cols, r))
        return found

    def _fetch(self, c: Connection, head: str, keys: list[Any]) -> Iterable[list[Any]]:
        """The rows of each query of ``keys`` (PostgreSQL: one; SQLite: per 500 keys)."""
        try:
            if c.postgres:
                yield c.conn.execute(f"{head} = ANY(%s)", (keys,)).fetchall()
                return
            for i in range(0, len(keys), SQLITE_KEYS):
                part = keys[i : i + SQLITE_KEYS]
                holes = ", ".join("?" * len(part))
                yield c.conn.execute(f"{head} IN ({holes})", part).fetchall()
        except Exception as e:
            if not _keys_refused(e):
                raise
            raise _BadKeys(
                f"{self.label()}: reading the rows of key(s) {keys[:3]!r} from {self._where} failed "
                f"({type(e).__name__}: {first_line(e)}); check that the keys fit column "
                f"{self.on!r}"
            ) from None

    # ---------------------------------------------------------------- figures, lifecycle
    def join_figures(self) -> JoinFigures:
        return JoinFigures(
            cache_hits=self.cache_hits, cache_misses=self.cache_misses, cache_size=len(self._cache)
        )

    @property
    def connected(self) -> bool:
        """Whether the node holds an open connection (a job closes it when it stops)."""
        return self._conn is not None

    def close(self) -> None:
        """Close the connection (a later record opens a new one)."""
        c, self._conn = self._conn, None
        if c is not None:
            _close(c)

    def state_signature(self) -> str:
        key = func_name(self.key) if callable(self.key) else repr(self.key)
        return f"LookupSQL(table={self.table!r}, key={key}, on={self.on!r}, how={self.how})"


class _BadKeys(Exception):
    """A query refused the keys (not a server gone away): the record's fault."""


def _is_frame(x: object) -> bool:
    # a pandas DataFrame, recognised without importing pandas for plain records
    return type(x).__name__ == "DataFrame" and hasattr(x, "columns") and hasattr(x, "assign")


def _missing(k: object) -> bool:
    """A key that matches no row: None, or a float NaN (pandas' missing value)."""
    return k is None or (isinstance(k, float) and k != k)


def _keys_refused(e: BaseException) -> bool:
    """Whether a query failed on its keys (a type the column or the driver does not take),
    not on the connection or the table (a table dropped meanwhile stops the job)."""
    if isinstance(e, sqlite3.Error):
        # binding a Python type SQLite does not store
        return isinstance(e, (sqlite3.InterfaceError, sqlite3.ProgrammingError))
    import psycopg

    if not isinstance(e, psycopg.Error):
        return False
    state = e.sqlstate
    if state is None:  # raised by psycopg itself: a Python type it cannot send
        return isinstance(e, psycopg.ProgrammingError)
    # class 22: a value the column's type cannot take; no operator for the key's type
    return state.startswith("22") or state in _KEY_TYPE_STATES


#: PostgreSQL's undefined_function (``integer = text``) and datatype_mismatch
_KEY_TYPE_STATES = frozenset({"42883", "42804"})


def _close(c: Connection) -> None:
    try:
        c.conn.close()
    except Exception:  # a connection to a server gone away
        logger.debug("closing a lookup connection failed", exc_info=True)
