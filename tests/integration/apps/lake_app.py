"""A job writing Parquet files or a Delta table, run by ``rivermark run lake_app.py:source``.

RIVERMARK_LAKE_KIND: ``parquet`` or ``delta``; RIVERMARK_LAKE_URL: the
directory, table or ``s3://`` URL; RIVERMARK_LAKE_MODE: ``append`` (every
record a row ``(id, k, v, g)``) or ``merge`` (Delta: the running total per
key ``k``, deleted at every 13th record of the key); RIVERMARK_LAKE_N
records; RIVERMARK_APP_WORK units of waiting (pacing.py) per record (the same output,
a longer run); RIVERMARK_LAKE_TIMEOUT: the sink's ``timeout`` (seconds).
The records and totals are those of ``sinkjob.py``.
"""

from __future__ import annotations

import os
from typing import Any

from sinkjob import record as row
from sinkjob import second, total

from rivermark import Stream

N = int(os.environ.get("RIVERMARK_LAKE_N", "3000"))
KIND = os.environ.get("RIVERMARK_LAKE_KIND", "parquet")
MODE = os.environ.get("RIVERMARK_LAKE_MODE", "append")
URL = os.environ["RIVERMARK_LAKE_URL"]
#: the sinks' timeout for the object store, when the test sets one
TIMEOUT: dict[str, Any] = (
    {"timeout": float(os.environ["RIVERMARK_LAKE_TIMEOUT"])}
    if "RIVERMARK_LAKE_TIMEOUT" in os.environ
    else {}
)


def record(i: int) -> dict[str, Any]:
    return {**row(i), "g": i % 3}


source = Stream.from_iterable(range(N), name="numbers")
records = source.map(record)
if KIND == "parquet":
    records.to_parquet(URL, partition_by=["g"], roll_rows=250, batch_rows=100, name="rows",
                       **TIMEOUT)  # fmt: skip
elif MODE == "append":
    records.to_delta(URL, partition_by=["g"], name="rows", **TIMEOUT)
else:
    records.accumulate(total, start=({}, None)).map(second).to_delta(
        URL, mode="merge", key=["k"], example={"k": "k0", "total": 0, "last": 0}, name="totals",
        **TIMEOUT,
    )  # fmt: skip
