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

from rivermark import _optional
from rivermark import kafka as kafka
from rivermark import lake as lake

# attaches the metrics, the Prometheus endpoint, the live page and the notebook
# display to every job (through rivermark.checkpoint.protocol.listeners)
from rivermark import observe as observe
from rivermark import operators as operators
from rivermark import plugins as plugins
from rivermark import sinks as sinks
from rivermark import sources as sources
from rivermark.checkpoint import CheckpointError as CheckpointError
from rivermark.checkpoint import CheckpointLockedError as CheckpointLockedError
from rivermark.checkpoint import CheckpointMismatchError as CheckpointMismatchError
from rivermark.checkpoint import Job as Job
from rivermark.core.node import Stream as Stream
from rivermark.core.refs import RefCounter as RefCounter
from rivermark.errors import ConfigurationError as ConfigurationError
from rivermark.errors import GraphError as GraphError
from rivermark.errors import RivermarkError as RivermarkError
from rivermark.errors import UserFunctionError as UserFunctionError
from rivermark.sinks.basic import Sink as Sink
from rivermark.sources.base import Source as Source
from rivermark.state import KeyedState as KeyedState

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
    from rivermark.streamz_names import STREAMZ_NAMES, lookup

    if name in _optional.DASK_NAMES:  # the optional layer, imported on first use
        _optional.load_dask()
    return lookup(STREAMZ_NAMES, __name__, name)
