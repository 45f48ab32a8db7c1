"""Grouped aggregations over streaming DataFrames, optionally windowed.

``sdf.groupby("name").amount.sum()`` keeps a running per-key result: each
batch is grouped once and its per-key partial added to the running one.
Inside a window (``sdf.window(n=10_000).groupby("name")``) the partials of the
batches in the window are kept and merged, never subtracted (see
:mod:`rivermark.dataframe.aggregations`); keys whose rows have all left the
window disappear from the result.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import cast

import pandas as pd

from rivermark.dataframe import aggregations as aggs
from rivermark.dataframe.streaming import Streaming
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["GroupBy"]

_KEY = "__rivermark_groupby_key__"
_NO_KEY: Hashable = object()


def _with_key(df: pd.DataFrame, key: pd.Series) -> pd.DataFrame:
    return df.assign(**{_KEY: key})


class GroupBy:
    """Grouped aggregations: ``sum``, ``count``, ``mean``, ``size``, ``var``, ``std``, ``min``, ``max``.

    >>> import pandas as pd
    >>> from rivermark import Stream
    >>> from rivermark.dataframe import DataFrame
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"name": [], "amount": []}))
    >>> L = sdf.groupby("name").amount.sum().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"name": ["a", "b", "a"], "amount": [1, 2, 3]}))
    >>> source.emit(pd.DataFrame({"name": ["b"], "amount": [10]}))
    >>> L[-1].to_dict()
    {'a': 4.0, 'b': 12.0}

    A streaming Series derived from the same DataFrame can be the key:

    >>> odd = sdf.groupby(sdf.amount % 2).amount.count().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"name": ["c", "d"], "amount": [1, 4]}))
    >>> odd[-1].to_dict()
    {0.0: 1, 1.0: 1}
    """

    def __init__(
        self,
        root: Streaming,
        grouper: Hashable | list[Hashable] | tuple[Hashable, ...] | Streaming,
        index: Hashable | list[Hashable] | None = None,
        n: int | None = None,
        value: pd.Timedelta | None = None,
        with_state: bool = False,
        start: object = None,
        windowed: bool = False,
        key_name: Hashable = _NO_KEY,
        prefix: str = "",
        key_is_index: bool = False,
    ) -> None:
        if isinstance(grouper, Streaming):
            if not isinstance(grouper.example, (pd.Series, pd.Index)):
                raise ConfigurationError(
                    "groupby: group by column label(s), a streaming Series or the index "
                    f"(sdf.index), got {grouper!r}"
                )
            # the key becomes a hidden column, computed from the same batch
            key_name = grouper.example.name
            key_is_index = isinstance(grouper.example, pd.Index)
            root = Streaming.map_partitions(_with_key, root, grouper)
            grouper = _KEY
        # optional: a Series example has no columns
        cols = getattr(root.example, "columns", None)
        if cols is None:
            raise ConfigurationError(
                "groupby: group a streaming DataFrame by column label(s), not a Series; "
                "use sdf.groupby('key').column.sum()"
            )
        for key in grouper if isinstance(grouper, (list, tuple)) else [grouper]:
            if key not in cols:
                raise ConfigurationError(
                    f"groupby: {key!r} is not a column of the DataFrame (columns: "
                    f"{list(cols)!r}); pass a column label"
                )
        self.root = root
        self.grouper = list(grouper) if isinstance(grouper, tuple) else grouper
        self.index = index
        self.n = n
        self.value = value
        self.with_state = with_state
        self.start = start
        self.windowed = windowed
        self.key_name = key_name
        #: how the user wrote the part before ``groupby`` (``window(n=3)``), for errors
        self.prefix = prefix
        #: the key is an index (``sdf.index``): the result's index keeps its ``freq``
        self.key_is_index = key_is_index
        self._label = grouper if key_name is _NO_KEY else key_name

    def __getitem__(self, index: Hashable | list[Hashable]) -> GroupBy:
        return GroupBy(
            self.root,
            self.grouper,
            index,
            self.n,
            self.value,
            self.with_state,
            self.start,
            self.windowed,
            self.key_name,
            self.prefix,
            self.key_is_index,
        )

    def __getattr__(self, key: str) -> GroupBy:
        if key.startswith("_") or key == "root":
            raise AttributeError(key)
        if key in cast("pd.DataFrame", self.root.example).columns:
            return self[key]
        raise AttributeError(f"GroupBy has no attribute or column {key!r}")

    def _accumulate(
        self,
        how: str,
        ddof: int = 1,
        with_state: bool | None = None,
        start: object = None,
        name: str | None = None,
    ) -> Streaming:
        agg = aggs.GroupbyAggregation(
            how,
            by=self.grouper,
            selection=self.index,
            ddof=ddof,
            track_size=self.windowed,
            index_name=None if self.key_name is _NO_KEY else self.key_name,
            rename_index=self.key_name is not _NO_KEY,
            key_is_index=self.key_is_index,
        )
        node = aggs.Aggregate(
            self.root.local_stream,
            agg,
            n=self.n,
            value=self.value,
            with_state=self.with_state if with_state is None else with_state,
            start=self.start if start is None else start,
            example=self.root.example,
            op=self._describe(how, ddof),
        )
        example = agg.example_result(self.root.example)
        return self.root.accumulate_node(node, example, "updating", name)

    def _describe(self, how: str, ddof: int) -> str:
        head = f"{self.prefix}." if self.prefix else ""
        sel = "" if self.index is None else f"[{self.index!r}]"
        args = f"ddof={ddof}" if how in ("var", "std") else ""
        return f"{head}groupby({self._label!r}){sel}.{how}({args})"

    # ``start`` and ``with_state`` as in streamz; ``start`` must be a state this
    # node emitted (``with_state=True``) or None
    def sum(self, start: object = None, name: str | None = None) -> Streaming:
        """Running (or windowed) sum per key."""
        return self._accumulate("sum", start=start, name=name)

    def count(self, start: object = None, name: str | None = None) -> Streaming:
        """Running count of non-null values per key."""
        return self._accumulate("count", start=start, name=name)

    def mean(
        self, with_state: bool = False, start: object = None, name: str | None = None
    ) -> Streaming:
        """Running mean per key."""
        return self._accumulate("mean", with_state=with_state or None, start=start, name=name)

    def size(self, name: str | None = None) -> Streaming:
        """Running number of rows per key."""
        return self._accumulate("size", name=name)

    def var(self, ddof: int = 1, name: str | None = None) -> Streaming:
        """Running variance per key."""
        return self._accumulate("var", ddof, name=name)

    def std(self, ddof: int = 1, name: str | None = None) -> Streaming:
        """Running standard deviation per key."""
        return self._accumulate("std", ddof, name=name)

    def min(self, name: str | None = None) -> Streaming:
        """Running minimum per key (skipping missing values)."""
        return self._accumulate("min", name=name)

    def max(self, name: str | None = None) -> Streaming:
        """Running maximum per key (skipping missing values)."""
        return self._accumulate("max", name=name)
