"""The arithmetic of partial aggregates: aligned sums, moments, per-key arrays.

Everything here combines two summaries of *disjoint* sets of rows into the
summary of their union, without ever taking rows out again: a window keeps
the summaries of its batches and combines them (see
:class:`~rivermark.dataframe.aggregations.Aggregate`), so no result drifts
through subtraction.

Variance uses the moments ``(count, mean, M2)`` (``M2``: the sum of squared
deviations from the mean) merged as in Chan, Golub and LeVeque's parallel
algorithm, in float64 whatever the input dtype: stable for large values with
a small spread, and free of integer overflow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import pandas as pd

from rivermark.statedata import register_state_class

logger = logging.getLogger(__name__)

__all__ = [
    "Moments",
    "KeyedAcc",
    "aligned_add",
    "aligned_sub",
    "merge_moment_arrays",
    "merge_moments",
    "moments_result",
    "moments_of",
    "nan_extreme",
    "ordered_union_add",
]


#: how :meth:`KeyedAcc.wrap` rebuilds a component: ("S", name, dtype) or ("D", columns, dtypes)
Meta: TypeAlias = "tuple[str, Hashable | pd.Index, object]"


def aligned_add(a: Any, b: Any) -> Any:
    """Add two partials, aligning pandas objects on their index (missing = 0).

    Integer dtypes are kept (``Series.add(fill_value=0)`` would turn them into floats).

    >>> aligned_add(pd.Series([1, 2], index=["a", "b"]), pd.Series([5], index=["b"])).to_dict()
    {'a': 1, 'b': 7}
    """
    if a is None:
        return b
    if not isinstance(a, (pd.Series, pd.DataFrame)):
        return a + b
    if a.index.equals(b.index):
        return a + b
    idx = a.index.union(b.index)
    return a.reindex(idx, fill_value=0) + b.reindex(idx, fill_value=0)


def aligned_sub(a: Any, b: Any) -> Any:
    """Subtract partial ``b`` from ``a`` (``b``'s index is a subset of ``a``'s)."""
    if not isinstance(a, (pd.Series, pd.DataFrame)):
        return a - b
    if a.index.equals(b.index):
        return a - b
    return a - b.reindex(a.index, fill_value=0)


def ordered_union_add(a: pd.Series, b: pd.Series) -> pd.Series:
    """``a + b`` aligned on the index, keeping ``a``'s order, then ``b``'s new labels.

    The order is first-seen when ``a`` summarises older rows than ``b``.

    >>> ordered_union_add(pd.Series([1, 1], index=["z", "a"]), pd.Series([2, 3], index=["b", "a"]))
    z    1
    a    4
    b    2
    dtype: int64
    """
    if a.index.equals(b.index):
        return a + b
    new = b.index[~b.index.isin(a.index)]
    idx = a.index.append(new)
    if idx.dtype != a.index.dtype and a.index.dtype == b.index.dtype:
        idx = idx.astype(a.index.dtype)  # append may infer a new dtype for object labels
    return a.reindex(idx, fill_value=0) + b.reindex(idx, fill_value=0)


class Moments(NamedTuple):
    """Count, mean and sum of squared deviations of some rows (scalars or per column)."""

    n: Any
    mean: Any
    m2: Any


def moments_of(batch: pd.Series | pd.DataFrame) -> Moments:
    """The moments of a Series (scalars) or DataFrame (per column), in float64.

    >>> moments_of(pd.Series([1, 2, 3, None]))
    Moments(n=3, mean=2.0, m2=2.0)
    """
    n = batch.count()
    mean = batch.mean()
    m2 = ((batch - mean) ** 2).sum()
    if isinstance(batch, pd.Series):
        return Moments(int(n), float(mean), float(m2))
    return Moments(n, mean.astype("float64"), m2.astype("float64"))


def merge_moment_arrays(
    na: np.ndarray, ma: np.ndarray, m2a: np.ndarray, nb: np.ndarray, mb: np.ndarray, m2b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chan et al.'s pairwise update on numpy arrays (a side with no rows is ignored)."""
    n = na + nb
    with np.errstate(all="ignore"):
        frac = np.where(n > 0, nb / np.where(n > 0, n, 1), 0.0)
        delta = mb - ma
        mean = np.where(na == 0, mb, np.where(nb == 0, ma, ma + delta * frac))
        m2 = np.where(na == 0, m2b, np.where(nb == 0, m2a, m2a + m2b + delta * delta * na * frac))
    return n, mean, m2


