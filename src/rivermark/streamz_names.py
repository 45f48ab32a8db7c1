"""streamz's module-level names, looked up lazily.

streamz exports every node class under its API name, in lower case
(``streamz.map``, ``streamz.zip``, ``streamz.core.map``,
``streamz.sources.from_textfile``), and code written for it uses them:
``zip(a, b)`` as a function, ``isinstance(node, streamz.map)``.  rivermark's
classes are CamelCase (:class:`~rivermark.operators.transform.Map`, ...), and
the lowercase names must not become ordinary attributes of a rivermark module:
there they would shadow the builtins ``map``, ``filter``, ``zip`` and
``slice`` inside rivermark itself.

So ``rivermark``, ``rivermark.core``, ``rivermark.sources`` and
``rivermark.sinks`` answer these names from a module ``__getattr__`` (PEP 562)
backed by :data:`STREAMZ_NAMES`: ``from rivermark import zip`` and
``rivermark.core.map`` work, each resolving to the rivermark class itself,
while ``from rivermark import *`` (which follows ``__all__``) brings none of
them in.

>>> import rivermark
>>> from rivermark.operators.transform import Map
>>> rivermark.map is Map and rivermark.core.map is Map
True
>>> "map" in rivermark.__all__
False
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["STREAMZ_NAMES", "CORE", "SOURCES", "SINKS", "lookup"]

#: streamz's lowercase node names in ``streamz.core`` -> (module, attribute) in rivermark
CORE: dict[str, tuple[str, str]] = {
    "accumulate": ("rivermark.operators.stateful", "Accumulate"),
    "buffer": ("rivermark.operators.timing", "Buffer"),
    "collect": ("rivermark.operators.stateful", "Collect"),
    "combine_latest": ("rivermark.operators.joins", "CombineLatest"),
    "delay": ("rivermark.operators.timing", "Delay"),
    "filter": ("rivermark.operators.transform", "Filter"),
    "flatten": ("rivermark.operators.transform", "Flatten"),
    "identity": ("rivermark.core.node", "identity"),
    "latest": ("rivermark.operators.timing", "Latest"),
    "map": ("rivermark.operators.transform", "Map"),
    "map_async": ("rivermark.operators.asyncops", "MapAsync"),
    "no_default": ("rivermark.operators.stateful", "no_default"),
    "partition": ("rivermark.operators.windows", "Partition"),
    "partition_unique": ("rivermark.operators.windows", "PartitionUnique"),
    "pluck": ("rivermark.operators.transform", "Pluck"),
    "rate_limit": ("rivermark.operators.timing", "RateLimit"),
    "slice": ("rivermark.operators.stateful", "Slice"),
    "sliding_window": ("rivermark.operators.windows", "SlidingWindow"),
    "starmap": ("rivermark.operators.transform", "Starmap"),
    "timed_window": ("rivermark.operators.timing", "TimedWindow"),
    "timed_window_unique": ("rivermark.operators.timing", "TimedWindowUnique"),
    "union": ("rivermark.operators.joins", "Union"),
    "unique": ("rivermark.operators.stateful", "Unique"),
    "zip": ("rivermark.operators.joins", "Zip"),
    "zip_latest": ("rivermark.operators.joins", "ZipLatest"),
}

#: ``streamz.sources``
SOURCES: dict[str, tuple[str, str]] = {
    "filenames": ("rivermark.sources.files", "Filenames"),
    "from_http_server": ("rivermark.sources.network", "FromHttpServer"),
    "from_iterable": ("rivermark.sources.iterable", "FromIterable"),
    "from_kafka": ("rivermark.kafka", "from_kafka"),
    "from_kafka_batched": ("rivermark.kafka", "from_kafka_batched"),
    "from_periodic": ("rivermark.sources.periodic", "FromPeriodic"),
    "from_process": ("rivermark.sources.process", "FromProcess"),
    "from_q": ("rivermark.sources.queue", "FromQ"),
    "from_tcp": ("rivermark.sources.network", "FromTcp"),
    "from_textfile": ("rivermark.sources.files", "FromTextfile"),
    # streamz defines this sink helper in its sources module
    "sink_to_file": ("rivermark.sinks.textfile", "sink_to_file"),
}

#: ``streamz.sinks``
SINKS: dict[str, tuple[str, str]] = {
    "sink": ("rivermark.sinks.basic", "Sink"),
    "sink_to_textfile": ("rivermark.sinks.textfile", "SinkToTextfile"),
    "sink_to_file": ("rivermark.sinks.textfile", "sink_to_file"),
    "to_kafka": ("rivermark.kafka", "ToKafka"),
}

#: everything ``import streamz`` offers at the top level under a lowercase or
#: streamz-only name
STREAMZ_NAMES: dict[str, tuple[str, str]] = {
    **CORE,
    **SOURCES,
    **SINKS,
    "create_graph": ("rivermark.core.graph", "create_graph"),
    "visualize": ("rivermark.core.graph", "visualize"),
    "scatter": ("rivermark.dask", "scatter"),
    "DaskStream": ("rivermark.dask", "DaskStream"),
}


def lookup(table: dict[str, tuple[str, str]], module: str, name: str) -> Any:
    """Resolve ``name`` through ``table`` for the module ``__getattr__`` of ``module``.

    Raises ``AttributeError`` (as a module does) for a name not in ``table``.
    Nothing is imported here: ``import rivermark`` has imported the modules of
    these names (the package's top level imports the optional Dask layer
    first for its two names), so the name is looked up in the loaded module.
    """
    target = table.get(name)
    if target is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    mod, attr = target
    loaded = sys.modules.get(mod)
    if loaded is None:
        raise AttributeError(
            f"module {module!r}: {name!r} is defined in {mod}, which is not imported; "
            f"import {mod} first"
        )
    return getattr(loaded, attr)
