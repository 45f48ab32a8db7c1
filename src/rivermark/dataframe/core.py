"""Streaming DataFrames and Series: pandas batches flowing through a stream.

A :class:`DataFrame` wraps a :class:`~rivermark.core.node.Stream` whose
records are ``pandas.DataFrame`` batches, together with an ``example`` (an
empty frame with the right columns and dtypes).  Element-wise operations
build ``map`` nodes; reductions and windows build stateful aggregation nodes
(:mod:`rivermark.dataframe.aggregations`) that a checkpointing job saves and
restores.  As in streamz, ``DataFrame``/``Series`` carry a batch per record
("streaming"), ``DataFrames``/``Seriess`` the latest full result ("updating").

Every frame is a :class:`~rivermark.dataframe.streaming.Streaming` (kept in
:mod:`.streaming`, and importable from here), which combines the objects
derived element-wise from the same DataFrame.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np
import pandas as pd

from rivermark.core.node import Stream
from rivermark.dataframe import aggregations as aggs
from rivermark.dataframe.schema import ColumnsError, SchemaError, conform
from rivermark.dataframe.streaming import FRAME_TYPES
from rivermark.dataframe.streaming import Streaming as Streaming
from rivermark.dataframe.streaming import _Apply as _Apply
from rivermark.dataframe.streaming import _ApplyEach as _ApplyEach
from rivermark.errors import ConfigurationError

if TYPE_CHECKING:
    from rivermark.dataframe.groupby import GroupBy
    from rivermark.dataframe.plotting import HvPlot
    from rivermark.dataframe.windows import EWM, Expanding, Rolling, Window

__all__ = [
    "Streaming",
    "Frame",
    "Frames",
    "DataFrame",
    "Series",
    "Index",
    "DataFrames",
    "Seriess",
    "SchemaError",
    "ColumnsError",
    "to_dataframe",
    "random_datapoint",
]


def random_datapoint(now: pd.Timestamp | None = None, **kwargs: object) -> pd.DataFrame:
    """One random row (column ``a``, uniform in [0, 1)) at ``now`` (default: the current time).

    As streamz's (and where streamz has it), a ``datafn`` for
    :class:`~rivermark.dataframe.periodic.PeriodicDataFrame` that queries one
    current value.

    >>> df = random_datapoint(now=pd.Timestamp("2024-01-01"))
    >>> len(df), list(df.columns), str(df.index[0])
    (1, ['a'], '2024-01-01 00:00:00')
    """
    if now is None:
        now = pd.Timestamp.now()
    return pd.DataFrame({"a": np.random.default_rng().random(1)}, index=[now])


class BaseFrame(Streaming):
    """Element-wise methods shared by every frame type.

    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": [0.0]}).iloc[:0])
    >>> L = sdf.round(1).x.stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1.26]})); L[0].tolist()
    [1.3]
    """

    def round(self, decimals: int = 0) -> Streaming:
        """Round each batch to ``decimals`` places."""
        return self.map_partitions(lambda x: x.round(decimals), self)

    def reset_index(self, *args: object, **kwargs: object) -> Streaming:
        """``reset_index`` on each batch."""
        return self.map_partitions(lambda x: x.reset_index(*args, **kwargs), self)

    def set_index(self, index: object, **kwargs: object) -> Streaming:
        """``set_index`` on each batch: column label(s), or a streaming Series of this DataFrame."""

        def _set_index(x: pd.DataFrame, idx: object) -> pd.DataFrame:
            return x.set_index(idx, **kwargs)

        return self.map_partitions(_set_index, self, index)

    def tail(self, n: int = 5) -> Streaming:
        """The last ``n`` rows of each batch."""
        return self.map_partitions(lambda x: x.tail(n), self)

    def astype(self, dt: object) -> Streaming:
        """Cast each batch to ``dt``."""
        return self.map_partitions(lambda x: x.astype(dt), self)

    def map(
        self, func: Callable[..., object] | Mapping[Hashable, object], na_action: str | None = None
    ) -> Streaming:
        """Element-wise ``map`` (``Series.map``, or ``DataFrame.map`` for frames)."""
        return self.map_partitions(lambda x: x.map(func, na_action=na_action), self)

    @property
    def index(self) -> Streaming:
        """The index of each batch."""
        return self.map_partitions(lambda x: x.index, self)

    @property
    def size(self) -> Streaming:
        """Number of elements: a running total for streaming frames."""
        return self._reduce(aggs.Size())

    def _reduce(self, agg: aggs.Aggregation, op: str = "size") -> Streaming:
        node = aggs.Aggregate(self.local_stream, agg, example=self.example, op=op)
        example = agg.example_result(self.example)
        return self.accumulate_node(node, example, "updating")


class Frame(BaseFrame):
    """Methods of streaming (batch-per-record) DataFrames and Series.

    >>> source = Stream()
    >>> s = Series(source, example=pd.Series([], dtype=float))
    >>> L = s.mean().stream.sink_to_list()
    >>> source.emit(pd.Series([1.0, 3.0])); [float(v) for v in L]
    [2.0]
    """

    _stream_type = "streaming"

    def groupby(self, other: object) -> GroupBy:
        """Group by column label(s); then ``.sum()``, ``.mean()`` ... keep running results."""
        from rivermark.dataframe.groupby import GroupBy

        return GroupBy(self, other)

    def aggregate(
        self,
        aggregation: aggs.Aggregation,
        start: object = None,
        op: str | None = None,
        name: str | None = None,
    ) -> Streaming:
        """Run an :class:`~rivermark.dataframe.aggregations.Aggregation` over everything seen.

        ``aggregation`` implements rivermark's partials or streamz's
        ``initial``/``on_new``/``on_old``; ``op`` names it in errors; ``name``
        names the node (its state keeps that name across changes of the graph).
        """
        node = aggs.aggregate_node(
            self.local_stream, aggregation, start=start, example=self.example, op=op
        )
        example = aggs.aggregate_example(aggregation, self.example)
        return self.accumulate_node(node, example, "updating", name)

    def sum(self, start: object = None, name: str | None = None) -> Streaming:
        """Running sum (of each column for a DataFrame)."""
        return self.aggregate(aggs.Sum(), start=start, op="sum()", name=name)

    def count(self, start: object = None, name: str | None = None) -> Streaming:
        """Running count of non-null values."""
        return self.aggregate(aggs.Count(), start=start, op="count()", name=name)

    def mean(self, start: object = None, name: str | None = None) -> Streaming:
        """Running mean."""
        return self.aggregate(aggs.Mean(), start=start, op="mean()", name=name)

    def var(self, ddof: int = 1, start: object = None, name: str | None = None) -> Streaming:
        """Running variance."""
        return self.aggregate(aggs.Var(ddof=ddof), start=start, op=f"var(ddof={ddof})", name=name)

    def std(self, ddof: int = 1, start: object = None, name: str | None = None) -> Streaming:
        """Running standard deviation."""
        return self.aggregate(
            aggs.Var(ddof=ddof, sqrt=True), start=start, op=f"std(ddof={ddof})", name=name
        )

    def min(self, start: object = None, name: str | None = None) -> Streaming:
        """Running minimum (of each column for a DataFrame), skipping missing values."""
        return self.aggregate(aggs.Min(), start=start, op="min()", name=name)

    def max(self, start: object = None, name: str | None = None) -> Streaming:
        """Running maximum (of each column for a DataFrame), skipping missing values."""
        return self.aggregate(aggs.Max(), start=start, op="max()", name=name)

    def rolling(
        self,
        window: int | str | pd.Timedelta,
        min_periods: int | None = None,
        with_state: bool = False,
        start: object = None,
    ) -> Rolling:
        """pandas-style rolling aggregations across batch boundaries (``window`` rows or a time).

        ``min_periods`` is pandas' (by default the window's size for a number
        of rows, 1 for a time span), so the output is pandas' ``rolling`` on
        the whole data, as streamz's is.
        """
        from rivermark.dataframe.windows import Rolling

        return Rolling(self, window, min_periods, with_state, start)

    def window(
        self,
        n: int | None = None,
        value: object = None,
        with_state: bool = False,
        start: object = None,
    ) -> Window:
        """Aggregations over the last ``n`` rows, or the last ``value`` of time (``"10s"``)."""
        from rivermark.dataframe.windows import Window

        return Window(self, n=n, value=value, with_state=with_state, start=start)

    def expanding(self, with_state: bool = False, start: object = None) -> Expanding:
        """Aggregations over everything seen so far."""
        from rivermark.dataframe.windows import Expanding

        return Expanding(self, with_state=with_state, start=start)

    def ewm(
        self,
        com: float | None = None,
        span: float | None = None,
        halflife: float | None = None,
        alpha: float | None = None,
        with_state: bool = False,
        start: object = None,
    ) -> EWM:
        """Exponentially weighted aggregations (``.mean()``)."""
        from rivermark.dataframe.windows import EWM

        return EWM(self, com, span, halflife, alpha, with_state, start)

    def _cumulative(self, op: str, name: str | None) -> Streaming:
        node = aggs.Cumulative(self.local_stream, op, example=self.example)
        return self.accumulate_node(node, self.example, "streaming", name)

    def cumsum(self, name: str | None = None) -> Streaming:
        """Cumulative sum across batches (each batch emitted with its cumulative values)."""
        return self._cumulative("cumsum", name)

    def cumprod(self, name: str | None = None) -> Streaming:
        """Cumulative product across batches."""
        return self._cumulative("cumprod", name)

    def cummin(self, name: str | None = None) -> Streaming:
        """Cumulative minimum across batches."""
        return self._cumulative("cummin", name)

    def cummax(self, name: str | None = None) -> Streaming:
        """Cumulative maximum across batches."""
        return self._cumulative("cummax", name)


class Frames(BaseFrame):
    """Methods of updating frames: each record is the latest full result.

    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"k": [], "v": []}))
    >>> L = sdf.groupby("k").v.sum().sum().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"k": ["a", "b"], "v": [1.0, 2.0]})); [float(v) for v in L]
    [3.0]
    """

    _stream_type = "updating"

    def sum(self, **kwargs: object) -> Streaming:
        """``sum`` of each latest result."""
        return self.map_partitions(lambda x: x.sum(**kwargs), self)

    def mean(self, **kwargs: object) -> Streaming:
        """``mean`` of each latest result."""
        return self.map_partitions(lambda x: x.mean(**kwargs), self)

    def std(self, **kwargs: object) -> Streaming:
        """``std`` of each latest result."""
        return self.map_partitions(lambda x: x.std(**kwargs), self)

    def var(self, **kwargs: object) -> Streaming:
        """``var`` of each latest result."""
        return self.map_partitions(lambda x: x.var(**kwargs), self)

    def count(self, **kwargs: object) -> Streaming:
        """``count`` of each latest result."""
        return self.map_partitions(lambda x: x.count(**kwargs), self)

    @property
    def size(self) -> Streaming:
        """``size`` of each latest result."""
        return self.map_partitions(lambda x: x.size, self)

    def nlargest(self, n: int, *args: object, **kwargs: object) -> Streaming:
        """``nlargest`` of each latest result."""
        return self.map_partitions(lambda x: x.nlargest(n, *args, **kwargs), self)


class _DataFrameMixin:
    example: pd.DataFrame
    stream: Stream

    @property
    def columns(self) -> pd.Index:
        """The example's columns."""
        return self.example.columns

    @property
    def dtypes(self) -> pd.Series:
        """The example's dtypes."""
        return self.example.dtypes

    def __getitem__(self, index: object) -> Streaming:
        return Streaming.map_partitions(operator.getitem, self, index)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_") or key in ("example", "stream"):
            raise AttributeError(key)
        example = self.__dict__.get("example")
        # optional: a Series example has no columns
        if example is not None and key in getattr(example, "columns", ()):
            return self[key]
        raise AttributeError(f"{type(self).__name__} has no attribute or column {key!r}")

    def __dir__(self) -> list[str]:
        # optional: a Series example has no columns
        cols = [c for c in getattr(self.example, "columns", ()) if isinstance(c, str)]
        return sorted(set(object.__dir__(self)) | set(cols))

    def assign(self, **kwargs: object) -> Streaming:
        """``assign`` new columns: constants, or Series derived from this DataFrame."""
        keys = list(kwargs)
        values = [kwargs[k] for k in keys]

        def _assign(df: pd.DataFrame, *vals: object) -> pd.DataFrame:
            return df.assign(**dict(zip(keys, vals)))

        return Streaming.map_partitions(_assign, self, *values)

    def to_frame(self) -> Self:
        """The DataFrame itself (for symmetry with ``Series.to_frame``)."""
        return self

    def __setitem__(self, key: Hashable, value: object) -> None:
        if isinstance(value, Streaming):
            new = self.assign(**{key: value}) if isinstance(key, str) else None
        else:
            new = Streaming.map_partitions(_set_item, self, key, value)
        if new is None:
            new = Streaming.map_partitions(_set_item, self, key, value)
        self.example = new.example
        self.stream = new.stream
        self._root = new._root  # noqa: SLF001 - a frame of the same class
        self._fn = new._fn  # noqa: SLF001 - a frame of the same class

    def query(self, expr: str, **kwargs: object) -> Streaming:
        """Rows of each batch matching the pandas ``query`` expression."""
        return Streaming.map_partitions(lambda x: x.query(expr, **kwargs), self)

    @property
    def plot(self) -> HvPlot:
        """Live hvplot plots: ``plot(kind=..., backlog=1000)``, ``plot.line()``, ... (``rivermark[plot]``)."""
        from rivermark.dataframe.plotting import HvPlot

        return HvPlot(cast("Streaming", self))  # a mixin of frame classes

    hvplot = plot


