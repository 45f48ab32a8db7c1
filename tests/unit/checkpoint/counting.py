"""The keyed count the savepoint tests run, its input and its plain-Python result."""

from __future__ import annotations

from rivermark import KeyedState


def count(acc: KeyedState, key: int) -> KeyedState:
    """Count records per key; a key is forgotten at its 9th record."""
    n = acc.get(key, 0) + 1
    if n >= 9:
        del acc[key]
    else:
        acc[key] = n
    return acc


def records(n: int, start: int = 0) -> list[int]:
    return [(i * 13) % 211 for i in range(start, start + n)]


def reference(recs: list[int]) -> tuple[dict[int, int], str]:
    """The plain-Python result: the final counts and the sink's text."""
    state: dict[int, int] = {}
    lines = []
    for k in recs:
        n = state.get(k, 0) + 1
        if n >= 9:
            del state[k]
        else:
            state[k] = n
        lines.append(f"{len(state)}\n")
    return state, "".join(lines)
