"""The engine: nodes, graph walking, runtime (event loop) and completion tracking.

Nothing in this package imports pandas, Kafka or Dask.

``from rivermark.core import Stream`` works as ``from streamz.core import
Stream`` does, and streamz's lowercase node names (``rivermark.core.map``)
resolve to rivermark's classes (see :mod:`rivermark.streamz_names`).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``Stream``, ``RefCounter`` and streamz's lowercase node names, looked up on use."""
    if name == "Stream":
        from rivermark.core.node import Stream

        return Stream
    if name == "RefCounter":
        from rivermark.core.refs import RefCounter

        return RefCounter
    from rivermark.streamz_names import CORE, lookup

    return lookup(CORE, __name__, name)