def _set_item(df: pd.DataFrame, key: Hashable, value: object) -> pd.DataFrame:
    out = df.copy()
    out[key] = value
    return out


class _SeriesMixin:
    example: pd.Series

    @property
    def dtype(self) -> np.dtype[np.generic] | pd.api.extensions.ExtensionDtype:
        """The example's dtype."""
        return self.example.dtype

    def to_frame(self) -> Streaming:
        """Each batch as a one-column DataFrame."""
        return Streaming.map_partitions(lambda x: x.to_frame(), self)

    @property
    def plot(self) -> HvPlot:
        """Live hvplot plots: ``plot(kind=..., backlog=1000)``, ``plot.line()``, ... (``rivermark[plot]``)."""
        from rivermark.dataframe.plotting import HvPlot

        return HvPlot(cast("Streaming", self))  # a mixin of frame classes

    hvplot = plot


def _check_example(kind: str, example: object, cls: type) -> None:
    if not isinstance(example, cls):
        raise ConfigurationError(
            f"{kind}: example must be a pandas.{cls.__name__} with the columns and dtypes of "
            f"the batches, got {example!r}; pass e.g. example=pd.{cls.__name__}(...)"
        )


class DataFrame(Frame, _DataFrameMixin):
    """A stream of pandas DataFrame batches.

    ``DataFrame(stream, example=...)`` wraps a stream; ``DataFrame({"a": s1, "b": s2})``
    builds one from Series derived from the same DataFrame.

    >>> import pandas as pd
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": [], "y": []}))
    >>> L = (sdf.x + sdf.y).sum().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1, 2], "y": [10, 20]}))
    >>> source.emit(pd.DataFrame({"x": [3], "y": [30]}))
    >>> [int(v) for v in L]
    [33, 66]
    """

    example: pd.DataFrame

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) == 1 and not kwargs and isinstance(args[0], dict):
            parts = args[0]
            if not parts or not all(isinstance(v, Streaming) for v in parts.values()):
                raise ConfigurationError(
                    f"DataFrame: a dict argument must map column names to streaming Series, "
                    f"got {parts!r}"
                )
            keys = list(parts)

            def _combine(*cols: pd.Series) -> pd.DataFrame:
                return pd.concat(dict(zip(keys, cols)), axis=1)

            combined = Streaming.map_partitions(_combine, *parts.values())
            Frame.__init__(self, combined.stream, combined.example)
            self._root, self._fn = combined._root, combined._fn  # noqa: SLF001 - a frame of the same class
            return
        stream = kwargs.pop("stream", None)
        example = kwargs.pop("example", None)
        stream_type = kwargs.pop("stream_type", None)
        if args:
            stream = args[0]
        if len(args) > 1:
            example = args[1]
        if kwargs:
            raise ConfigurationError(f"DataFrame: unexpected arguments {sorted(kwargs)!r}")
        _check_example("DataFrame", example, pd.DataFrame)
        Frame.__init__(self, stream, example, stream_type)

    def verify(self, x: object) -> None:
        """Raise :class:`SchemaError` unless ``x`` matches the example (see :mod:`.schema`).

        Columns are matched by name.  The stateful nodes apply the whole policy
        (columns and dtypes) to every batch they receive, however it arrives.
        """
        conform(x, self.example, None, f"{type(self).__name__}.emit")


