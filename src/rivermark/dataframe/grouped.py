"""Grouped aggregations: :class:`GroupbyAggregation` and its per-key arithmetic.

The accumulator is a :class:`~rivermark.dataframe.partials.KeyedAcc` (the
keys and one numpy array per component).  Run without a window it keeps a
running result per key, whose checkpoints are incremental (see
:mod:`rivermark.dataframe.keyed`).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd

from rivermark.dataframe.base import Aggregation
from rivermark.dataframe.partials import KeyedAcc, merge_moment_arrays, nan_extreme
from rivermark.dataframe.schema import Dtype, exact_sums_in_float64
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["GroupbyAggregation"]


_GROUPBY_HOWS = ("sum", "count", "size", "mean", "var", "std", "min", "max")
_ADDITIVE = ("sum", "count", "size", "mean")
#: the aggregations whose partial of ints is the same converted afterwards (see ``deferrable``)
_DEFERRING = ("sum", "count", "size", "mean", "min", "max")


def _add_comps(a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
    return [x + y for x, y in zip(a, b)]


def _merge_moment_comps(a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
    return list(merge_moment_arrays(a[0], a[1], a[2], b[0], b[1], b[2]))


def _min_comps(a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
    return [nan_extreme(a[0], b[0], np.minimum)]


def _max_comps(a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
    return [nan_extreme(a[0], b[0], np.maximum)]


class GroupbyAggregation(Aggregation):
    """Grouped aggregation: ``how`` in sum, count, size, mean, var, std, min, max.

    ``by`` names the grouping column(s) of the batch; ``selection`` the
    column(s) to aggregate (None: all other columns).  The accumulator is a
    :class:`~rivermark.dataframe.partials.KeyedAcc`: per key, the sums
    (sum, count, size, mean), the moments (var, std) or the extreme (min,
    max).  Without a window, a checkpoint writes the keys changed since the
    previous one (:mod:`rivermark.dataframe.keyed`).  Categorical keys are
    grouped with ``observed=True``.
    ``key_is_index`` says the key column holds the batch's index: as pandas
    does when grouping by an index that has a ``freq``, the keys keep it (and
    a union of contiguous keys keeps it too).

    >>> agg = GroupbyAggregation("sum", by="k", selection="v")
    >>> df = pd.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]})
    >>> agg.result(agg.combine(None, agg.partial(df))).to_dict()
    {'a': 4, 'b': 2}
    """

    keyed = True

    def __init__(
        self,
        how: str,
        by: Any,
        selection: Any = None,
        ddof: int = 1,
        track_size: bool = False,
        index_name: Any = None,
        rename_index: bool = False,
        key_is_index: bool = False,
    ) -> None:
        if how not in _GROUPBY_HOWS:
            raise ConfigurationError(
                f"groupby: unknown aggregation {how!r}; pass one of {', '.join(_GROUPBY_HOWS)}"
            )
        self.how = how
        self.by = by
        self.selection = selection
        self.ddof = ddof
        #: kept for compatibility: keys leave a window with their rows in any case
        self.track_size = track_size
        #: when grouping by a Series, the name its index gets (else the key's own)
        self.index_name = index_name
        self._rename = rename_index
        self.key_is_index = key_is_index
        self._merger = {
            "var": _merge_moment_comps,
            "std": _merge_moment_comps,
            "min": _min_comps,
            "max": _max_comps,
        }.get(how, _add_comps)
        self._layout = "moments" if how in ("var", "std") else how

    def _grouped(self, batch: Any) -> Any:
        by, sel = self.by, self.selection
        if sel is not None and not isinstance(sel, (list, tuple)) and sel not in _as_list(by):
            # one column: grouping the Series by the key column(s) is the cheaper way
            keys = [batch[b] for b in by] if isinstance(by, (list, tuple)) else batch[by]
            return batch[sel].groupby(keys, observed=True)
        g = batch.groupby(by, observed=True)
        return g if sel is None else g[sel]

    def partial(self, batch: Any) -> Any:
        how = self.how
        fast = _counted_sums(batch, self.by, self.selection) if how in _COUNTED else None
        if fast is not None:
            sums, counts = fast
            p0 = {"sum": (sums,), "mean": (sums, counts)}.get(how, (counts,))
            return self._keep_freq(p0, batch.index) if self.key_is_index else p0
        g = self._grouped(batch)
        if how == "mean":
            p: tuple[Any, ...] = (g.sum(), g.count())
        elif how in ("var", "std"):
            n = g.count()
            p = (n, g.mean(), g.var(ddof=0) * n)
        else:
            p = (getattr(g, how)(),)
        return self._keep_freq(p, batch.index) if self.key_is_index else p

    @staticmethod
    def _keep_freq(p: tuple[Any, ...], index: pd.Index) -> tuple[Any, ...]:
        """The partial with the batch's index (and its ``freq``) as keys, where they are equal."""
        # optional: only a DatetimeIndex has freq
        if getattr(index, "freq", None) is None or not p[0].index.equals(index):
            return p
        return tuple(x.set_axis(index.rename(x.index.name)) for x in p)

    def deferrable(self, columns: pd.Index) -> frozenset[Hashable]:
        # sums, means, extremes and counts of ints within 2**53 are the same in float64
        if self.how not in _DEFERRING:
            return frozenset()
        keys = _as_list(self.by)
        return frozenset(c for c in columns if c not in keys)

    def converted(self, p: Any, deferred: dict[Hashable, Dtype], acc: Any) -> Any:
        if self.how in ("count", "size"):
            return p  # counts do not depend on the values' dtype
        first = p[0]
        if (
            acc is not None
            and self.how in _ADDITIVE
            and isinstance(first, pd.Series)
            and acc.comps[0].dtype == deferred.get(first.name)
        ):
            return p  # added in place into the sums of the kept dtype, each int exactly
        return (_astype(first, deferred), *p[1:])

    def from_streamz_start(self, start: Any) -> Any:
        """streamz's form of a grouped ``sum``/``count``/``size``/``min``/``max`` start.

        That is a result the same aggregation emitted: per group, the value
        (a Series for one selected column, a DataFrame for several).
        """
        if self.how not in ("sum", "count", "size", "min", "max"):
            return None
        if not isinstance(start, pd.Series if self.one_column else pd.DataFrame):
            return None
        return KeyedAcc.from_partial((start.copy(),), self._layout)

    @property
    def one_column(self) -> bool:
        """Whether a result is a Series (one column, or ``size``), not a DataFrame."""
        return self.how == "size" or (
            self.selection is not None and not isinstance(self.selection, (list, tuple))
        )

    @property
    def layout(self) -> str:
        """What the accumulator's components are (``rivermark.dataframe.keyed.PARTS``)."""
        return self._layout

    def combine(self, acc: Any, p: Any) -> Any:
        if acc is None:
            return KeyedAcc.from_partial(p, self._layout)
        if self.how in _ADDITIVE:
            acc.add(p)  # in place: the node owns ``acc``
            return acc
        return acc.merge(KeyedAcc.from_partial(p, self._layout), self._merger)

    def merge(self, older: Any, newer: Any) -> Any:
        return older.merge(newer, self._merger)

    def copy(self, acc: Any) -> Any:
        return acc.copy()

    def restore(self, acc: Any) -> Any:
        if not isinstance(acc, KeyedAcc) or self.how not in ("var", "std"):
            return acc
        if acc.__dict__.get("layout") == self._layout:
            return acc
        # the layout before moments: (sum, sum of squares, count)
        x, x2, n = (c.astype("float64") for c in acc.comps[-3:])
        with np.errstate(all="ignore"):
            mean = np.where(n > 0, x / np.where(n > 0, n, 1), 0.0)
            m2 = np.clip(x2 - x * mean, 0, None)
        meta = [acc.meta[-1], acc.meta[-3], acc.meta[-3]]
        return KeyedAcc(acc.keys, [n, mean, m2], meta, self._layout)

    def result(self, acc: Any) -> Any:
        out = self._result(acc)
        if self._rename:
            out = out.rename_axis(self.index_name)
        return out

    def _result(self, acc: Any) -> Any:
        comps, meta = acc.comps, acc.meta
        how = self.how
        if how in ("sum", "count", "size", "min", "max"):
            return acc.wrap(comps[0].copy(), meta[0], keep_dtypes=True)
        if how == "mean":
            total, n = comps
            with np.errstate(divide="ignore", invalid="ignore"):
                return acc.wrap(total.astype("float64") / n, meta[0])
        n, _, m2 = comps
        denom = n - self.ddof
        with np.errstate(divide="ignore", invalid="ignore"):
            out = m2 / np.where(denom > 0, denom, np.nan)
        if how == "std":
            out = np.sqrt(out)
        return acc.wrap(out, meta[0])

    def signature(self) -> str:
        return f"Groupby({self.how}, by={self.by!r}, selection={self.selection!r})"


