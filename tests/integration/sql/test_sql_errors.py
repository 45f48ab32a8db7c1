"""``to_sql``'s bad input and faults: one line naming the sink (or server) and the remedy."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rivermark import Job, Stream
from rivermark.checkpoint.errors import UnaccountedOutputError
from rivermark.errors import ConfigurationError
from rivermark.sinks.sql import SQLSinkError, ToSQL

from ..lake.outage import run_into_outage
from .conftest import PgServer

APP = Path(__file__).parents[1] / "apps" / "sql_app.py"
COLS = {"id": "INTEGER", "k": "TEXT", "v": "INTEGER"}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'out.db'}"
    server: PgServer = request.getfixturevalue("pg_server")
    return server.new_database()


def _rows(url: str, sql: str = "SELECT id, k, v FROM out ORDER BY id") -> list[tuple[Any, ...]]:
    if url.startswith("sqlite"):
        c = sqlite3.connect(url[len("sqlite:///") :])
        try:
            return list(c.execute(sql))
        finally:
            c.close()
    with psycopg.connect(url) as pc:
        return list(pc.execute(sql).fetchall())


def _job(url: str, records: list[Any], ckpt: Path, from_scratch: bool = False, **kwargs: Any) -> Job:  # fmt: skip
    src = Stream.from_iterable(records)
    src.to_sql(url, "out", **kwargs)
    return Job(src, checkpoint=str(ckpt), from_scratch=from_scratch)


def test_a_missing_table_is_refused_unless_create(url: str, tmp_path: Path) -> None:
    with pytest.raises(SQLSinkError, match=re.escape("to_sql sink 'out' (table 'out'): table 'out' does not exist in")) as e:  # fmt: skip
        _job(url, [{"id": 1}], tmp_path / "a").run()
    assert "pass create=True with columns=" in str(e.value)
    _job(url, [{"id": 1, "k": "a", "v": 2}], tmp_path / "b", columns=COLS, create=True).run()
    assert _rows(url) == [(1, "a", 2)]


def test_create_needs_column_types() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("to_sql: create=True needs the column types")):  # fmt: skip
        Stream().to_sql("sqlite:///x.db", "out", columns=["id"], create=True)


def test_a_record_with_a_column_the_table_lacks_names_the_sink(url: str, tmp_path: Path) -> None:
    job = _job(url, [{"id": 1, "colour": "red"}], tmp_path / "c", columns=COLS, create=True)
    with pytest.raises(Exception, match=re.escape("has column(s) ['colour'] that the table does not have")):  # fmt: skip
        job.run()
    assert _rows(url) == []


def test_a_value_that_does_not_fit_the_column_type_names_the_sink(pg_url: str, tmp_path: Path) -> None:  # fmt: skip
    job = _job(pg_url, [{"id": "not a number", "k": "a", "v": 1}], tmp_path / "c", columns=COLS, create=True)  # fmt: skip
    with pytest.raises(SQLSinkError, match=re.escape("to_sql sink 'out' (table 'out'): writing epoch")) as e:  # fmt: skip
        job.run()
    assert "check that the records fit the table's columns" in str(e.value)
    assert "\n" not in str(e.value)
    assert _rows(pg_url) == []


def test_wrong_credentials_are_one_line_without_the_password(pg_server: PgServer, tmp_path: Path) -> None:  # fmt: skip
    bad = pg_server.db_url("postgres", user="rivermark_pw:wrong-password")
    with pytest.raises(SQLSinkError, match=re.escape("to_sql sink 'out' (table 'out'): cannot connect")) as e:  # fmt: skip
        _job(bad, [{"id": 1}], tmp_path / "c", columns=COLS, create=True).run()
    assert "password authentication failed" in str(e.value)
    assert "wrong-password" not in str(e.value)
    assert "\n" not in str(e.value)


def test_a_second_job_through_the_same_sink_id_is_refused(url: str, tmp_path: Path) -> None:
    first = ToSQL(Stream(), url, "out", columns=COLS, create=True)
    first.restore(None)  # holds the sink id until close()
    try:
        with pytest.raises(SQLSinkError, match=re.escape("to_sql sink 'out' (table 'out'): another job writes through this sink id")):  # fmt: skip
            _job(url, [{"id": 1, "k": "a", "v": 1}], tmp_path / "c", columns=COLS).run()
    finally:
        first.close()
    # another sink id on the same table is a different writer: allowed
    _job(url, [{"id": 2, "k": "b", "v": 1}], tmp_path / "d", columns=COLS, sink_id="other").run()
    assert _rows(url) == [(2, "b", 1)]


def test_an_earlier_runs_output_is_refused_and_from_scratch_empties_the_table(
    url: str, tmp_path: Path
) -> None:
    recs = [{"id": i, "k": "a", "v": i} for i in range(5)]
    _job(url, recs, tmp_path / "one", columns=COLS, create=True).run()
    # a new checkpoint directory: the table holds output no checkpoint accounts for
    with pytest.raises(UnaccountedOutputError, match=re.escape("to_sql sink 'out' (table 'out'):")):
        _job(url, recs, tmp_path / "two", columns=COLS).run()
    assert _rows(url) == [(i, "a", i) for i in range(5)]
    _job(url, recs, tmp_path / "two", columns=COLS, from_scratch=True).run()
    assert _rows(url) == [(i, "a", i) for i in range(5)]


def test_upsert_keeps_the_latest_value_and_deletes_on_a_tombstone(url: str, tmp_path: Path) -> None:  # fmt: skip
    from rivermark.sinks.sql import delete

    recs: list[Any] = [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}, delete(k="b"), {"k": "c", "v": 4}]  # fmt: skip
    _job(url, recs, tmp_path / "u", mode="upsert", key=["k"], columns={"k": "TEXT", "v": "INTEGER"}, create=True).run()  # fmt: skip
    assert _rows(url, "SELECT k, v FROM out ORDER BY k") == [("a", 3), ("c", 4)]


def test_dataframe_batches_are_written_as_rows(url: str, tmp_path: Path) -> None:
    import pandas as pd

    frames = [pd.DataFrame({"id": [1, 2], "k": ["a", "b"], "v": [10, 20]}), pd.DataFrame({"id": [3], "k": ["c"], "v": [30]})]  # fmt: skip
    _job(url, frames, tmp_path / "f", columns=COLS, create=True).run()
    assert _rows(url) == [(1, "a", 10), (2, "b", 20), (3, "c", 30)]


def test_dataframe_missing_values_are_null_and_timestamps_are_written(
    url: str, tmp_path: Path
) -> None:
    import datetime as dt

    import pandas as pd

    frame = pd.DataFrame(
        {
            "id": [1, 2],
            "k": ["a", None],  # pandas 3's strings hold NaN for the missing one
            "x": [1.5, float("nan")],
            "t": pd.to_datetime(["2026-12-06 10:00:00", None]),
        }
    )
    cols = {"id": "INTEGER", "k": "TEXT", "x": "REAL", "t": "TIMESTAMP"}
    _job(url, [frame], tmp_path / "f", columns=cols, create=True).run()
    rows = _rows(url, "SELECT id, k, x, t, k IS NULL, x IS NULL, t IS NULL FROM out ORDER BY id")
    first, second = rows
    assert first[:3] == (1, "a", 1.5)
    t = first[3]
    assert (t if isinstance(t, dt.datetime) else dt.datetime.fromisoformat(t)) == dt.datetime(
        2026, 12, 6, 10
    )
    assert second[:4] == (2, None, None, None) and all(second[4:])


def test_a_sqlite_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    target = f"sqlite:///{tmp_path / 'no-such-dir' / 'out.db'}"
    with pytest.raises(SQLSinkError, match="cannot open the SQLite file .*no-such-dir.*directory"):
        _job(target, [{"id": 1}], tmp_path / "ck", columns=COLS, create=True).run()


@pytest.mark.parametrize("target", ["sqlite:///:memory:", "sqlite:///", "sqlite://"])
def test_a_database_in_memory_is_refused(target: str) -> None:
    with pytest.raises(ConfigurationError, match="is a database in memory"):
        Stream().to_sql(target, "out")


@pytest.mark.parametrize(
    "target",
    ["postgresql:/app:hunter2@127.0.0.1:5432/db", "host=127.0.0.1 user=app password=hunter2"],
)
def test_a_target_that_is_not_a_url_is_refused_without_its_password(target: str) -> None:
    with pytest.raises(ConfigurationError, match="not a URL of a supported scheme") as e:
        Stream().to_sql(target, "out")
    assert "hunter2" not in str(e.value)


def test_server_down_mid_run_stops_the_job_and_a_rerun_resumes_exactly(
    own_pg: PgServer, tmp_path: Path
) -> None:
    url = own_pg.new_database()
    ckpt = tmp_path / "ckpt"
    env = dict(os.environ, RIVERMARK_SQL_URL=url, RIVERMARK_SQL_MODE="append",
               RIVERMARK_SQL_N="3000", RIVERMARK_APP_WORK="3000")  # fmt: skip
    cmd = [sys.executable, "-m", "rivermark.cli", "run", f"{APP}:source",
           "--checkpoint", str(ckpt), "--every", "0.2s"]  # fmt: skip
    stopped = run_into_outage(
        cmd, env, lambda: len(_rows(url, "SELECT id FROM out")) > 0 if _has_out(url) else False,
        own_pg.crash,
        what="a first committed epoch", exit_timeout=60,
    )  # fmt: skip
    assert stopped.returncode != 0 and stopped.seconds < 30
    lines = stopped.said()
    assert len(lines) == 1, stopped.stderr
    assert "to_sql sink 'rows' (table 'out')" in lines[0]
    assert re.search(r"PostgreSQL server 127\.0\.0\.1:\d+/t_\w+ is unreachable", lines[0]), lines[0]
    assert "start the server (check the network) and run again to resume" in lines[0]
    # the server back: a rerun resumes exactly
    own_pg.start_again()
    res = subprocess.run(cmd, env=dict(env, RIVERMARK_APP_WORK="0"), capture_output=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert _rows(url) == [(i, f"k{i % 37}", i) for i in range(3000)]


def _has_out(url: str) -> bool:
    with psycopg.connect(url) as c:
        return bool(c.execute("SELECT to_regclass('out') IS NOT NULL").fetchone()[0])