class Series(Frame, _SeriesMixin):
    """A stream of pandas Series batches.

    >>> import pandas as pd
    >>> source = Stream()
    >>> s = Series(source, example=pd.Series([], dtype=float))
    >>> L = s.cumsum().stream.sink_to_list()
    >>> source.emit(pd.Series([1.0, 2.0])); source.emit(pd.Series([3.0]))
    >>> pd.concat(L).tolist()
    [1.0, 3.0, 6.0]
    """

    example: pd.Series

    def __init__(
        self,
        stream: Stream | None = None,
        example: pd.Series | None = None,
        stream_type: str | None = None,
    ) -> None:
        if example is None:
            example = pd.Series([], dtype=float)
        _check_example(type(self).__name__, example, pd.Series)
        Frame.__init__(self, stream, example, stream_type)

    def value_counts(self, name: str | None = None) -> Streaming:
        """Running counts of each value."""
        return self.aggregate(aggs.ValueCounts(), op="value_counts()", name=name)

    def verify(self, x: object) -> None:
        """Raise :class:`SchemaError` unless ``x`` is a Series."""
        conform(x, self.example, None, f"{type(self).__name__}.emit")


class Index(Streaming):
    """A stream of pandas Index objects (``sdf.index``).

    >>> import pandas as pd
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": []}))
    >>> L = sdf.index.stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1, 2]}, index=[5, 6])); list(L[0])
    [5, 6]
    """

    example: pd.Index

    @property
    def dtype(self) -> np.dtype[np.generic] | pd.api.extensions.ExtensionDtype:
        """The example's dtype."""
        return self.example.dtype


