"""Kill -9 a job writing through ``to_sql``; the table must equal an uncrashed run's.

Each case runs ``apps/sql_app.py`` on the real store (a SQLite file, a database
on the session's PostgreSQL server) in append and in upsert mode: SIGKILL at
random, then once at every checkpoint fault point, restarted until it
finishes.  A reader polling the table through the whole kill loop (default
isolation) must never see a row that the final table does not hold (append),
nor a key's row go back to an older record's (upsert: each row names the
last record that changed it), nor a total that no prefix of the input gives.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rivermark.testing import wait_for
from rivermark.testing.crash import run_uncrashed, run_with_crashes
from rivermark.testing.faults import FAULT_POINTS

from ..lake.lakeread import valid_totals

pytestmark = pytest.mark.crash

APP = Path(__file__).parents[1] / "apps" / "sql_app.py"
N = 3000
KEYS = 37


def _cmd(ckpt: Path) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{APP}:source",
        "--checkpoint", str(ckpt), "--every", "0.2s",
    ]  # fmt: skip


def _env(url: str, mode: str, work: int = 0) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.update(
        RIVERMARK_SQL_URL=url,
        RIVERMARK_SQL_MODE=mode,
        RIVERMARK_SQL_N=str(N),
        RIVERMARK_APP_WORK=str(work),
    )
    return env


def _reader(url: str) -> Callable[[str], list[tuple[Any, ...]]]:
    """``query(sql)``: rows read on a fresh connection with the default isolation."""
    if url.startswith("sqlite"):
        path = url[len("sqlite:///") :]

        def q_sqlite(sql: str) -> list[tuple[Any, ...]]:
            c = sqlite3.connect(path, timeout=30)
            try:
                return list(c.execute(sql))
            except sqlite3.OperationalError as e:  # the table is not there yet
                if "no such table" in str(e):
                    return []
                raise
            finally:
                c.close()

        return q_sqlite

    def q_pg(sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(url) as c:
            try:
                return list(c.execute(sql).fetchall())
            except psycopg.errors.UndefinedTable:
                return []

    return q_pg


def _table(url: str, mode: str) -> list[tuple[Any, ...]]:
    sql = "SELECT id, k, v FROM out" if mode == "append" else "SELECT k, total, last FROM out"
    return sorted(_reader(url)(sql))


class Poller:
    """Reads the table over and over in a thread while the kill loop runs."""

    def __init__(self, url: str, mode: str) -> None:
        self.url, self.mode = url, mode
        self.seen: set[tuple[Any, ...]] = set()
        self.reads = 0
        #: upsert: the newest ``last`` seen per key, and every time a key went back
        self.newest: dict[str, int] = {}
        self.went_back: list[tuple[str, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                rows = _table(self.url, self.mode)
                self.seen.update(rows)
                if self.mode == "upsert":
                    for k, _total, last in rows:
                        if last < self.newest.get(k, -1):
                            self.went_back.append((k, self.newest[k], last))
                        self.newest[k] = max(last, self.newest.get(k, -1))
                self.reads += 1
                self._stop.wait(0.02)
        except BaseException as e:  # reported by stop()
            self.error = e

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """``url(name)``: a new empty database (a SQLite file, or one on the server)."""
    if request.param == "sqlite":
        yield lambda name: f"sqlite:///{tmp_path / name}.db"
    else:
        server = request.getfixturevalue("pg_server")
        yield lambda name: server.new_database()


_references: dict[tuple[str, str], list[tuple[Any, ...]]] = {}


def _reference(store: Callable[[str], str], kind: str, mode: str, tmp_path: Path) -> list[Any]:
    """The table after an uncrashed run (once per store and mode)."""
    if (kind, mode) not in _references:
        url = store("reference")
        run_uncrashed(_cmd(tmp_path / "ref-ckpt"), env=_env(url, mode))
        table = _table(url, mode)
        if mode == "append":
            assert table == [(i, f"k{i % KEYS}", i) for i in range(N)]
        else:
            assert 0 < len(table) <= KEYS
        _references[kind, mode] = table
    return _references[kind, mode]


def _check_seen(poller: Poller, final: list[tuple[Any, ...]], mode: str) -> None:
    assert poller.reads > 0
    if mode == "append":
        assert poller.seen <= set(final), "a reader saw rows that later disappeared"
    else:
        valid = valid_totals(N, KEYS)
        bad = [(k, t) for k, t, _ in poller.seen if t not in valid[k]]
        assert not bad, f"a reader saw totals that no prefix of the input gives: {bad[:5]}"
        # a row of an epoch that a crash took back shows as a key going back to an older record
        assert not poller.went_back, (
            f"a reader saw rows that later disappeared: {poller.went_back[:5]}"
        )


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_random_kills_leave_the_table_of_an_uncrashed_run(
    store: Callable[[str], str], mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    reference = _reference(store, request.node.callspec.params["store"], mode, tmp_path)
    url = store("crashed")
    ckpt = tmp_path / "ckpt"
    with Poller(url, mode) as poller:
        report = run_with_crashes(
            _cmd(ckpt),
            # the pacing only in the runs that are killed (apps/pacing.py)
            env={**_env(url, mode, work=1500), "RIVERMARK_APP_WORK_WHILE_KILLED": "1"},
            kills=5,
            min_delay=0.3,
            max_delay=2.0,
            seed=7,
            ready=lambda pid: (ckpt / "LOCK").exists(),
        )
        wait_for(lambda: poller.reads > 0, timeout=30, what="a read of the table")
    assert report.completed and report.kills > 0, report.summary()
    final = _table(url, mode)
    # append: the same multiset (ids are unique: no duplicates, none missing)
    assert final == reference, report.summary()
    _check_seen(poller, final, mode)


# ":3": the third checkpoint (the first is the start checkpoint), mid-data;
# ":1": during the start checkpoint, before any record
@pytest.mark.parametrize("point", [*(f"{p}:3" for p in FAULT_POINTS), "after-manifest:1"])
@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_kill_at_each_fault_point_leaves_the_table_of_an_uncrashed_run(
    store: Callable[[str], str], mode: str, point: str, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    reference = _reference(store, request.node.callspec.params["store"], mode, tmp_path)
    url = store("crashed")
    ckpt = tmp_path / "ckpt"
    with Poller(url, mode) as poller:
        report = run_with_crashes(
            [*_cmd(ckpt), "--every-batches", "500"],
            env=_env(url, mode, work=50),
            kills=0,
            fault_points=[point],
            timeout=120,
        )
    assert report.fault_kills == {point: 1}, report.summary()
    final = _table(url, mode)
    assert final == reference, report.summary()
    _check_seen(poller, final, mode)
