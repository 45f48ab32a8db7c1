"""Sources: nodes that produce records on the event loop.

streamz's lowercase names (``rivermark.sources.from_textfile``) resolve to
the source classes (see :mod:`rivermark.streamz_names`).
"""

from __future__ import annotations

from typing import Any

from . import files as files
from . import iterable as iterable
from . import network as network
from . import periodic as periodic
from . import process as process
from . import queue as queue
from .base import Source as Source


def __getattr__(name: str) -> Any:
    """streamz's source names (``from_iterable``, ``from_textfile``, ...), looked up on use."""
    from ..streamz_names import SOURCES, lookup

    return lookup(SOURCES, __name__, name)
