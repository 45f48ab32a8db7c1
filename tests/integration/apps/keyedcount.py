"""The keyed count of the savepoint apps (``moving_app.py``, ``savepoint_app.py``).

The apps import it as a sibling module (a script's directory is on ``sys.path``);
the tests that run them take the expected output from here too.
"""

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


def reference(n: int) -> str:
    """The apps' output (the number of keys counted after each record) for ``n`` records."""
    state: dict[int, int] = {}
    lines = []
    for i in range(n):
        k = (i * 13) % 211
        c = state.get(k, 0) + 1
        if c >= 9:
            del state[k]
        else:
            state[k] = c
        lines.append(f"{len(state)}\n")
    return "".join(lines)
