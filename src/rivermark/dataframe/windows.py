"""Windowed, rolling, expanding and exponentially weighted aggregations.

``sdf.window(n=1000)`` aggregates the last 1000 rows, ``sdf.window("10s")``
the rows within ten seconds of the newest index (a DatetimeIndex).  Every
aggregation is incremental: a batch is summarised once when it arrives, and
the window's summaries are merged (never subtracted, so nothing drifts; see
:mod:`rivermark.dataframe.aggregations`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, Protocol, Self, cast

import pandas as pd

from rivermark.dataframe import aggregations as aggs
from rivermark.dataframe.running import check_rolling_window, informative_index
from rivermark.dataframe.streaming import Streaming
from rivermark.errors import ConfigurationError

if TYPE_CHECKING:
    from rivermark.dataframe.groupby import GroupBy

logger = logging.getLogger(__name__)

__all__ = ["Window", "Expanding", "Rolling", "EWM", "EWMNotSupportedError"]


class _FrameRoot(Protocol):
    """What a window uses of a streaming DataFrame beyond :class:`Streaming`."""

    @property
    def columns(self) -> pd.Index: ...

    @property
    def dtypes(self) -> pd.Series: ...

    def __getitem__(self, key: object) -> Streaming: ...

    def reset_index(self) -> Streaming: ...


def _parse_window(n: object, value: object) -> tuple[int | None, pd.Timedelta | None]:
    if value is None and isinstance(n, (str, pd.Timedelta)):
        n, value = None, n
    if (n is None) == (value is None):
        raise ConfigurationError(
            f"window: pass exactly one of n= (a number of rows) or value= (a time span such "
            f"as '10s'), got n={n!r}, value={value!r}"
        )
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigurationError(
                f"window: n must be a positive number of rows, got {n!r}; pass e.g. n=100"
            )
        return n, None
    try:
        td = pd.Timedelta(value)
    except (TypeError, ValueError) as e:
        raise ConfigurationError(
            f"window: value must be a time span, got {value!r}; pass e.g. value='10s'"
        ) from e
    if td <= pd.Timedelta(0):
        raise ConfigurationError(f"window: value must be positive, got {value!r}")
    return None, td


class Window:
    """Aggregations over a sliding window of rows or of time.

    ``with_state=True`` makes every aggregation emit ``(state, result)``;
    ``start`` is such a state to resume from.  Without them the state is still
    checkpointed by a job.

    >>> import pandas as pd
    >>> from rivermark import Stream
    >>> from rivermark.dataframe import DataFrame
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": []}))
    >>> L = sdf.window(n=3).x.sum().stream.sink_to_list()
    >>> for i in range(4):
    ...     source.emit(pd.DataFrame({"x": [i]}))
    >>> [int(v) for v in L]
    [0, 1, 3, 6]
    """

    _windowed = True

    def __init__(
        self,
        sdf: Streaming,
        n: int | str | pd.Timedelta | None = None,
        value: object = None,
        with_state: bool = False,
        start: object = None,
    ) -> None:
        self.root = sdf
        self.n, self.value = self._spec(n, value)
        self.with_state = with_state
        self.start = start
        #: the window as the user wrote it (``'2s'``), for messages
        self._spelled = value if value is not None else n
        # optional: an example may be a scalar, without an index
        index = getattr(sdf.example, "index", None)
        if (
            self.value is not None
            and informative_index(sdf.example)
            and not isinstance(index, (pd.DatetimeIndex, pd.TimedeltaIndex))
        ):
            raise ConfigurationError(
                f"{self._describe()}: a time window needs a DatetimeIndex, but the example's "
                f"index is a {type(index).__name__}; give the example (and the batches) a "
                "DatetimeIndex, e.g. example=df.set_index('time').iloc[:0], or use window(n=...)"
            )

    def _describe(self) -> str:
        if self.value is not None:
            spelled = self._spelled if isinstance(self._spelled, str) else str(self.value)
            return f"window({spelled!r})"
        if self.n is not None:
            return f"window(n={self.n})"
        return "expanding()"

    def _spec(self, n: object, value: object) -> tuple[int | None, pd.Timedelta | None]:
        return _parse_window(n, value)

    def _like(self, root: Streaming) -> Self:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.root = root
        return new

    def __getitem__(self, key: object) -> Self:
        return self._like(cast(_FrameRoot, self.root)[key])

    def __getattr__(self, key: str) -> Self:
        if key.startswith("_") or key == "root":
            raise AttributeError(key)
        # optional: a Series example has no columns
        cols = getattr(self.root.example, "columns", ())
        if key in cols:
            return self[key]
        raise AttributeError(f"{type(self).__name__} has no attribute or column {key!r}")

    def map_partitions(self, func: Callable[..., object], *args: object, **kwargs: object) -> Self:
        """Apply ``func`` to each batch before it enters the window."""
        args2 = [a.root if isinstance(a, Window) else a for a in args]
        return self._like(Streaming.map_partitions(func, *args2, **kwargs))

    @property
    def index(self) -> Self:
        return self.map_partitions(lambda x: x.index, self)

    @property
    def columns(self) -> pd.Index:
        return cast(_FrameRoot, self.root).columns

    @property
    def dtypes(self) -> pd.Series:
        return cast(_FrameRoot, self.root).dtypes

    @property
    def example(self) -> object:
        return self.root.example

    def reset_index(self) -> Self:
        """Reset the index of each batch before windowing."""
        return self._like(cast(_FrameRoot, self.root).reset_index())

    # ---------------------------------------------------------------- aggregations
    def aggregate(
        self, agg: aggs.Aggregation, op: str | None = None, name: str | None = None
    ) -> Streaming:
        """Run an :class:`~rivermark.dataframe.aggregations.Aggregation` over the window.

        ``agg`` implements either rivermark's partials or streamz's
        ``initial``/``on_new``/``on_old``; ``op`` names it in errors; ``name``
        names the node (its state keeps that name across changes of the graph).
        """
        node = aggs.aggregate_node(
            self.root.local_stream,
            agg,
            n=self.n,
            value=self.value,
            with_state=self.with_state,
            start=self.start,
            example=self.root.example,
            op=f"{self._describe()}.{op or 'aggregate(' + type(agg).__name__ + ')'}",
        )
        example = aggs.aggregate_example(agg, self.root.example)
        return self.root.accumulate_node(node, example, "updating", name)

    def full(self, name: str | None = None) -> Streaming:
        """The whole window's data after each batch."""
        return self.aggregate(aggs.Full(), "full()", name)

    def apply(self, func: Callable[..., object], name: str | None = None) -> Streaming:
        """Apply ``func`` to the whole window after each batch.

        With ``with_state=True`` ``func`` receives ``(state, window)`` tuples;
        ``name`` names the node that keeps the window.
        """
        result = self.full(name)
        return Streaming.map_partitions(func, result)

    def sum(self, name: str | None = None) -> Streaming:
        """Sum within the window."""
        return self.aggregate(aggs.Sum(), "sum()", name)

    def count(self, name: str | None = None) -> Streaming:
        """Count of non-null values within the window."""
        return self.aggregate(aggs.Count(), "count()", name)

    def mean(self, name: str | None = None) -> Streaming:
        """Mean within the window."""
        return self.aggregate(aggs.Mean(), "mean()", name)

    def var(self, ddof: int = 1, name: str | None = None) -> Streaming:
        """Variance within the window."""
        return self.aggregate(aggs.Var(ddof=ddof), f"var(ddof={ddof})", name)

    def std(self, ddof: int = 1, name: str | None = None) -> Streaming:
        """Standard deviation within the window."""
        return self.aggregate(aggs.Var(ddof=ddof, sqrt=True), f"std(ddof={ddof})", name)

    def min(self, name: str | None = None) -> Streaming:
        """Minimum within the window (skipping missing values)."""
        return self.aggregate(aggs.Min(), "min()", name)

    def max(self, name: str | None = None) -> Streaming:
        """Maximum within the window (skipping missing values)."""
        return self.aggregate(aggs.Max(), "max()", name)

    @property
    def size(self) -> Streaming:
        """Number of elements within the window (named: ``aggregate(aggregations.Size(), name=...)``)."""
        return self.aggregate(aggs.Size(), "size")

    def value_counts(self, name: str | None = None) -> Streaming:
        """Counts of each value within the window."""
        return self.aggregate(aggs.ValueCounts(), "value_counts()", name)

    def groupby(self, other: object) -> GroupBy:
        """Grouped aggregations within the window."""
        from rivermark.dataframe.groupby import GroupBy

        if isinstance(other, Window):
            other = other.root
        return GroupBy(
            self.root,
            other,
            n=self.n,
            value=self.value,
            with_state=self.with_state,
            start=self.start,
            windowed=self._windowed,
            prefix=self._describe(),
        )


