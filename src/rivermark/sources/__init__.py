"""Sources: nodes that produce records on the event loop."""

from __future__ import annotations

from . import files as files
from . import iterable as iterable
from . import network as network
from . import periodic as periodic
from . import process as process
from . import queue as queue
from .base import Source as Source
