"""rivermark: streamz's chaining API with consistent, crash-safe checkpoints.

The public API is listed here explicitly (and guarded by
``tests/unit/test_exports.py``).  Streaming DataFrames live in
``rivermark.dataframe`` (needs pandas), Kafka connectors in
``rivermark.kafka`` (confluent-kafka), Dask in ``rivermark.dask``.

streamz's lowercase module-level names (``rivermark.zip``,
``from rivermark import map``) are answered by :func:`__getattr__` from
:mod:`rivermark.streamz_names`; they are not in ``__all__``, so a star
import never shadows builtins.
"""

from __future__ import annotations

import typing as _typing

from . import _optional
from . import kafka as kafka
from . import lake as lake

# attaches the metrics, the Prometheus endpoint, the live page and the notebook
# display to every job (through rivermark.checkpoint.listeners)
from . import observe as observe
from . import operators as operators
from . import plugins as plugins
from . import sinks as sinks
from . import sources as sources
from .checkpoint import CheckpointError as CheckpointError
from .checkpoint import CheckpointLockedError as CheckpointLockedError
from .checkpoint import CheckpointMismatchError as CheckpointMismatchError
from .checkpoint import Job as Job
from .core.node import Stream as Stream
from .core.refs import RefCounter as RefCounter
from .errors import ConfigurationError as ConfigurationError
from .errors import GraphError as GraphError
from .errors import RivermarkError as RivermarkError
from .errors import UserFunctionError as UserFunctionError
from .sinks.basic import Sink as Sink
from .sources.base import Source as Source
from .state import KeyedState as KeyedState

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "CheckpointLockedError",
    "CheckpointMismatchError",
    "ConfigurationError",
    "GraphError",
    "Job",
    "KeyedState",
    "RefCounter",
    "RivermarkError",
    "Sink",
    "Source",
    "Stream",
    "UserFunctionError",
    "kafka",
    "operators",
    "plugins",
    "sinks",
    "sources",
]

_optional.install()
plugins.register_doors()
plugins.register_all()


def __getattr__(name: str) -> _typing.Any:
    """streamz's lowercase names (``rivermark.map`` is :class:`~rivermark.operators.transform.Map`)."""
    from .streamz_names import STREAMZ_NAMES, lookup

    if name in _optional.DASK_NAMES:  # the optional layer, imported on first use
        _optional.load_dask()
    return lookup(STREAMZ_NAMES, __name__, name)
