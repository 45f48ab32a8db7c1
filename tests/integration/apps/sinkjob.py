"""What the sink apps (``lake_app.py``, ``sql_app.py``) share: their records and running totals.

The apps import it as a sibling module (``rivermark run`` puts an app's
directory on ``sys.path``).  RIVERMARK_APP_WORK: units of waiting (pacing.py) per
record (the same output, a longer run).
"""

from __future__ import annotations

from typing import Any

from pacing import pace

from rivermark.sinks.sql import delete

KEYS = 37


def record(i: int) -> dict[str, Any]:
    pace.record()
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
