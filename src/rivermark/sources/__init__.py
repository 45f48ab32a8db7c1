"""Sources: nodes that produce records on the event loop.

streamz's lowercase names (``rivermark.sources.from_textfile``) resolve to
the source classes (see :mod:`rivermark.streamz_names`).
"""

from __future__ import annotations

from typing import Any

from rivermark.sources import files as files
from rivermark.sources import iterable as iterable
from rivermark.sources import network as network
from rivermark.sources import periodic as periodic
from rivermark.sources import process as process
from rivermark.sources import queue as queue
from rivermark.sources.base import Source as Source


def __getattr__(name: str) -> Any:
    """streamz's source names (``from_iterable``, ``from_textfile``, ...), looked up on use."""
    from rivermark.streamz_names import SOURCES, lookup

    return lookup(SOURCES, __name__, name)
