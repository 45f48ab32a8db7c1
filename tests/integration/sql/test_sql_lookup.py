"""``lookup_sql`` against the real stores: a SQLite file and the session's PostgreSQL server.

The join, the cache's bound and time to live, one query per batch of keys
(counted on real connections: SQLite's trace callback, a psycopg connection
class that counts its statements), bad input, the server going away, and a
job killed with SIGKILL that resumes with the output of an uncrashed run.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import pytest

from rivermark import Job, Stream
from rivermark.checkpoint.errors import JobFailedError
from rivermark.errors import ConfigurationError
from rivermark.sinks.sqllookup import LookupSQL, SQLLookupError
from rivermark.testing import wait_for
from rivermark.testing.crash import run_uncrashed, run_with_crashes

from ..lake.outage import run_into_outage
from .conftest import PgServer

APP = Path(__file__).parents[1] / "apps" / "sql_lookup_app.py"
CUSTOMERS = [(f"c{i}", ["bronze", "silver", "gold"][i % 3], i * 10) for i in range(50)]


def _sql(url: str, *statements: str, args: tuple[Any, ...] = ()) -> None:
    """Run statements on a connection of their own, committed."""
    if url.startswith("sqlite"):
        c = sqlite3.connect(url[len("sqlite:///") :])
        try:
            with c:
                for s in statements:
                    c.execute(s, args)
        finally:
            c.close()
        return
    with psycopg.connect(url, autocommit=True) as pc:
        for s in statements:
            pc.execute(s.replace("?", "%s"), args)


def _customers(url: str) -> None:
    _sql(url, "CREATE TABLE customers (name TEXT PRIMARY KEY, tier TEXT, score INTEGER)")
    for row in CUSTOMERS:
        _sql(url, "INSERT INTO customers VALUES (?, ?, ?)", args=row)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database holding ``customers`` (``c0``..``c49``)."""
    if request.param == "sqlite":
        u = f"sqlite:///{tmp_path / 'db.sqlite'}"
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        u = server.new_database()
    _customers(u)
    return u


@pytest.fixture
def nodes() -> Iterator[list[LookupSQL]]:
    """The lookup nodes a test makes, closed at its end."""
    made: list[LookupSQL] = []
    yield made
    for n in made:
        n.close()


def test_each_record_is_joined_with_its_row(url: str, nodes: list[LookupSQL]) -> None:
    src = Stream()
    left = src.lookup_sql(url, "customers", key="name", how="left")
    inner = src.lookup_sql(url, "customers", key=lambda r: r["name"], on="name", columns=["score"])
    nodes += [left, inner]
    out_left, out_inner = left.sink_to_list(), inner.sink_to_list()
    for name in ["c1", "nobody", "c2", "c1"]:
        src.emit({"name": name})
    c1 = {"name": "c1", "tier": "silver", "score": 10}
    assert out_left == [
        ({"name": "c1"}, c1),
        ({"name": "nobody"}, None),
        ({"name": "c2"}, {"name": "c2", "tier": "gold", "score": 20}),
        ({"name": "c1"}, c1),
    ]
    assert out_inner == [({"name": "c1"}, {"score": 10}), ({"name": "c2"}, {"score": 20}), ({"name": "c1"}, {"score": 10})]  # fmt: skip
    # a key without a row is cached too: the second "c1" is the one hit
    f = left.join_figures()
    assert (f.cache_hits, f.cache_misses, f.cache_size) == (1, 3, 3)
    assert not left.is_stateful  # the cache is not checkpoint state


