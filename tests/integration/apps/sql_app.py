"""A job writing to a SQL table through ``to_sql``, run by ``rivermark run sql_app.py:source``.

RIVERMARK_SQL_URL: the database URL; RIVERMARK_SQL_MODE: ``append`` (every
record a row ``(id, k, v)``) or ``upsert`` (the running total per key ``k``,
deleted at every 13th record of the key); RIVERMARK_SQL_N records;
RIVERMARK_APP_WORK rounds of hashing per record (the same output, a longer run).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from rivermark import Stream
from rivermark.sinks.sql import delete

N = int(os.environ.get("RIVERMARK_SQL_N", "3000"))
WORK = int(os.environ.get("RIVERMARK_APP_WORK", "0"))
MODE = os.environ.get("RIVERMARK_SQL_MODE", "append")
URL = os.environ["RIVERMARK_SQL_URL"]
KEYS = 37


def record(i: int) -> dict[str, Any]:
    data = str(i).encode()
    for _ in range(WORK):
        data = hashlib.sha256(data).digest()
    return {"id": i, "k": f"k{i % KEYS}", "v": i}


def total(acc: tuple[dict[str, int], Any], r: dict[str, Any]) -> tuple[dict[str, int], Any]:
    """Running totals per key; every 13th record of a key deletes it (a tombstone)."""
    sums = dict(acc[0])
    k = r["k"]
    if (r["id"] // KEYS) % 13 == 12:
        sums.pop(k, None)
        return sums, delete(k=k)
    sums[k] = sums.get(k, 0) + r["v"]
    return sums, {"k": k, "total": sums[k], "last": r["id"]}


def second(acc: tuple[Any, Any]) -> Any:
    return acc[1]


source = Stream.from_iterable(range(N), name="numbers")
records = source.map(record)
if MODE == "append":
    records.to_sql(
        URL, "out", columns={"id": "INTEGER", "k": "TEXT", "v": "INTEGER"}, create=True,
        name="rows",
    )  # fmt: skip
else:
    records.accumulate(total, start=({}, None)).map(second).to_sql(
        URL, "out", mode="upsert", key=["k"], columns={"k": "TEXT", "total": "BIGINT", "last": "BIGINT"},
        create=True, name="totals",
    )  # fmt: skip
