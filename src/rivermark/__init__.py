"""rivermark: streamz's chaining API with consistent, crash-safe checkpoints.

The public API is listed here explicitly (and guarded by
``tests/unit/test_exports.py``).  Streaming DataFrames live in
``rivermark.dataframe`` (needs pandas), Kafka connectors in
``rivermark.kafka`` (confluent-kafka), Dask in ``rivermark.dask``.
"""

from __future__ import annotations

from . import kafka as kafka
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
from .sources.base import Source as Source

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "CheckpointLockedError",
    "CheckpointMismatchError",
    "ConfigurationError",
    "GraphError",
    "Job",
    "RefCounter",
    "RivermarkError",
    "Source",
    "Stream",
    "UserFunctionError",
    "kafka",
    "operators",
    "plugins",
    "sinks",
    "sources",
]

plugins.register_all()