def test_the_cache_holds_at_most_its_bound_and_a_change_is_seen_after_eviction(
    url: str, nodes: list[LookupSQL]
) -> None:
    src = Stream()
    node = src.lookup_sql(url, "customers", key="name", cache=3)
    nodes.append(node)
    sizes: list[int] = []
    out = node.map(lambda p: (p[0]["name"], p[1]["tier"])).sink_to_list()
    node.sink(lambda _: sizes.append(node.cache_size))
    for i in range(20):
        src.emit({"name": f"c{i % 7}"})
    assert max(sizes) == 3 and node.cache_size == 3
    assert node.cache_misses == 20  # 7 keys cycling through 3 places: no hit
    src.emit({"name": "c0"})
    _sql(url, "UPDATE customers SET tier = 'platinum' WHERE name = 'c0'")
    src.emit({"name": "c0"})
    assert out[-2:] == [("c0", "bronze")] * 2  # the second from the cache
    assert node.cache_hits == 1
    for name in ["c1", "c2", "c3"]:  # three other keys evict it
        src.emit({"name": name})
    src.emit({"name": "c0"})
    assert out[-1] == ("c0", "platinum")
    assert max(sizes) == 3


def test_a_change_is_seen_once_its_time_to_live_ran_out(url: str, nodes: list[LookupSQL]) -> None:
    src = Stream()
    node = src.lookup_sql(url, "customers", key="name", ttl="1s")
    nodes.append(node)
    out = node.map(lambda p: p[1]["tier"]).sink_to_list()
    src.emit({"name": "c0"})
    _sql(url, "UPDATE customers SET tier = 'platinum' WHERE name = 'c0'")
    src.emit({"name": "c0"})
    assert out == ["bronze", "bronze"] and node.cache_hits == 1

    def seen() -> bool:
        src.emit({"name": "c0"})
        return bool(out[-1] == "platinum")

    wait_for(seen, timeout=30, what="the change once c0's entry expired", interval=0.05)
    assert node.cache_misses == 2


def test_no_cache_reads_the_table_for_every_record(url: str, nodes: list[LookupSQL]) -> None:
    src = Stream()
    node = src.lookup_sql(url, "customers", key="name", cache=0)
    nodes.append(node)
    node.sink_to_list()
    for _ in range(3):
        src.emit({"name": "c0"})
    assert (node.cache_hits, node.cache_misses, node.cache_size, node.queries) == (0, 3, 0, 3)


class CountingConnection(psycopg.Connection[Any]):
    """A real psycopg connection that keeps the text of each statement it runs."""

    statements: list[str]

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        self.statements.append(str(query))
        return super().execute(query, params, **kwargs)


def _counting(url: str) -> tuple[Callable[[], Any], list[str]]:
    """A connection factory whose connections log their statements into the list."""
    statements: list[str] = []
    if url.startswith("sqlite"):

        def lite() -> sqlite3.Connection:
            c = sqlite3.connect(url[len("sqlite:///") :], check_same_thread=False)
            c.set_trace_callback(statements.append)
            return c

        return lite, statements

    def pg() -> CountingConnection:
        c = CountingConnection.connect(url, autocommit=True)
        c.statements = statements
        return c

    return pg, statements


def _reads(statements: list[str]) -> int:
    return sum(1 for s in statements if 'FROM "customers" WHERE "name"' in s)


def test_a_dataframe_batch_is_joined_in_one_query(url: str, nodes: list[LookupSQL]) -> None:
    factory, statements = _counting(url)
    src = Stream()
    node = src.lookup_sql(factory, "customers", key="customer", on="name", how="left")
    nodes.append(node)
    out = node.sink_to_list()
    names = [f"c{i % 60}" for i in range(1000)]  # 60 keys, 10 of them without a row
    batch = pd.DataFrame({"id": range(1000), "customer": names})
    src.emit(batch)
    assert _reads(statements) == 1
    frame = out[0]
    assert list(frame.columns) == ["id", "customer", "tier", "score"]
    assert len(frame) == 1000 and frame.index.equals(batch.index)
    want = {n: (t, s) for n, t, s in CUSTOMERS}
    for _, r in frame.iterrows():
        if r["customer"] in want:
            assert (r["tier"], r["score"]) == want[r["customer"]]
        else:  # no row: missing values
            assert pd.isna(r["tier"]) and pd.isna(r["score"])
    # the same keys again: every one from the cache, no query
    src.emit(batch.iloc[:500])
    assert _reads(statements) == 1 and node.cache_hits == 60
    # inner: the rows without a customer are left out
    inner = src.lookup_sql(factory, "customers", key="customer", on="name", columns=["tier"])
    nodes.append(inner)
    got = inner.sink_to_list()
    src.emit(batch.iloc[:60])
    assert list(got[0]["customer"]) == [f"c{i}" for i in range(50)]
    assert list(got[0].columns) == ["id", "customer", "tier"]


