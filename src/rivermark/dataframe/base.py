"""The contract of an incremental aggregation: :class:`Aggregation`.

The aggregations themselves (``Sum``, ``Var``, ...) and the node that runs
them (:class:`~rivermark.dataframe.aggregations.Aggregate`) are in
:mod:`rivermark.dataframe.aggregations`; grouped ones in
:mod:`rivermark.dataframe.grouped`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rivermark.dataframe.partials import aligned_add, aligned_sub

if TYPE_CHECKING:
    from rivermark.dataframe.schema import Dtype

logger = logging.getLogger(__name__)

__all__ = ["Aggregation"]


class Aggregation:
    """An incremental aggregation over batches (DataFrames or Series).

    Subclasses implement :meth:`partial` and :meth:`result`; the default
    :meth:`combine` adds partials component-wise (a partial is a tuple of
    numbers or pandas objects, and so is the accumulator), and :meth:`merge`
    is :meth:`combine`.  An accumulator of another shape overrides
    :meth:`merge` (and :meth:`copy` when :meth:`combine` changes it in place).

    A subclass may instead implement streamz's protocol: ``initial(batch)``
    (the first state), ``on_new(state, batch)`` and ``on_old(state, batch)``
    (each returning ``(new_state, result)``); ``aggregate()`` then runs it
    with :class:`StreamzAggregate`.

    >>> import pandas as pd
    >>> from rivermark.dataframe.aggregations import Sum
    >>> agg = Sum()
    >>> acc = agg.combine(None, agg.partial(pd.Series([1, 2])))
    >>> acc = agg.combine(acc, agg.partial(pd.Series([3])))
    >>> int(agg.result(acc))
    6
    """

    #: True when the result is the window's data itself (no partials)
    full = False
    #: True when the accumulator is a :class:`~rivermark.dataframe.partials.KeyedAcc`
    #: and a partial a tuple of pandas objects indexed by the keys: without a
    #: window the node checkpoints it per key (:mod:`rivermark.dataframe.keyed`)
    keyed = False

    def partial(self, batch: Any) -> Any:
        raise NotImplementedError

    def combine(self, acc: Any, p: Any) -> Any:
        if acc is None:
            return p
        return tuple(aligned_add(a, b) for a, b in zip(acc, p))

    def merge(self, older: Any, newer: Any) -> Any:
        """The accumulator of the rows of both (neither argument is changed)."""
        return self.combine(older, newer)

    def copy(self, acc: Any) -> Any:
        """A copy of ``acc`` that later in-place combines of ``acc`` leave alone."""
        return acc

    def restore(self, acc: Any) -> Any:
        """``acc`` from a checkpoint (possibly written by an older version) in today's layout."""
        return acc

    def remove(self, acc: Any, p: Any) -> Any:
        """Take a partial out again (kept for aggregations written against it; unused)."""
        return tuple(aligned_sub(a, b) for a, b in zip(acc, p))

    def result(self, acc: Any) -> Any:
        raise NotImplementedError

    def from_streamz_start(self, start: Any) -> Any:
        """The accumulator for a ``start=`` in streamz's form (e.g. ``sum(start=10)``), or None."""
        return None

    def deferrable(self, columns: pd.Index) -> frozenset[Hashable]:
        """The columns (of ``columns``) a running aggregation may take in the batch's own dtype.

        For those, :meth:`converted` turns the partial of the batch as it is
        into the partial of the batch converted to the schema's dtypes (see
        :func:`rivermark.dataframe.schema.conform_deferring`); none by default.
        """
        return frozenset()

    def converted(self, p: Any, deferred: dict[Hashable, Dtype], acc: Any) -> Any:
        """``p``, the partial of a batch with ``deferred``'s columns unconverted, for ``acc``.

        What :meth:`combine` makes of ``acc`` and the result must be what it
        makes of ``acc`` and the partial of the converted batch.
        """
        return p

    def signature(self) -> str:
        return type(self).__name__

    def example_result(self, example: pd.DataFrame | pd.Series) -> object:
        """What the aggregation emits for ``example`` (used to type the output)."""
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return self.result(self.combine(None, self.partial(example)))
