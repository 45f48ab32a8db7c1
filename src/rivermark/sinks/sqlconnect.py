"""Connections to a SQL database, shared by ``to_sql`` and ``lookup_sql``.

A target is a URL (``"sqlite:///path/to/file.db"``,
``"postgresql://user@host:port/db"``) or a function returning a new DB-API
connection (``sqlite3`` or psycopg 3).  :func:`connect` opens one and says
where it points (:attr:`Connection.where`: the SQLite file, or the
PostgreSQL server's host, port and database: never a user or a password);
a failure to connect is one line naming the node (its ``label``), the
exception's first line and the remedy.  libpq leaves the password out of its
messages; the URL itself is never put in a message, a log or a manifest.

>>> import os, tempfile
>>> c = connect(f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'x.db')}", 5.0, "node 'n'")
>>> c.postgres, c.where.startswith("SQLite file ")
(False, True)
>>> c.conn.close()
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rivermark.errors import ConfigurationError, RivermarkError, first_line

__all__ = [
    "Connection",
    "SQLError",
    "check_target",
    "sqlite_path",
    "connect",
    "first_line",
    "is_unreachable",
    "pg_where",
    "quote",
    "table_columns",
    "sqlite_where",
    "unreachable",
]


class SQLError(RivermarkError):
    """A SQL table cannot be reached, read or written (the message says what to do)."""


@dataclass(frozen=True)
class Connection:
    """A new connection and where it points."""

    conn: Any
    #: the SQLite file (None: PostgreSQL, or an in-memory SQLite database)
    path: str | None
    postgres: bool

    @property
    def where(self) -> str:
        """The database in one phrase, for messages: no user, no password."""
        return pg_where(self.conn) if self.postgres else sqlite_where(self.path)


def sqlite_where(path: str | None) -> str:
    """A SQLite database in one phrase, for messages."""
    return f"SQLite file {path!r}"


def pg_where(conn: Any) -> str:
    """A PostgreSQL connection's server and database in one phrase: no user, no password."""
    info = conn.info
    return f"PostgreSQL server {info.host}:{info.port}/{info.dbname}"


def check_target(kind: str, target: object) -> None:
    """Refuse a target that is neither a supported URL nor a function (one line)."""
    if not (isinstance(target, str) or callable(target)):
        raise ConfigurationError(
            f"{kind}: target must be a URL ('sqlite:///out.db', 'postgresql://...') or a "
            f"function returning a connection, got {target!r}"
        )
    if isinstance(target, str) and not target.startswith(
        ("sqlite://", "postgresql://", "postgres://")
    ):
        # only the scheme-like start is shown: the rest may hold a password
        start = re.match(r"[A-Za-z][A-Za-z0-9+.-]*", target)
        raise ConfigurationError(
            f"{kind}: target is not a URL of a supported scheme (it starts "
            f"{start.group(0) if start else ''!r}); use 'sqlite:///path' or "
            "'postgresql://user@host:port/db', or pass a function returning a connection "
            "(for a libpq 'key=value' string: lambda: psycopg.connect(...))"
        )


def sqlite_path(target: str) -> str:
    """The file of a ``sqlite://`` URL (``sqlite:///rel.db``, ``sqlite:////abs.db``)."""
    path = (
        target[len("sqlite:///") :]
        if target.startswith("sqlite:///")
        else target[len("sqlite://") :]
    )
    return "/" + path.lstrip("/") if target.startswith("sqlite:////") else path


def connect(
    target: str | Callable[[], Any],
    timeout: float,
    label: str,
    error: type[SQLError] = SQLError,
    any_thread: bool = False,
    **pg_options: Any,
) -> Connection:
    """A new connection to ``target``; failures as one line starting with ``label``.

    ``timeout``: seconds to connect (SQLite: to wait for a lock).  ``any_thread``:
    a SQLite file's connection may be used from another thread than the one that
    opened it (one at a time).  ``pg_options``: more libpq settings for a
    PostgreSQL URL.
    """
    try:
        return _open(target, timeout, label, any_thread, pg_options)
    except ImportError as e:
        raise ConfigurationError(
            f"{label}: PostgreSQL needs psycopg 3: pip install 'rivermark[sql]'"
        ) from e
    except (RivermarkError, ConfigurationError):
        raise
    except Exception as e:
        if isinstance(target, str) and target.startswith("sqlite://"):
            raise error(
                f"{label}: cannot open the {sqlite_where(sqlite_path(target))} "
                f"({type(e).__name__}: {first_line(e)}); check that its directory exists "
                "and that this user may write there"
            ) from None
        raise error(
            f"{label}: cannot connect ({type(e).__name__}: {first_line(e)}); "
            "check the server address, user and password, and that the server runs"
        ) from None


def _open(
    target: str | Callable[[], Any],
    timeout: float,
    label: str,
    any_thread: bool,
    pg_options: dict[str, Any],
) -> Connection:
    t = target
    if isinstance(t, str) and t.startswith("sqlite://"):
        path = sqlite_path(t)
        lite = sqlite3.connect(path, timeout=timeout, check_same_thread=not any_thread)
        return Connection(lite, path, False)
    if isinstance(t, str):
        import psycopg

        conn = psycopg.connect(
            t, autocommit=True, connect_timeout=max(1, int(timeout)), **pg_options
        )
        return Connection(conn, None, True)
    conn = t()
    if isinstance(conn, sqlite3.Connection):
        db = conn.execute("PRAGMA database_list").fetchone()
        return Connection(conn, db[2] if db and db[2] else None, False)
    # psycopg's connection, or a subclass of it (recognised without importing psycopg)
    if any(t.__module__.startswith("psycopg") for t in type(conn).__mro__):
        return Connection(conn, None, True)
    raise ConfigurationError(
        f"{label}: the connection factory returned {conn!r}; return a sqlite3 or psycopg (3) "
        "connection"
    )


def quote(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def table_columns(conn: Any, postgres: bool, table: str) -> list[str]:
    """The columns of ``table`` in their order (empty: no such table)."""
    if not postgres:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")]
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
        "AND table_schema = current_schema() ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [r[0] for r in rows]


def is_unreachable(e: BaseException) -> bool:
    """Whether ``e`` says the server went away (not that a statement failed): a psycopg
    ``OperationalError`` (its subclasses too: ``AdminShutdown``, a backend terminated)
    or ``InterfaceError``."""
    if isinstance(e, sqlite3.Error) or type(e).__name__ == "QueryCanceled":
        return False  # QueryCanceled: a statement that ran past its timeout; the server is up
    return any(t.__name__ in ("OperationalError", "InterfaceError") for t in type(e).__mro__)


def unreachable(label: str, what: str, where: str, e: BaseException) -> str:
    """The one line of a server gone away while ``what`` ran."""
    return (
        f"{label}: {what}: {where} is unreachable ({first_line(e)}); the job stopped with "
        "its last checkpoint intact: start the server (check the network) and run again "
        "to resume"
    )
