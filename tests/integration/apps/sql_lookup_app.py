"""A job enriching orders with their customer's row through ``lookup_sql``.

Run by ``rivermark run sql_lookup_app.py:source``.  RIVERMARK_SQL_URL: the
database holding ``customers (name, tier, score)``; RIVERMARK_LOOKUP_N orders
(order ``i`` of customer ``c{i % 53}``: the table holds ``c0``..``c49``, so a
few find no row); RIVERMARK_APP_OUTPUT gets one line per order
(``how="left"``); RIVERMARK_LOOKUP_CACHE keys in the cache (small: most
lookups read the table); RIVERMARK_APP_WORK units of waiting (pacing.py) per order.
"""

from __future__ import annotations

import os
from typing import Any

from pacing import pace

from rivermark import Stream

N = int(os.environ.get("RIVERMARK_LOOKUP_N", "3000"))
URL = os.environ["RIVERMARK_SQL_URL"]
OUTPUT = os.environ.get("RIVERMARK_APP_OUTPUT", os.devnull)
CACHE = int(os.environ.get("RIVERMARK_LOOKUP_CACHE", "8"))


def order(i: int) -> dict[str, Any]:
    pace.record()
    return {"id": i, "customer": f"c{i % 53}"}


def line(pair: tuple[dict[str, Any], Any]) -> str:
    o, row = pair
    return f"{o['id']} {o['customer']} " + ("-" if row is None else f"{row['tier']} {row['score']}")


source = Stream.from_iterable(range(N), name="numbers")
joined = source.map(order, name="orders").lookup_sql(
    URL, "customers", key="customer", on="name", how="left", cache=CACHE, timeout=10,
    name="customers",
)  # fmt: skip
joined.map(line, name="line").sink_to_textfile(OUTPUT)
