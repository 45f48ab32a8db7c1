"""The keyed count of the savepoint apps (``moving_app.py``, ``savepoint_app.py``).

The apps import it as a sibling module (a script's directory is on ``sys.path``).
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