# Elementwise operators on a window apply to each batch before it enters the
# window (``sdf.window(n=3) + 10``, ``w.x % 4``), as in streamz.
for _op in (
    ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor"]
    + ["radd", "rsub", "rmul", "rtruediv", "rfloordiv", "rmod", "rpow", "rand", "ror", "rxor"]
    + ["lt", "le", "gt", "ge", "eq", "ne", "neg", "abs", "invert"]
):
    setattr(Window, f"__{_op}__", getattr(Streaming, f"__{_op}__"))
Window.__hash__ = object.__hash__  # type: ignore[method-assign]
Window._binop = Streaming._binop  # type: ignore[attr-defined]  # noqa: SLF001
Window._rbinop = Streaming._rbinop  # type: ignore[attr-defined]  # noqa: SLF001
del _op


class Expanding(Window):
    """Aggregations over everything seen so far (only the accumulator is kept).

    >>> import pandas as pd
    >>> from rivermark import Stream
    >>> from rivermark.dataframe import DataFrame
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": []}))
    >>> L = sdf.expanding().x.mean().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1.0, 3.0]})); source.emit(pd.DataFrame({"x": [5.0]}))
    >>> [float(v) for v in L]
    [2.0, 3.0]
    """

    _windowed = False

    def __init__(
        self, sdf: Streaming, with_state: bool = False, start: object = None, **_: object
    ) -> None:
        super().__init__(sdf, with_state=with_state, start=start)

    def _spec(self, n: object, value: object) -> tuple[int | None, pd.Timedelta | None]:
        return None, None