#: the aggregations :func:`_counted_sums` answers
_COUNTED = ("sum", "mean", "count", "size")


def _counted_sums(batch: pd.DataFrame, by: Any, sel: Any) -> tuple[pd.Series, pd.Series] | None:
    """Per-key sums and row counts of an int64 column by one ``factorize`` and ``np.bincount``.

    Only where that is pandas' answer: one key column of ints, strings or
    objects (``pd.factorize(keys, sort=True)`` is how pandas' groupby finds
    and orders the groups; missing keys are left out as it does), and one
    int64 column whose magnitudes add up to at most 2**53, so that the
    float64 sums of ``bincount`` are the exact int sums.  None otherwise
    (the caller asks pandas).  An int column has no missing value: its
    count is the group's size.
    """
    if isinstance(by, (list, tuple)) or sel is None or isinstance(sel, (list, tuple)) or sel == by:
        return None
    values = batch[sel]
    keys = batch[by]
    kind = keys.dtype
    plain = isinstance(kind, np.dtype) and kind.kind in "iuO"
    if values.dtype != np.int64 or not (plain or isinstance(kind, pd.StringDtype)):
        return None
    if not exact_sums_in_float64(values):
        return None
    perm: Any = None
    try:
        if kind == np.dtype(object):
            codes, uniques = pd.factorize(keys, sort=True)
        else:
            # ints and strings: factorize in order of appearance and place the few
            # groups in sorted order here (pandas' sort=True remaps every code,
            # the larger cost); numpy orders ints as pandas does, and strings by
            # code point as pandas' (Arrow's) sort of strings does
            codes, uniques = pd.factorize(keys)
            perm, index = _sorted_groups(uniques, by)
    except TypeError:  # keys pandas cannot order: its own groupby says so
        return None
    arr = values.to_numpy()
    if len(codes) and codes.min() < 0:
        kept = codes >= 0
        codes, arr = codes[kept], arr[kept]
    n = len(uniques)
    if perm is not None:
        codes = perm[codes]  # the codes of the sorted groups
    else:
        # pandas infers the dtype of object keys' groups (strings, ints, ...), as a list's
        index = pd.Index(uniques.tolist() if kind == np.dtype(object) else uniques, name=by)
    sums = np.bincount(codes, weights=arr, minlength=n).astype(np.int64)
    counts = np.bincount(codes, minlength=n).astype(np.int64)
    return pd.Series(sums, index=index, name=sel), pd.Series(counts, index=index, name=sel)