def test_records_read_one_query_per_key_not_in_the_cache(url: str, nodes: list[LookupSQL]) -> None:
    factory, statements = _counting(url)
    src = Stream()
    node = src.lookup_sql(factory, "customers", key="name")
    nodes.append(node)
    node.sink_to_list()
    for i in range(100):
        src.emit({"name": f"c{i % 10}"})
    assert _reads(statements) == 10 == node.queries
    assert (node.cache_hits, node.cache_misses) == (90, 10)


def test_sqlite_reads_at_most_500_keys_a_query(tmp_path: Path, nodes: list[LookupSQL]) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    _customers(url)
    factory, statements = _counting(url)
    src = Stream()
    node = src.lookup_sql(factory, "customers", key="name", how="left")
    nodes.append(node)
    out = node.sink_to_list()
    src.emit(pd.DataFrame({"name": [f"c{i}" for i in range(1200)]}))
    assert _reads(statements) == 3
    assert out[0]["tier"].notna().sum() == 50


def _job(url: str, records: list[Any], ckpt: Path, **kwargs: Any) -> tuple[Job, list[Any]]:
    src = Stream.from_iterable(records, name="orders")
    out = src.lookup_sql(url, "customers", name="lk", **kwargs).sink_to_list()
    return Job(src, checkpoint=str(ckpt)), out


def test_a_job_closes_the_lookups_connection_when_it_stops(url: str, tmp_path: Path) -> None:
    src = Stream.from_iterable([{"name": "c1"}, {"name": "c2"}], name="orders")
    node = src.lookup_sql(url, "customers", key="name", name="lk")
    out = node.sink_to_list()
    out_seen = node.map(lambda _: node.connected).sink_to_list()
    Job(src, checkpoint=str(tmp_path / "ckpt")).run()
    assert [r[1]["tier"] for r in out] == ["silver", "gold"]
    assert out_seen == [True, True] and not node.connected
    # a failed job closes it too
    src = Stream.from_iterable([{"name": "c1"}, {"nam": "c2"}], name="orders")
    node = src.lookup_sql(url, "customers", key=lambda r: r["name"], on="name", name="lk")
    seen = node.map(lambda _: node.connected).sink_to_list()
    with pytest.raises(JobFailedError):
        Job(src, checkpoint=str(tmp_path / "failed")).run()
    assert seen == [True] and not node.connected


def test_a_missing_table_or_column_stops_the_job_with_one_line(url: str, tmp_path: Path) -> None:
    src = Stream.from_iterable([{"name": "c1"}], name="orders")
    src.lookup_sql(url, "nope", key="name", name="lk").sink_to_list()
    with pytest.raises(JobFailedError, match=re.escape("(SQLLookupError: lookup_sql 'lk' (table 'nope'): table 'nope' does not exist in ")) as e:  # fmt: skip
        Job(src, checkpoint=str(tmp_path / "a")).run()
    assert "create it, or check table= and the database" in str(e.value)
    assert "\n" not in str(e.value)
    job, out = _job(url, [{"name": "c1"}], tmp_path / "b", key="name", columns=["tier", "colour"])
    with pytest.raises(JobFailedError, match=re.escape("lookup_sql 'lk' (table 'customers'): table 'customers' in ")) as e:  # fmt: skip
        job.run()
    assert "has no column(s) ['colour'] (its columns: ['name', 'tier', 'score']); check on= and columns=" in str(e.value)  # fmt: skip
    assert out == []


