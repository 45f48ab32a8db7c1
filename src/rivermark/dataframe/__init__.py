"""Streaming DataFrames (pandas) with streamz's API and checkpointed state.

Install with ``pip install rivermark[dataframe]``.
"""

from __future__ import annotations

from . import aggregations as aggregations
from . import timejoins as timejoins
from .aggregations import Aggregate as Aggregate
from .aggregations import Aggregation as Aggregation
from .core import ColumnsError as ColumnsError
from .core import DataFrame as DataFrame
from .core import DataFrames as DataFrames
from .core import Frame as Frame
from .core import Frames as Frames
from .core import Index as Index
from .core import SchemaError as SchemaError
from .core import Series as Series
from .core import Seriess as Seriess
from .core import Streaming as Streaming
from .core import to_dataframe as to_dataframe
from .eventtime import TimedDataFrame as TimedDataFrame
from .groupby import GroupBy as GroupBy
from .periodic import PeriodicDataFrame as PeriodicDataFrame
from .periodic import Random as Random
from .windows import EWM as EWM
from .windows import Expanding as Expanding
from .windows import Rolling as Rolling
from .windows import Window as Window

__all__ = [
    "Aggregate",
    "Aggregation",
    "ColumnsError",
    "DataFrame",
    "DataFrames",
    "EWM",
    "Expanding",
    "Frame",
    "Frames",
    "GroupBy",
    "Index",
    "PeriodicDataFrame",
    "Random",
    "Rolling",
    "SchemaError",
    "Series",
    "Seriess",
    "Streaming",
    "Window",
    "aggregations",
    "timejoins",
    "to_dataframe",
    "TimedDataFrame",
]