def merge_moments(a: Moments, b: Moments) -> Moments:
    """The moments of the union of the rows summarised by ``a`` and ``b``.

    >>> m = merge_moments(moments_of(pd.Series([1e9 + 0.1, 1e9 + 0.2])), moments_of(pd.Series([1e9 + 0.3])))
    >>> round(m.m2 / (m.n - 1), 6)
    0.01
    """
    if isinstance(a.n, pd.Series):
        if not a.n.index.equals(b.n.index):
            idx = a.n.index.union(b.n.index)
            a = Moments(*(x.reindex(idx, fill_value=0) for x in a))
            b = Moments(*(x.reindex(idx, fill_value=0) for x in b))
        n, mean, m2 = merge_moment_arrays(
            a.n.to_numpy(), a.mean.to_numpy(), a.m2.to_numpy(),
            b.n.to_numpy(), b.mean.to_numpy(), b.m2.to_numpy(),
        )  # fmt: skip
        idx = a.n.index
        return Moments(
            pd.Series(n, index=idx), pd.Series(mean, index=idx), pd.Series(m2, index=idx)
        )
    n, mean, m2 = merge_moment_arrays(a.n, a.mean, a.m2, b.n, b.mean, b.m2)
    return Moments(int(n), float(mean), float(m2))


def moments_result(m: Moments, ddof: int, sqrt: bool) -> Any:
    """Variance (or standard deviation) from moments; NaN where ``n - ddof <= 0``."""
    denom = m.n - ddof
    if isinstance(denom, pd.Series):
        with np.errstate(all="ignore"):
            out = m.m2 / denom.where(denom > 0)
        return out**0.5 if sqrt else out
    if denom <= 0:
        return float("nan")
    var = m.m2 / denom
    return var**0.5 if sqrt else var


