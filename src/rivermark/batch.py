"""streamz's batch collection: a stream whose records are lists (or tuples) of records.

``Batch`` applies record-wise operations to every record of every batch, so
a pipeline over many small records runs one node call per batch.
``stream.to_batch(example=[...])`` wraps a stream of lists (e.g. after
``partition(n)``), ``batch.to_stream()`` flattens it back, and
``batch.to_dataframe()`` turns every batch into a pandas DataFrame (the
records are dicts or tuples) for :mod:`rivermark.dataframe`.  It builds on
:class:`rivermark.dataframe.core.Streaming`, so it needs
``rivermark[dataframe]`` (pandas).

>>> from rivermark import Stream
>>> b = Batch()
>>> L = b.pluck("x").map(lambda v: v * 10).sum().stream.sink_to_list()
>>> b.emit([{"x": 1}, {"x": 2}])
>>> b.emit([{"x": 3}])
>>> L
[30, 60]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd

from rivermark.core.node import Stream
from rivermark.dataframe.core import DataFrame, Streaming

logger = logging.getLogger(__name__)

__all__ = ["Batch", "Streaming", "to_batch"]


class _Each:
    """``[func(x) for x in batch]`` (a class, so that Dask can pickle it)."""

    def __init__(self, func: Callable[..., object], kwargs: dict[str, object]) -> None:
        self.func = func
        self.kwargs = kwargs

    def __call__(self, batch: Iterable[object]) -> list[object]:
        return [self.func(x, **self.kwargs) for x in batch]


class _Keep:
    """``[x for x in batch if predicate(x)]``."""

    def __init__(self, predicate: Callable[..., object]) -> None:
        self.predicate = predicate

    def __call__(self, batch: Iterable[object]) -> list[object]:
        return [x for x in batch if self.predicate(x)]


class _Pluck:
    def __init__(self, key: object) -> None:
        self.key = key

    # the records: any user values that take ``[key]`` (dicts, tuples, ...)
    def __call__(self, batch: Iterable[Any]) -> list[object]:
        return [x[self.key] for x in batch]


def _add_batch_sum(total: Any, batch: Any) -> Any:
    return total + sum(batch)


def _to_frame(batch: Iterable[object]) -> pd.DataFrame:
    return pd.DataFrame(list(batch))


class Batch(Streaming):
    """A stream of batches (lists or tuples) of records, as streamz's ``Batch``.

    ``example`` is a batch of example records (default: an empty list).

    >>> b = Batch()
    >>> L = b.filter(lambda x: x % 2 == 0).to_stream().sink_to_list()
    >>> b.emit([1, 2, 3, 4])
    >>> L
    [2, 4]
    """

    example: list[object]

    def __init__(
        self, stream: Stream | None = None, example: Iterable[object] | None = None
    ) -> None:
        Streaming.__init__(self, stream, example=[] if example is None else list(example))

    def emit(self, batch: object) -> object:
        """Push one batch."""
        return self.stream.emit(batch)

    def _per_batch(self, fn: Callable[[list[object]], list[object]]) -> Batch:
        try:
            example = fn(self.example)
        except Exception as e:  # the function may not accept the example records
            logger.debug("batch: no example from %r: %r", fn, e)
            example = []
        return Batch(self.stream.map(fn), example)  # type: ignore[attr-defined]

    def map(self, func: Callable[..., object], **kwargs: object) -> Batch:
        """``func(record, **kwargs)`` for every record."""
        return self._per_batch(_Each(func, kwargs))

    def filter(self, predicate: Callable[..., object]) -> Batch:
        """The records for which ``predicate`` is true."""
        return self._per_batch(_Keep(predicate))

    def pluck(self, key: object) -> Batch:
        """``record[key]`` for every record."""
        return self._per_batch(_Pluck(key))

    def sum(self) -> Streaming:
        """The running sum of all records seen."""
        node = self.local_stream.accumulate(_add_batch_sum, start=0)  # type: ignore[attr-defined]
        return Streaming(node, example=0, stream_type="updating")

    def to_stream(self) -> Stream:
        """The records one by one (``flatten``)."""
        return self.stream.flatten()  # type: ignore[attr-defined,no-any-return]

    def to_dataframe(self) -> DataFrame:
        """Every batch as a pandas DataFrame of its records (dicts or tuples)."""
        return DataFrame(self.stream.map(_to_frame), example=_to_frame(self.example))  # type: ignore[attr-defined]


@Stream.register_api(attribute_name="to_batch")
def to_batch(stream: Stream, example: Iterable[object] | None = None) -> Batch:
    """Treat a stream of lists of records as streamz's ``Batch``.

    >>> source = Stream()
    >>> L = source.to_batch(example=[1]).map(str).to_stream().sink_to_list()
    >>> source.emit([1, 2]); L
    ['1', '2']
    """
    return Batch(stream, example=example)
