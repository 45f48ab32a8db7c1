"""A job writing to a SQL table through ``to_sql``, run by ``rivermark run sql_app.py:source``.

RIVERMARK_SQL_URL: the database URL; RIVERMARK_SQL_MODE: ``append`` (every
record a row ``(id, k, v)``) or ``upsert`` (the running total per key ``k``,
deleted at every 13th record of the key); RIVERMARK_SQL_N records;
RIVERMARK_APP_WORK units of waiting (pacing.py) per record (the same output, a longer run).
The records and totals are those of ``sinkjob.py``.
"""

from __future__ import annotations

import os

from sinkjob import record, second, total

from rivermark import Stream

N = int(os.environ.get("RIVERMARK_SQL_N", "3000"))
MODE = os.environ.get("RIVERMARK_SQL_MODE", "append")
URL = os.environ["RIVERMARK_SQL_URL"]


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
