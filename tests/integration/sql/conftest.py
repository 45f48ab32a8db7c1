"""A real PostgreSQL server for the session (scripts/postgres), a fresh database per test."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

SCRIPT = Path(__file__).parents[3] / "scripts" / "postgres"


@dataclass(frozen=True)
class PgServer:
    """A running server: its directory and the URL of its ``postgres`` database."""

    directory: str
    url: str

    def db_url(self, name: str, user: str = "rivermark") -> str:
        base = self.url.rsplit("/", 1)[0]
        return base.replace("rivermark@", f"{user}@", 1) + f"/{name}"

    def new_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.db_url(name)

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", self.directory], check=True, timeout=60)

    def crash(self) -> None:
        """An immediate shutdown: connections are cut as by a crash of the server."""
        server_bin = subprocess.run(
            ["bash", "-c", "ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        subprocess.run(
            ["runuser", "-u", "nobody", "--", f"{server_bin}/pg_ctl", "-D",
             f"{self.directory}/data", "-m", "immediate", "stop"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def start_again(self) -> None:
        subprocess.run([str(SCRIPT), "start", self.directory], check=True, capture_output=True, timeout=120)  # fmt: skip


def start_pg() -> PgServer:
    """Start a new server in a fresh directory under /tmp (its user must reach it).

    Not under the test process's own temporary directory: that one is private
    to this user (mode 0700), and the server runs as another (``nobody``).
    """
    d = tempfile.mkdtemp(prefix="rivermark-pg-", dir="/tmp")
    res = subprocess.run(
        [str(SCRIPT), "start", d], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0, f"scripts/postgres start failed: {res.stderr}"
    return PgServer(d, res.stdout.strip())


def discard_pg(server: PgServer) -> None:
    server.stop()
    shutil.rmtree(server.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = start_pg()
    try:
        yield server
    finally:
        discard_pg(server)


@pytest.fixture
def own_pg() -> Iterator[PgServer]:
    """A server of the test's own: the test stops it mid-run."""
    server = start_pg()
    try:
        yield server
    finally:
        discard_pg(server)


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The URL of a new, empty database on the session's server."""
    return pg_server.new_database()