def _com_to_alpha(
    com: float | None, span: float | None, halflife: float | None, alpha: float | None
) -> float:
    given = [
        (k, v)
        for k, v in (("com", com), ("span", span), ("halflife", halflife), ("alpha", alpha))
        if v is not None
    ]
    # pandas' (and streamz's) wording, so that code matching it keeps working
    if not given:
        raise ConfigurationError("ewm: Must pass one of com=, span=, halflife=, alpha=; got none")
    if len(given) > 1:
        raise ConfigurationError(
            f"ewm: Can only provide one of com=, span=, halflife=, alpha=; got {dict(given)!r}"
        )
    kind, v = given[0]
    if kind == "com":
        if v < 0:
            raise ConfigurationError(f"ewm: com must be >= 0, got {v!r}")
        return 1.0 / (1.0 + v)
    if kind == "span":
        if v < 1:
            raise ConfigurationError(f"ewm: span must be >= 1, got {v!r}")
        return 2.0 / (v + 1.0)
    if kind == "halflife":
        if v <= 0:
            raise ConfigurationError(f"ewm: halflife must be > 0, got {v!r}")
        return 1.0 - math.exp(math.log(0.5) / v)
    if not 0 < v <= 1:
        raise ConfigurationError(f"ewm: alpha must satisfy 0 < alpha <= 1, got {v!r}")
    return float(v)


class EWMNotSupportedError(ConfigurationError, NotImplementedError):
    """An ``ewm(...)`` aggregation other than ``mean()`` (streamz raises ``NotImplementedError``)."""


class EWM:
    """Exponentially weighted aggregations; ``.mean()`` is supported.

    >>> import pandas as pd
    >>> from rivermark import Stream
    >>> from rivermark.dataframe import DataFrame
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": []}))
    >>> L = sdf.x.ewm(com=1).mean().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1.0, 2.0]}))
    >>> L[-1].round(4).to_dict()
    {1: 1.6667}
    """

    def __init__(
        self,
        sdf: Streaming,
        com: float | None = None,
        span: float | None = None,
        halflife: float | None = None,
        alpha: float | None = None,
        with_state: bool = False,
        start: object = None,
    ) -> None:
        self.root = sdf
        self.alpha = _com_to_alpha(com, span, halflife, alpha)
        self.with_state = with_state
        self.start = start

    def __getitem__(self, key: object) -> EWM:
        return EWM(
            cast(_FrameRoot, self.root)[key],
            alpha=self.alpha,
            with_state=self.with_state,
            start=self.start,
        )

    def __getattr__(self, key: str) -> EWM:
        if key.startswith("_") or key == "root":
            raise AttributeError(key)
        # optional: a Series example has no columns
        if key in getattr(self.root.example, "columns", ()):
            return self[key]
        raise AttributeError(f"EWM has no attribute or column {key!r}")

    def mean(self, name: str | None = None) -> Streaming:
        """The exponentially weighted mean at each batch's newest row (a one-row frame)."""
        node = aggs.EWMMean(
            self.root.local_stream,
            self.alpha,
            with_state=self.with_state,
            start=self.start,
            example=self.root.example,
        )
        ex = cast("pd.DataFrame | pd.Series", self.root.example)
        example: pd.DataFrame | pd.Series = ex.iloc[:0].astype(float)
        return self.root.accumulate_node(node, example, "updating", name)

    def _unsupported(self, what: str) -> NoReturn:
        raise EWMNotSupportedError(
            f"ewm(...).{what}() is not supported on streams; use ewm(...).mean(), or "
            f"window(...).apply(lambda df: df.ewm(...).{what}())"
        )

    # streamz raises NotImplementedError for these as well
    def sum(self) -> NoReturn:
        self._unsupported("sum")

    def var(self, ddof: int = 1) -> NoReturn:
        self._unsupported("var")

    def std(self, ddof: int = 1) -> NoReturn:
        self._unsupported("std")

    def count(self) -> NoReturn:
        self._unsupported("count")

    def apply(self, func: Callable[..., object]) -> NoReturn:
        self._unsupported("apply")

    def full(self) -> NoReturn:
        self._unsupported("full")

    def value_counts(self) -> NoReturn:
        self._unsupported("value_counts")

    @property
    def size(self) -> NoReturn:
        self._unsupported("size")


