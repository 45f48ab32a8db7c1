"""rivermark: streamz's chaining API with consistent, crash-safe checkpoints."""

from __future__ import annotations

from . import operators as operators
from . import sinks as sinks
from . import sources as sources
from .core.node import Stream as Stream
from .core.refs import RefCounter as RefCounter
from .errors import ConfigurationError as ConfigurationError
from .errors import GraphError as GraphError
from .errors import RivermarkError as RivermarkError
from .errors import UserFunctionError as UserFunctionError
from .sources.base import Source as Source

__version__ = "0.1.0"