#: sets of group keys seen lately -> (the keys sorted as an Index, key -> position)
_GROUPS: dict[tuple[Any, Any, frozenset[Any]], tuple[pd.Index, dict[Any, int]]] = {}
#: at most this many sets are remembered, each of at most _GROUPS_KEYS keys
_GROUPS_LIMIT = 64
_GROUPS_KEYS = 4096


def _sorted_groups(uniques: Any, by: Any) -> tuple[np.ndarray, pd.Index]:
    """``(perm, keys)``: each group of ``uniques``' position among them sorted, and them sorted.

    ``keys`` is an Index named ``by``.

    Batches of a stream mostly hold the same few keys in another order of
    appearance: the sorted Index of a set of keys is made once and shared
    (an Index is immutable), so aligning it with the running result costs
    nothing.
    """
    values = np.asarray(uniques, dtype=object)
    small = len(values) <= _GROUPS_KEYS
    token = (by, uniques.dtype, frozenset(values.tolist())) if small else None
    known = _GROUPS.get(token) if token is not None else None
    if known is None:
        order = np.argsort(values, kind="stable")
        index = pd.Index(uniques[order], name=by)
        known = (index, {k: i for i, k in enumerate(values[order].tolist())})
        if token is not None:
            if len(_GROUPS) >= _GROUPS_LIMIT:
                _GROUPS.clear()
            _GROUPS[token] = known
    index, where = known
    perm = np.fromiter((where[k] for k in values.tolist()), dtype=np.intp, count=len(values))
    return perm, index


def _astype(x: Any, dtypes: dict[Any, Any]) -> Any:
    """``x`` (a per-key Series or DataFrame) with its columns in ``dtypes`` converted."""
    if isinstance(x, pd.Series):
        if x.name not in dtypes:
            return x
        # a new Series of the converted values costs a fraction of ``astype``
        return pd.Series(x.to_numpy().astype(dtypes[x.name]), index=x.index, name=x.name)
    cols = {c: d for c, d in dtypes.items() if c in x.columns}
    return x.astype(cols) if cols else x


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]