class DataFrames(Frames, _DataFrameMixin):
    """A stream of DataFrames where each record replaces the previous (an updating result).

    >>> import pandas as pd
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"k": [], "v": []}))
    >>> isinstance(sdf.groupby("k").sum(), DataFrames)
    True
    """

    example: pd.DataFrame

    def __init__(
        self, stream: Stream | None = None, example: object = None, stream_type: str | None = None
    ) -> None:
        Frames.__init__(self, stream, example, stream_type)


class Seriess(Frames, _SeriesMixin):
    """A stream of Series where each record replaces the previous (an updating result).

    >>> import pandas as pd
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": [], "y": []}))
    >>> totals = sdf.sum()
    >>> isinstance(totals, Seriess)
    True
    >>> L = totals.stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1, 2], "y": [3, 4]})); L[-1].to_dict()
    {'x': 3.0, 'y': 7.0}
    """

    example: pd.Series

    def __init__(
        self, stream: Stream | None = None, example: object = None, stream_type: str | None = None
    ) -> None:
        Frames.__init__(self, stream, example, stream_type)


FRAME_TYPES.update(
    {pd.DataFrame: (DataFrame, DataFrames), pd.Series: (Series, Seriess), pd.Index: (Index, Index)}
)


@Stream.register_api(attribute_name="to_dataframe")
def to_dataframe(stream: Stream, example: pd.DataFrame) -> DataFrame:
    """Treat a stream of pandas DataFrame batches as a streaming :class:`DataFrame`.

    >>> import pandas as pd
    >>> source = Stream()
    >>> sdf = source.to_dataframe(example=pd.DataFrame({"x": []}))
    >>> L = sdf.x.sum().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1, 2]})); [int(v) for v in L]
    [3]
    """
    return DataFrame(stream, example=example)
