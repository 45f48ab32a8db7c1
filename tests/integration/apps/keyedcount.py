"""The keyed count of the savepoint apps (``moving_app.py``, ``savepoint_app.py``).

The apps import it as a sibling module (a script's directory is on ``sys.path``);
the tests that run them take the expected output from here too.
"""

from __future__ import annotations

from collections.abc import MutableMapping


def count(acc: MutableMapping[int, int], key: int) -> MutableMapping[int, int]:
    """Count records per key (in a ``KeyedState``, or a dict); a key is forgotten at its 9th."""
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
        count(state, (i * 13) % 211)
        lines.append(f"{len(state)}\n")
    return "".join(lines)
