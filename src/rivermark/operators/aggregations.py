"""What an event-time window computes: an :class:`Aggregation` of the values it holds.

An aggregation starts from a window's first value (``create``), adds each
further value (``add``), may join two partial results (``merge``, needed by
session windows) and gives the window's result (``result``).  Partial
results are checkpoint state: keep them plain immutable values (numbers,
tuples), since each is replaced, never changed in place.

>>> mean = BUILT_IN["mean"]
>>> acc = mean.add(mean.create(2), 4)
>>> mean.result(acc), mean.result(mean.merge(acc, mean.create(9)))
(3.0, 5.0)
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rivermark.core.naming import function_name
from rivermark.core.node import check_callable
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["Aggregation", "BUILT_IN", "aggregation"]


def _identity(x: Any) -> Any:
    return x


@dataclass(frozen=True)
class Aggregation:
    """A window's computation: ``create(v)``, ``add(acc, v)``, ``merge(a, b)``, ``result(acc)``."""

    name: str
    create: Callable[[Any], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any] | None = None
    result: Callable[[Any], Any] = _identity


def _one(v: object) -> int:
    return 1


def _count_add(acc: int, v: object) -> int:
    return acc + 1


def _mean_create(v: Any) -> tuple[Any, int]:
    return (v, 1)


def _mean_add(acc: tuple[Any, int], v: Any) -> tuple[Any, int]:
    return (acc[0] + v, acc[1] + 1)


def _mean_merge(a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
    return (a[0] + b[0], a[1] + b[1])


def _mean_result(acc: tuple[Any, int]) -> float:
    return float(acc[0] / acc[1])


def _tuple1(v: Any) -> tuple[Any, ...]:
    return (v,)


def _append(acc: tuple[Any, ...], v: Any) -> tuple[Any, ...]:
    return (*acc, v)


#: the aggregations named by ``agg="..."``
BUILT_IN: dict[str, Aggregation] = {
    "count": Aggregation("count", _one, _count_add, operator.add),
    "sum": Aggregation("sum", _identity, operator.add, operator.add),
    "mean": Aggregation("mean", _mean_create, _mean_add, _mean_merge, _mean_result),
    "min": Aggregation("min", _identity, min, min),
    "max": Aggregation("max", _identity, max, max),
    "collect": Aggregation("collect", _tuple1, _append, operator.add),
}


def _fname(func: object) -> str:
    return function_name(func)


def aggregation(
    kind: str,
    agg: str | Aggregation | None,
    reduce: Callable[[Any, Any], Any] | None,
    fold: Callable[[Any, Any], Any] | None,
    start: Any,
    merge: Callable[[Any, Any], Any] | None,
) -> Aggregation:
    """The :class:`Aggregation` a window's arguments ask for (``agg`` defaults to collect)."""
    given = [n for n, v in (("agg", agg), ("reduce", reduce), ("fold", fold)) if v is not None]
    if len(given) > 1:
        raise ConfigurationError(
            f"{kind}: pass one of agg=, reduce=, fold= (got {', '.join(given)})"
        )
    if merge is not None:
        check_callable(kind, "merge", merge)
    if reduce is not None:
        check_callable(kind, "reduce", reduce)
        return Aggregation(f"reduce({_fname(reduce)})", _identity, reduce, merge or reduce)
    if fold is not None:
        check_callable(kind, "fold", fold)

        def create(v: Any) -> Any:
            return fold(start, v)

        return Aggregation(f"fold({_fname(fold)})", create, fold, merge)
    if agg is None:
        return BUILT_IN["collect"]
    if isinstance(agg, Aggregation):
        return agg
    if isinstance(agg, str) and agg in BUILT_IN:
        return BUILT_IN[agg]
    raise ConfigurationError(
        f"{kind}: agg must be one of {', '.join(map(repr, BUILT_IN))} or an Aggregation, "
        f"got {agg!r}; or pass reduce=func or fold=func with start="
    )
