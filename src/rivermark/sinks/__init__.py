"""Sinks: where records leave the pipeline.

``Sink`` is the ``sink(func)`` node and the base class of custom sinks, as
``streamz.sinks.Sink``; streamz's lowercase names (``sink``,
``sink_to_textfile``) resolve to the sink classes.
"""

from __future__ import annotations

from typing import Any

from rivermark.sinks import basic as basic
from rivermark.sinks import sql as sql
from rivermark.sinks import sqllookup as sqllookup
from rivermark.sinks import textfile as textfile
from rivermark.sinks.basic import Sink as Sink


def __getattr__(name: str) -> Any:
    """streamz's sink names (``sink``, ``sink_to_textfile``, ``to_kafka``), looked up on use."""
    from rivermark.streamz_names import SINKS, lookup

    return lookup(SINKS, __name__, name)