def nan_extreme(
    a: np.ndarray, b: np.ndarray, op: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """Element-wise ``op`` (np.minimum/np.maximum) of ``a`` and ``b``, skipping missing values.

    >>> nan_extreme(np.array([1.0, np.nan, np.nan]), np.array([0.5, 2.0, np.nan]), np.minimum)
    array([0.5, 2. , nan])
    """
    na, nb = pd.isna(a), pd.isna(b)
    if not na.any() and not nb.any():
        return op(a, b)
    out = np.where(na, b, a)
    both = ~na & ~nb
    if both.any():
        out[both] = op(a[both], b[both])
    return out


def _add_into(c: np.ndarray, pos: slice | np.ndarray, v: np.ndarray) -> np.ndarray:
    dtype = np.result_type(c.dtype, v.dtype)
    if dtype == c.dtype:
        # in place (ints into float64 sums too: numpy converts each as ``astype`` would)
        c[pos] += v
        return c
    out = c.astype(dtype)
    out[pos] += v
    return out


#: merges the component arrays of two keyed accumulators on their common keys
Merger = Callable[[list[np.ndarray], list[np.ndarray]], list[np.ndarray]]


def _values(x: pd.Series | pd.DataFrame) -> np.ndarray:
    """A partial's values; a DataFrame of mixed dtypes as objects (no int goes through float)."""
    if isinstance(x, pd.DataFrame) and x.dtypes.nunique() > 1:
        return np.asarray(x.to_numpy(dtype=object))
    return np.asarray(x.to_numpy())


class KeyedAcc:
    """A grouped accumulator: the keys (a pandas Index) and one numpy array per component.

    Additive components are updated in place with numpy (pandas arithmetic
    costs more than the aggregation itself for small groups); other merges
    (moments, minimum, maximum) go through :meth:`merge`.  The node copies
    an accumulator it shares (snapshots, window summaries).

    >>> acc = KeyedAcc.from_partial([pd.Series([1, 2], index=["a", "b"], name="v")])
    >>> acc.add([pd.Series([5], index=["c"], name="v")])
    >>> acc.wrap(acc.comps[0], acc.meta[0]).to_dict()
    {'a': 1, 'b': 2, 'c': 5}
    """

    def __init__(
        self, keys: pd.Index, comps: list[np.ndarray], meta: list[Meta], layout: str = ""
    ) -> None:
        self.keys = keys
        self.comps = comps
        self.meta = meta
        #: what the components are ("moments": count, mean, M2), for restoring old states
        self.layout = layout

    @classmethod
    def from_partial(cls, p: Sequence[pd.Series | pd.DataFrame], layout: str = "") -> KeyedAcc:
        meta = [
            ("S", x.name, x.dtype) if isinstance(x, pd.Series) else ("D", x.columns, x.dtypes)
            for x in p
        ]
        return cls(p[0].index, [_values(x).copy() for x in p], meta, layout)

    def copy(self) -> KeyedAcc:
        return KeyedAcc(self.keys, [c.copy() for c in self.comps], self.meta, self.layout)

    def _positions(self, idx: pd.Index) -> slice | np.ndarray:
        if idx.equals(self.keys):
            return slice(None)
        pos: np.ndarray = self.keys.get_indexer(idx)
        if (pos < 0).any():
            keys = self.keys.union(idx)
            old = keys.get_indexer(self.keys)
            grown = []
            for c in self.comps:
                g = np.zeros((len(keys),) + c.shape[1:], dtype=c.dtype)
                g[old] = c
                grown.append(g)
            self.keys, self.comps = keys, grown
            pos = keys.get_indexer(idx)
        return pos

    def add(self, p: Sequence[pd.Series | pd.DataFrame]) -> None:
        """Add an additive partial (missing keys count as zero) in place."""
        pos = self._positions(p[0].index)
        self.comps = [_add_into(c, pos, _values(x)) for c, x in zip(self.comps, p)]

    def sub(self, p: Sequence[pd.Series | pd.DataFrame]) -> None:
        pos = self._positions(p[0].index)
        self.comps = [_add_into(c, pos, -_values(x)) for c, x in zip(self.comps, p)]

    def merge(self, other: KeyedAcc, merger: Merger) -> KeyedAcc:
        """A new accumulator of both; ``merger`` combines the components of common keys.

        Neither ``self`` nor ``other`` is changed.
        """
        if self.keys.equals(other.keys):
            return KeyedAcc(self.keys, merger(self.comps, other.comps), self.meta, self.layout)
        keys = self.keys.union(other.keys)
        ia = keys.get_indexer(self.keys)
        ib = keys.get_indexer(other.keys)
        in_a = np.zeros(len(keys), dtype=bool)
        in_a[ia] = True
        common = in_a[ib]
        comps: list[np.ndarray] = []
        for ca, cb in zip(self.comps, other.comps):
            dtype = ca.dtype if ca.dtype == cb.dtype else np.result_type(ca.dtype, cb.dtype)
            out = np.zeros((len(keys),) + ca.shape[1:], dtype=dtype)
            out[ia] = ca
            out[ib[~common]] = cb[~common]
            comps.append(out)
        if common.any():
            at = ib[common]
            merged = merger([c[at] for c in comps], [c[common] for c in other.comps])
            for c, m in zip(comps, merged):
                c[at] = m
        return KeyedAcc(keys, comps, self.meta, self.layout)

    def wrap(
        self, values: np.ndarray, meta: Meta, keep_dtypes: bool = False
    ) -> pd.Series | pd.DataFrame:
        kind, label, dtypes = meta
        if kind == "S":
            # an object array stays object (pandas 3 would infer ``str`` from strings)
            keep = values.dtype if values.dtype == object else None
            series = pd.Series(values, index=self.keys, name=label, dtype=keep)
            if keep_dtypes and dtypes is not None and series.dtype != dtypes:
                series = series.astype(dtypes)
            return series
        out = pd.DataFrame(values, index=self.keys, columns=label)
        # a mixed int/float frame went through one array: give the dtypes back
        return out.astype(dtypes) if keep_dtypes else out

    def __repr__(self) -> str:
        return f"<KeyedAcc keys={len(self.keys)} comps={len(self.comps)}>"


# the partials of running aggregations: checkpoints write them as data
register_state_class(Moments, ("n", "mean", "m2"))
register_state_class(KeyedAcc, ("keys", "comps", "meta", "layout"))