def test_bad_options_are_one_line() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("lookup_sql: on= is required when key is not a column name (key=0)")):  # fmt: skip
        Stream().lookup_sql("sqlite:///x.db", "t", key=0)
    with pytest.raises(ConfigurationError, match=re.escape("lookup_sql: cache must be the number of keys to keep (0: none), got -1")):  # fmt: skip
        Stream().lookup_sql("sqlite:///x.db", "t", key="k", cache=-1)
    with pytest.raises(ConfigurationError, match=re.escape("lookup_sql: target is not a URL of a supported scheme (it starts 'mysql')")):  # fmt: skip
        Stream().lookup_sql("mysql://x", "t", key="k")
    with pytest.raises(ConfigurationError, match=re.escape("lookup_sql: how must be 'inner' or 'left', got 'outer'")):  # fmt: skip
        Stream().lookup_sql("sqlite:///x.db", "t", key="k", how="outer")


def test_a_record_without_the_key_goes_through_the_error_policy(
    url: str, tmp_path: Path, nodes: list[LookupSQL]
) -> None:
    recs = [{"name": "c1"}, {"id": 7}, {"name": "c2"}]
    job, out = _job(url, recs, tmp_path / "skip", key="name", on_error="skip")
    job.run()
    assert [r["name"] for r, _ in out] == ["c1", "c2"]
    handled: list[Any] = []
    src = Stream()
    node = src.lookup_sql(url, "customers", key="name", on_error=lambda x, e: handled.append((x, type(e))))  # fmt: skip
    nodes.append(node)
    got = node.sink_to_list()
    for r in recs:
        src.emit(r)
    assert handled == [({"id": 7}, KeyError)] and len(got) == 2
    # the default policy raises the key function's own error, naming the node
    job, _ = _job(url, recs, tmp_path / "raise", key="name")
    with pytest.raises(JobFailedError, match=re.escape("KeyError")):
        job.run()
    # a key the column cannot take is the record's fault too
    if url.startswith("postgresql"):
        src = Stream()
        node = src.lookup_sql(url, "customers", key="name", on_error="skip")
        nodes.append(node)
        got = node.sink_to_list()
        for r in [{"name": "c1"}, {"name": object()}, {"name": "c2"}]:
            src.emit(r)
        assert len(got) == 2 and node.errors_skipped == 1


def test_a_backend_gone_away_is_reconnected_once(
    pg_server: PgServer, nodes: list[LookupSQL], caplog: pytest.LogCaptureFixture
) -> None:
    url = pg_server.new_database()
    _customers(url)
    secret_url = url.replace("rivermark@", "rivermark_pw:secret@", 1)
    src = Stream()
    node = src.lookup_sql(secret_url, "customers", key="name", cache=0)
    nodes.append(node)
    out = node.sink_to_list()
    src.emit({"name": "c1"})
    db = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as c:
        ended = c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()",
            (db,),
        ).fetchall()
    assert ended == [(True,)]
    src.emit({"name": "c2"})
    assert [r["name"] for r, _ in out] == ["c1", "c2"]
    assert "reconnecting once" in caplog.text
    assert "secret" not in caplog.text and "rivermark_pw" not in caplog.text


def _cmd(ckpt: Path) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{APP}:source",
        "--checkpoint", str(ckpt), "--every", "0.2s",
    ]  # fmt: skip


def _env(url: str, out: Path, n: int = 3000, work: int = 0) -> dict[str, str]:
    return dict(
        os.environ, RIVERMARK_SQL_URL=url, RIVERMARK_APP_OUTPUT=str(out),
        RIVERMARK_LOOKUP_N=str(n), RIVERMARK_APP_WORK=str(work),
    )  # fmt: skip


