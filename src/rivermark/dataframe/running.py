"""Nodes that emit each batch with values carried over from earlier batches.

Cumulative operations, ``rolling`` and ``ewm(...).mean()``: unlike the
reductions of :mod:`rivermark.dataframe.aggregations`, their output follows
the rows of the input.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Mapping
from typing import Any, ClassVar, cast

import numpy as np
import pandas as pd

from rivermark.core.node import Stream
from rivermark.core.refs import Metadata
from rivermark.dataframe.schema import Schema, SchemaError, conform
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "Cumulative",
    "RollingAggregate",
    "EWMMean",
    "OpName",
    "ConformingNode",
    "StepNode",
    "check_rolling_window",
    "check_time_index",
    "informative_index",
]


class OpName:
    """The user-facing name of an operation (``window(n=3).sum()``), reported in errors.

    >>> OpName("sum()").__qualname__
    'sum()'
    """

    def __init__(self, name: str) -> None:
        self.__qualname__ = name

    def __repr__(self) -> str:
        return self.__qualname__


class StepNode(Stream):
    """A node whose result for each batch is a step of its state (:meth:`_step`).

    ``with_state=True`` emits ``(state, result)``; an exception of the step
    goes to :meth:`_failed` (the node's error policy) and nothing is emitted.
    """

    #: emit ``(state, result)`` tuples instead of results
    with_state: bool = False

    def _step(self, x: pd.DataFrame | pd.Series) -> object:
        """The result for batch ``x``, updating the node's state."""
        raise NotImplementedError

    def _failed(self, x: object, e: Exception) -> None:
        """Apply the error policy to the step's exception ``e``."""
        raise NotImplementedError

    def _state_for_output(self) -> object:
        """What ``with_state=True`` emits beside each result."""
        return self.get_state()

    def update(
        self, x: object, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        try:
            result = self._step(x)
        except Exception as e:
            self._failed(x, e)
            return None
        if self.with_state:
            return self._emit((self._state_for_output(), result), metadata)
        return self._emit(result, metadata)


class ConformingNode(StepNode):
    """A node that matches every batch to its example (:mod:`rivermark.dataframe.schema`)."""

    example: pd.DataFrame | pd.Series | None = None
    #: the dtypes fixed by the first non-empty batch (checkpointed)
    schema: Schema | None = None
    #: whether the example's dtypes take part in the schema (``schema.first_schema``);
    #: false for a node whose results have one dtype whatever its input's
    schema_with_example: ClassVar[bool] = True
    op: OpName

    def _conform(self, x: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
        if self.example is None:
            return x
        x, self.schema = conform(
            x, self.example, self.schema, self._where, self.schema_with_example
        )
        return x

    def _where(self) -> str:
        return f"{self.display_name()} {self.op.__qualname__}"

    def set_state(self, state: Mapping[str, object]) -> None:
        for a in self._state_attrs:
            # ``schema`` is missing from checkpoints of older versions
            setattr(self, a, state.get(a) if a == "schema" else state[a])

    def _failed(self, x: object, e: Exception) -> None:
        """Apply the error policy; a schema mismatch is raised as itself under ``raise``."""
        if isinstance(e, SchemaError) and self.on_error in (None, "raise"):
            raise e
        self._user_error(x, e, self.op)


class Cumulative(ConformingNode):
    """Cumulative ``op`` (cumsum, cumprod, cummin, cummax) across batches.

    Each batch is emitted with its cumulative values.  The state is the
    running value of each column (missing values are skipped, as pandas
    does, so a batch ending in NaN does not lose it).

    >>> s = Stream()
    >>> L = Cumulative(s, "cumsum").sink_to_list()
    >>> s.emit(pd.Series([1.0, None])); s.emit(pd.Series([3.0]))
    >>> pd.concat(L).tolist()
    [1.0, nan, 4.0]
    """

    _OPS = ("cumsum", "cumprod", "cummin", "cummax")

    def __init__(
        self,
        upstream: Stream,
        op: str,
        example: pd.DataFrame | pd.Series | None = None,
        **kwargs: Any,
    ) -> None:
        if op not in self._OPS:
            raise ConfigurationError(
                f"Cumulative: op must be one of {self._OPS}, got {op!r}; pass e.g. op='cumsum'"
            )
        self.cum = op
        self.op = OpName(f"{op}()")
        self.example = example
        #: a one-row frame (or one-element Series): the running value so far
        self.last: pd.DataFrame | pd.Series | None = None
        Stream.__init__(self, upstream, **kwargs)

    _state_attrs = ("last", "schema")

    def state_signature(self) -> str:
        return f"Cumulative({self.cum})"

    def _step(self, x: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
        x = self._conform(x)
        if self.last is None or not len(self.last):
            out = getattr(x, self.cum)()
        else:
            out = getattr(pd.concat([self.last, x]), self.cum)().iloc[1:]
        if len(out):
            # the running value: the last non-missing output of each column
            both = out if self.last is None else pd.concat([self.last, out])
            self.last = both.ffill().iloc[-1:]
        return out


def informative_index(example: object) -> bool:
    """Whether ``example``'s index says what the batches' index is.

    An empty example with the default ``RangeIndex`` (``pd.DataFrame({"x": []})``)
    says nothing: the batches are checked when they arrive.
    """
    # optional: an example may be a scalar, without an index
    index = getattr(example, "index", None)
    if index is None:
        return False
    return len(index) > 0 or not isinstance(index, pd.RangeIndex)


def check_time_index(x: pd.DataFrame | pd.Series, what: str) -> None:
    """Refuse a batch without a datetime index in a time window."""
    if not isinstance(x.index, (pd.DatetimeIndex, pd.TimedeltaIndex)):
        raise SchemaError(
            f"{what}: a time window needs batches with a DatetimeIndex, got a "
            f"{type(x.index).__name__}; set a datetime index upstream (e.g. "
            "sdf.set_index('time')) or use a number of rows"
        )


def check_rolling_window(window: object, example: pd.DataFrame | pd.Series, what: str) -> None:
    """Refuse, at graph build time, a window pandas would refuse on the first batch."""
    if isinstance(window, int):
        return
    try:
        td = pd.Timedelta(window)
    except (TypeError, ValueError) as e:
        raise ConfigurationError(
            f"{what}: window {window!r} is neither a number of rows nor a time span; "
            "pass e.g. 10 or '10s'"
        ) from e
    if td <= pd.Timedelta(0):
        raise ConfigurationError(f"{what}: window must be positive, got {window!r}")
    if not informative_index(example):
        return
    index = example.index
    if not isinstance(index, (pd.DatetimeIndex, pd.TimedeltaIndex)):
        raise ConfigurationError(
            f"{what}: a time window ({window!r}) needs a DatetimeIndex, but the example's index "
            f"is a {type(index).__name__}; give the example (and the batches) a DatetimeIndex, "
            "e.g. example=df.set_index('time').iloc[:0], or use a number of rows"
        )


class RollingAggregate(ConformingNode):
    """pandas ``rolling(window).op()`` across batch boundaries.

    Only the last rows are kept (the last ``window`` rows, as streamz's state
    holds them, or those within ``window`` of the newest index); each batch is
    emitted with its rolling values.  That tail is the state emitted with
    ``with_state=True`` and taken by ``start=``.

    >>> s = Stream()
    >>> L = RollingAggregate(s, 2, "sum").sink_to_list()
    >>> s.emit(pd.Series([1.0, 2.0])); s.emit(pd.Series([3.0], index=[2]))
    >>> pd.concat(L).tolist()
    [nan, 3.0, 5.0]
    """

    def __init__(
        self,
        upstream: Stream,
        window: int | str | pd.Timedelta,
        op: str,
        min_periods: int | None = None,
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
        with_state: bool = False,
        start: object = None,
        example: pd.DataFrame | pd.Series | None = None,
        **node_kwargs: Any,
    ) -> None:
        self.window = window
        self.how = op
        self.op = OpName(f"rolling({window!r}).{op}()")
        self.min_periods = min_periods
        self.args = args
        self.op_kwargs = kwargs or {}
        self.with_state = with_state
        self.example = example
        # streamz's default start is ``()``; a state is a frame (or Series) of the last rows
        empty = start is None or (isinstance(start, tuple) and not start)
        self.tail: pd.DataFrame | pd.Series | None = (
            None if empty else cast("pd.DataFrame | pd.Series", start)
        )
        Stream.__init__(self, upstream, **node_kwargs)

    _state_attrs = ("tail", "schema")
    # pandas' rolling results are float64 whatever the rows' dtype; the rows
    # it holds (its state) keep the data's own dtype, as streamz's do
    schema_with_example = False

    def state_signature(self) -> str:
        return (
            f"RollingAggregate(window={self.window!r}, op={self.how}, "
            f"min_periods={self.min_periods})"
        )

    def _step(self, x: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
        x = self._conform(x)
        if not isinstance(self.window, int):
            check_time_index(x, f"{self.display_name()} {self.op.__qualname__}")
        tail = self.tail
        full = x if tail is None or not len(tail) else pd.concat([tail, x])
        r = full.rolling(self.window, min_periods=self.min_periods)
        out = getattr(r, self.how)(*self.args, **self.op_kwargs).iloc[len(full) - len(x) :]
        if isinstance(self.window, int):
            self.tail = full.iloc[-self.window :]
        elif len(full):
            cutoff = full.index.max() - pd.Timedelta(self.window)
            self.tail = full[full.index > cutoff]
        return out

    def _state_for_output(self) -> pd.DataFrame | pd.Series | None:
        return self.tail


class EWMMean(ConformingNode):
    """Exponentially weighted mean (pandas ``ewm(alpha=...).mean()``, ``adjust=True``).

    Emits, after each batch, the mean at the batch's newest row, as streamz
    does: a one-row DataFrame (a one-element Series for a Series), labelled
    with that row's index; an empty batch gives an empty result.  The state
    is, per column, the weighted sum and the sum of weights of the values
    seen, updated with one vectorised step per batch.  Missing values are
    skipped as pandas does by default (``ignore_na=False``): they add nothing
    but still age the weights of the values before them.

    >>> s = Stream()
    >>> L = EWMMean(s, alpha=0.5).sink_to_list()
    >>> s.emit(pd.Series([1.0, None])); s.emit(pd.Series([3.0], index=[2]))
    >>> L[-1].round(6).to_dict() == pd.Series([1.0, None, 3.0]).ewm(alpha=0.5).mean().round(6)[2:].to_dict()
    True
    """

    def __init__(
        self,
        upstream: Stream,
        alpha: float,
        with_state: bool = False,
        start: object = None,
        example: pd.DataFrame | pd.Series | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0 < alpha <= 1:
            raise ConfigurationError(
                f"ewm: alpha must be in (0, 1], got {alpha!r}; pass com=, span=, halflife= or alpha="
            )
        self.alpha = alpha
        self.op = OpName(f"ewm(alpha={alpha!r}).mean()")
        self.with_state = with_state
        self.example = example
        self.num: np.ndarray | float | None = None
        self.den: np.ndarray | float = 0.0
        Stream.__init__(self, upstream, **kwargs)
        if start is not None:
            self.set_state(cast("Mapping[str, object]", start))  # a state of get_state()

    _state_attrs = ("num", "den", "schema")

    def state_signature(self) -> str:
        return f"EWMMean(alpha={self.alpha})"

    def _step(self, x: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
        x = self._conform(x)
        n = len(x)
        decay = 1.0 - self.alpha
        w = decay ** np.arange(n - 1, -1, -1, dtype=float)
        vals = x.to_numpy(dtype=float)
        seen = ~np.isnan(vals)
        batch_num = w @ np.where(seen, vals, 0.0)
        batch_den = w @ seen.astype(float)
        carry = decay**n
        num = batch_num if self.num is None else self.num * carry + batch_num
        den = self.den * carry + batch_den
        self.num, self.den = num, den
        with np.errstate(all="ignore"):
            mean = np.where(np.asarray(den) > 0, num / np.where(den > 0, den, 1.0), math.nan)
        rows = x.index[-1:]
        if isinstance(x, pd.DataFrame):
            values = np.reshape(np.asarray(mean, dtype=float), (1, -1))[: len(rows)]
            return pd.DataFrame(values, index=rows, columns=x.columns)
        return pd.Series([float(mean)] * len(rows), index=rows, name=x.name, dtype=float)
