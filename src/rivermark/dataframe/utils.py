"""Duck-typed checks for frame-like objects, under streamz's names.

``streamz.dataframe.utils`` offers these to code that accepts pandas or
another frame library (cuDF); rivermark's streaming DataFrames use pandas,
and these helpers tell the kinds apart by their attributes, not their class.

>>> import pandas as pd
>>> df = pd.DataFrame({"x": [1, 2]})
>>> is_dataframe_like(df), is_series_like(df.x), is_index_like(df.index)
(True, True, True)
>>> get_base_frame_type("DataFrame", is_dataframe_like, df.x) is pd.DataFrame
True
>>> get_dataframe_package(df.index) is pd
True
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

__all__ = [
    "is_dataframe_like",
    "is_series_like",
    "is_index_like",
    "get_base_frame_type",
    "get_dataframe_package",
]


def _has(x: object, *names: str) -> bool:
    return all(hasattr(x, n) for n in names)


def is_dataframe_like(x: object) -> bool:
    """A table: ``columns``, ``dtypes``, ``groupby`` and ``merge``."""
    return _has(x, "columns", "dtypes", "groupby", "merge")


def is_series_like(x: object) -> bool:
    """One column: ``name``, ``dtype`` and an ``index``, no ``columns``."""
    return _has(x, "name", "dtype", "index") and not hasattr(x, "columns")


def is_index_like(x: object) -> bool:
    """An index: ``name`` and ``dtype``, neither ``index`` nor ``columns``."""
    return _has(x, "name", "dtype") and not _has(x, "index") and not hasattr(x, "columns")


def get_dataframe_package(x: object) -> ModuleType:
    """The top-level package that defines the type of ``x`` (``pandas`` for a pandas frame)."""
    # the type exists, so its package is imported: looked up, not imported
    return sys.modules[type(x).__module__.split(".")[0]]


def get_base_frame_type(
    frame_name: str, is_frame_like: Callable[[object], bool], example: object = None
) -> type:
    """The type to build a streaming ``frame_name`` (``"DataFrame"``, ``"Series"``, ``"Index"``) on.

    ``example`` of that kind gives its own type.  A ``"DataFrame"`` may also
    be built from a Series or an Index example: the type is its package's
    ``DataFrame``.  Anything else raises ``TypeError``.
    """
    if example is not None and is_frame_like(example):
        return type(example)
    if (
        frame_name == "DataFrame"
        and example is not None
        and (is_series_like(example) or is_index_like(example))
    ):
        # optional: a DataFrame-like package may have no DataFrame class
        frame = getattr(get_dataframe_package(example), "DataFrame", None)
        if isinstance(frame, type):
            return frame
    raise TypeError(
        f"a streaming {frame_name} needs a {frame_name}-like example, got "
        f"{type(example).__name__}: {example!r:.80}; pass e.g. the empty frame example=df.iloc[:0]"
    )