class Rolling:
    """pandas ``rolling`` aggregations that carry the needed rows across batches.

    >>> import pandas as pd
    >>> from rivermark import Stream
    >>> from rivermark.dataframe import DataFrame
    >>> source = Stream()
    >>> sdf = DataFrame(source, example=pd.DataFrame({"x": []}))
    >>> L = sdf.x.rolling(2).sum().stream.sink_to_list()
    >>> source.emit(pd.DataFrame({"x": [1.0, 2.0]}))
    >>> source.emit(pd.DataFrame({"x": [4.0]}, index=[2]))
    >>> pd.concat(L).tolist()
    [nan, 3.0, 6.0]
    """

    def __init__(
        self,
        sdf: Streaming,
        window: int | str | pd.Timedelta,
        min_periods: int | None = None,
        with_state: bool = False,
        start: object = None,
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, (int, str, pd.Timedelta)):
            raise ConfigurationError(
                f"rolling: window must be a number of rows or a time span, got {window!r}; "
                f"pass e.g. rolling(10) or rolling('10s')"
            )
        if isinstance(window, int) and window < 1:
            raise ConfigurationError(f"rolling: window must be >= 1, got {window!r}")
        check_rolling_window(window, sdf.example, f"rolling({window!r})")
        self.root = sdf
        self.window = window
        self.min_periods = min_periods
        self.with_state = with_state
        self.start = start

    def __getitem__(self, key: object) -> Rolling:
        return Rolling(
            cast(_FrameRoot, self.root)[key],
            self.window,
            self.min_periods,
            self.with_state,
            self.start,
        )

    def __getattr__(self, key: str) -> Rolling:
        if key.startswith("_") or key == "root":
            raise AttributeError(key)
        # optional: a Series example has no columns
        if key in getattr(self.root.example, "columns", ()):
            return self[key]
        raise AttributeError(f"Rolling has no attribute or column {key!r}")

    def _known(
        self, op: str, *args: object, name: str | None = None, **kwargs: object
    ) -> Streaming:
        node = aggs.RollingAggregate(
            self.root.local_stream,
            self.window,
            op,
            min_periods=self.min_periods,
            args=args,
            kwargs=kwargs,
            with_state=self.with_state,
            start=self.start,
            example=self.root.example,
        )
        ex = cast("pd.DataFrame | pd.Series", self.root.example)
        try:
            example = getattr(ex.rolling(self.window, min_periods=self.min_periods), op)(
                *args, **kwargs
            )
        except Exception:  # e.g. a time window over an example without a DatetimeIndex
            example = ex
        return self.root.accumulate_node(node, example, "streaming", name)

    def sum(self, name: str | None = None) -> Streaming:
        """Rolling sum."""
        return self._known("sum", name=name)

    def mean(self, name: str | None = None) -> Streaming:
        """Rolling mean."""
        return self._known("mean", name=name)

    def min(self, name: str | None = None) -> Streaming:
        """Rolling minimum."""
        return self._known("min", name=name)

    def max(self, name: str | None = None) -> Streaming:
        """Rolling maximum."""
        return self._known("max", name=name)

    def median(self, name: str | None = None) -> Streaming:
        """Rolling median."""
        return self._known("median", name=name)

    def std(self, *args: object, name: str | None = None, **kwargs: object) -> Streaming:
        """Rolling standard deviation."""
        return self._known("std", *args, name=name, **kwargs)

    def var(self, *args: object, name: str | None = None, **kwargs: object) -> Streaming:
        """Rolling variance."""
        return self._known("var", *args, name=name, **kwargs)

    def count(self, *args: object, name: str | None = None, **kwargs: object) -> Streaming:
        """Rolling count."""
        return self._known("count", *args, name=name, **kwargs)

    def aggregate(self, *args: object, name: str | None = None, **kwargs: object) -> Streaming:
        """Rolling ``aggregate``."""
        return self._known("aggregate", *args, name=name, **kwargs)

    def quantile(self, *args: object, name: str | None = None, **kwargs: object) -> Streaming:
        """Rolling quantile."""
        return self._known("quantile", *args, name=name, **kwargs)
