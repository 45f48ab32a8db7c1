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
from rivermark.sinks.sqllookup import LookupSQL, SQLLookupError
from rivermark.testing import wait_for
from rivermark.testing.crash import run_uncrashed, run_with_crashes

from ..lake.outage import run_into_outage
from .conftest import SCRIPT, PgServer, discard_pg, start_pg

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
