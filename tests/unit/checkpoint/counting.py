"""The keyed count the savepoint tests run, its input and its plain-Python result.

``count`` is the savepoint apps' (``tests/integration/apps/keyedcount.py``).
"""

from __future__ import annotations

from ...integration.apps.keyedcount import count

__all__ = ["count", "records", "reference"]


def records(n: int, start: int = 0) -> list[int]:
    return [(i * 13) % 211 for i in range(start, start + n)]


def reference(recs: list[int]) -> tuple[dict[int, int], str]:
    """The plain-Python result: the final counts and the sink's text."""
    state: dict[int, int] = {}
    lines = []
    for k in recs:
        count(state, k)
        lines.append(f"{len(state)}\n")
    return state, "".join(lines)