def test_server_down_mid_run_stops_the_job_with_one_line(own_pg: PgServer, tmp_path: Path) -> None:
    url = own_pg.new_database()
    _customers(url)
    secret_url = url.replace("rivermark@", "rivermark_pw:secret@", 1)
    out = tmp_path / "out.txt"
    stopped = run_into_outage(
        _cmd(tmp_path / "ckpt"), _env(secret_url, out, n=100_000, work=2000),
        lambda: out.exists() and out.stat().st_size > 0,
        own_pg.crash,
        what="a first line of output", exit_timeout=60,
    )  # fmt: skip
    assert stopped.returncode != 0 and stopped.seconds < 30
    lines = stopped.said()
    assert len(lines) == 1, stopped.stderr
    assert "SQLLookupError: lookup_sql 'customers' (table 'customers'): reading rows" in lines[0]
    assert re.search(r"PostgreSQL server 127\.0\.0\.1:\d+/t_\w+ is unreachable", lines[0]), lines[0]
    assert "start the server (check the network) and run again to resume" in lines[0]
    assert "secret" not in stopped.stderr and "rivermark_pw" not in stopped.stderr
    assert "secret" not in "".join(p.read_text(errors="replace") for p in (tmp_path / "ckpt").rglob("*") if p.is_file())  # fmt: skip
    # the server back: a rerun resumes and finishes
    own_pg.start_again()
    res = subprocess.run(_cmd(tmp_path / "ckpt"), env=_env(secret_url, out, n=3000), capture_output=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()[-2000:]


@pytest.mark.crash
def test_a_killed_job_resumes_with_the_output_of_an_uncrashed_run(url: str, tmp_path: Path) -> None:
    ref = tmp_path / "reference.txt"
    run_uncrashed(_cmd(tmp_path / "ref-ckpt"), env=_env(url, ref))
    expected = ref.read_text().splitlines()
    assert len(expected) == 3000
    assert expected[1] == "1 c1 silver 10" and expected[50] == "50 c50 -"
    out = tmp_path / "out.txt"
    ckpt = tmp_path / "ckpt"
    report = run_with_crashes(
        _cmd(ckpt),
        env={**_env(url, out, work=1500), "RIVERMARK_APP_WORK_WHILE_KILLED": "1"},
        kills=3,
        min_delay=0.3,
        max_delay=2.0,
        seed=11,
        ready=lambda pid: (ckpt / "LOCK").exists(),
    )
    assert report.completed and report.kills == 3, report.summary()
    assert out.read_text().splitlines() == expected


def test_a_table_dropped_while_running_stops_the_job_even_when_records_are_skipped(
    url: str, nodes: list[LookupSQL]
) -> None:
    src = Stream()
    node = src.lookup_sql(url, "customers", key="name", cache=0, on_error="skip", name="lk")
    nodes.append(node)
    out = node.sink_to_list()
    src.emit({"name": "c1"})
    _sql(url, "DROP TABLE customers")
    with pytest.raises(SQLLookupError, match=re.escape("lookup_sql 'lk' (table 'customers'): reading rows failed in ")) as e:  # fmt: skip
        src.emit({"name": "c2"})
    assert "\n" not in str(e.value) and len(out) == 1 and node.errors_skipped == 0


def test_a_query_blocked_past_the_timeout_stops_with_one_line_not_a_hang(
    pg_server: PgServer, nodes: list[LookupSQL]
) -> None:
    url = pg_server.new_database()
    _customers(url)
    src = Stream()
    node = src.lookup_sql(url, "customers", key="name", cache=0, timeout=1, name="lk")
    nodes.append(node)
    node.sink_to_list()
    src.emit({"name": "c1"})
    with psycopg.connect(url) as locker:  # a transaction holding the table until it ends
        locker.execute("LOCK TABLE customers IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(SQLLookupError, match=re.escape("lookup_sql 'lk' (table 'customers'): reading rows failed in PostgreSQL server ")) as e:  # fmt: skip
            src.emit({"name": "c2"})
        locker.rollback()
    assert "QueryCanceled: canceling statement due to statement timeout" in str(e.value)
    assert "check the table (and timeout=), then run again to resume" in str(e.value)
