"""Streaming DataFrames (pandas) with streamz's API and checkpointed state.

Install with ``pip install rivermark[dataframe]``.
"""

from __future__ import annotations

from rivermark.dataframe import aggregations as aggregations
from rivermark.dataframe import timejoins as timejoins
from rivermark.dataframe.aggregations import Aggregate as Aggregate
from rivermark.dataframe.aggregations import Aggregation as Aggregation
from rivermark.dataframe.core import ColumnsError as ColumnsError
from rivermark.dataframe.core import DataFrame as DataFrame
from rivermark.dataframe.core import DataFrames as DataFrames
from rivermark.dataframe.core import Frame as Frame
from rivermark.dataframe.core import Frames as Frames
from rivermark.dataframe.core import Index as Index
from rivermark.dataframe.core import SchemaError as SchemaError
from rivermark.dataframe.core import Series as Series
from rivermark.dataframe.core import Seriess as Seriess
from rivermark.dataframe.core import Streaming as Streaming
from rivermark.dataframe.core import to_dataframe as to_dataframe
from rivermark.dataframe.eventtime import TimedDataFrame as TimedDataFrame
from rivermark.dataframe.groupby import GroupBy as GroupBy
from rivermark.dataframe.periodic import PeriodicDataFrame as PeriodicDataFrame
from rivermark.dataframe.periodic import Random as Random
from rivermark.dataframe.windows import EWM as EWM
from rivermark.dataframe.windows import Expanding as Expanding
from rivermark.dataframe.windows import Rolling as Rolling
from rivermark.dataframe.windows import Window as Window

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
