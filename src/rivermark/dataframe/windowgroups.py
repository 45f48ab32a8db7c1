"""The groups of a DataFrame batch by key and window, with numpy: one pass per batch.

The windows of a batch (:mod:`rivermark.dataframe.eventwindows`) group the
rows that count by ``(key..., window)`` and merge each group's partial into
its open window.  A ``DataFrame.groupby`` by the key columns and a window
column builds a ``MultiIndex`` and runs pandas' machinery per aggregation;
here the keys are factorized once per batch (``pandas.factorize``, sorted, as
``groupby`` does), combined with the window into one integer per row, and
the groups are the distinct integers in order: the same groups, in the same
order, as ``groupby(sort=True, observed=True, dropna=True)``.  Counts and
sizes are counted with ``numpy.bincount``; sums, means and extremes are
taken by pandas grouped by that one integer (the same rows in the same order
per group as before, so the same values to the last bit).

:class:`Partials` is what a window keeps of its rows per aggregation, and
how two partials combine.

>>> codes = KeyCodes.of([np.array(["b", "a", "b", None], dtype=object)])
>>> g = BatchGroups.of(codes, np.array([3, 3, 4, 3]), np.arange(4))
>>> g.keys, g.windows.tolist(), g.sizes.tolist()
(['a', 'b', 'b'], [3, 3, 4], [1, 1, 1])
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BatchGroups", "KeyCodes", "Partials", "SEQ", "built_in_partials"]

#: the hidden column of a row's arrival number (what a function's values are ordered by)
SEQ = "__rivermark_seq__"

#: above this many combined codes per row, ``numpy.unique`` instead of a count per code
_DENSE = 4


@dataclass(frozen=True)
class KeyCodes:
    """The key columns of a batch factorized: per column, each row's code (-1: missing) and
    the sorted distinct values (an ``Index``)."""

    codes: tuple[np.ndarray, ...]
    uniques: tuple[pd.Index, ...]

    @staticmethod
    def of(columns: Sequence[np.ndarray]) -> KeyCodes:
        """The codes of ``columns`` (each a column's ``to_numpy()``)."""
        codes, uniques = [], []
        for col in columns:
            c, u = pd.factorize(col, sort=True, use_na_sentinel=True)
            codes.append(np.asarray(c, dtype=np.int64))
            uniques.append(pd.Index(u))
        return KeyCodes(tuple(codes), tuple(uniques))


@dataclass(frozen=True)
class BatchGroups:
    """The groups of some rows by ``(key..., window)``, in sorted order.

    ``gid``: each row's group (-1: a row with a missing key, in no group);
    ``keys``: each group's key (the value; a tuple for several key columns;
    None without keys); ``windows``: each group's window index; ``sizes``:
    each group's number of rows.
    """

    gid: np.ndarray
    keys: list[Any]
    windows: np.ndarray
    sizes: np.ndarray

    @staticmethod
    def of(codes: KeyCodes, window: np.ndarray, rows: np.ndarray) -> BatchGroups | None:
        """The groups of ``rows`` (row numbers into the key columns of ``codes``;
        ``window``: each of those rows' window); None when the combined codes would
        not fit an int64 (then pandas' ``groupby`` decides)."""
        n = len(rows)
        if not n:
            return None
        low = int(window.min())
        width = int(window.max()) - low + 1
        combined = window - low
        valid: np.ndarray | None = None
        radix = width
        for c, u in zip(reversed(codes.codes), reversed(codes.uniques)):
            per = c[rows]
            missing = per < 0
            if missing.any():
                valid = ~missing if valid is None else valid & ~missing
            combined = combined + per * radix
            radix *= max(len(u), 1)
            if radix >= 2**62:  # beyond int64: pandas decides
                return None
        gid = np.full(n, -1, dtype=np.int64)
        kept = combined if valid is None else combined[valid]
        if radix <= _DENSE * n + 1024:
            counts = np.bincount(kept, minlength=radix)
            present = np.flatnonzero(counts)
            lookup = np.empty(radix, dtype=np.int64)
            lookup[present] = np.arange(len(present))
            ids = lookup[kept]
            sizes = counts[present]
        else:
            present, ids, sizes = np.unique(kept, return_inverse=True, return_counts=True)
        if valid is None:
            gid = ids.astype(np.int64, copy=False)
        else:
            gid[valid] = ids
        rest, windows = np.divmod(present, width)
        per_column = []
        for u in reversed(codes.uniques):
            rest, code = np.divmod(rest, max(len(u), 1))
            per_column.append(u.take(code).tolist())
        per_column.reverse()
        if not per_column:
            keys: list[Any] = [None] * len(present)
        elif len(per_column) == 1:
            keys = per_column[0]
        else:
            keys = list(zip(*per_column))
        return BatchGroups(gid, keys, windows + low, sizes)


def built_in_partials(
    how: str, groups: BatchGroups, values: Sequence[np.ndarray], rows: np.ndarray
) -> list[Any]:
    """Each group's partial for the built-in aggregation ``how`` (as
    :class:`Partials` keeps it) of the value
    columns ``values`` (each a column's ``to_numpy()``) at row numbers ``rows``."""
    sizes = groups.sizes
    if how == "size":
        return list(sizes.tolist())
    gid = groups.gid
    n_groups = len(sizes)
    if how == "count":
        counted = [
            np.bincount(gid[pd.notna(col[rows]) & (gid >= 0)], minlength=n_groups) for col in values
        ]
        if len(values) == 1:
            return list(zip(counted[0].tolist()))  # one tuple per group
        return list(zip(*(c.tolist() for c in counted)))
    keep = gid >= 0
    data = {i: col[rows[keep]] for i, col in enumerate(values)}
    grouped = pd.DataFrame(data, copy=False).groupby(gid[keep], sort=True)
    if how == "mean":
        sums = _columns(grouped.sum())
        counts = _columns(grouped.count())
        return list(zip(sums, counts))
    return _columns(getattr(grouped, how)())


def _fmin(a: Any, b: Any) -> Any:
    """The smaller of two values, a NaN standing for "no value" (as pandas skips it)."""
    if a != a:
        return b
    if b != b:
        return a
    return b if b < a else a


def _fmax(a: Any, b: Any) -> Any:
    if a != a:
        return b
    if b != b:
        return a
    return b if b > a else a


class Partials:
    """What a window keeps of its rows for aggregation ``how``, per value column.

    ``count``, ``sum``, ``min``, ``max``: a tuple with one number per column;
    ``mean``: the tuples of sums and counts; ``size``: the number of rows; a
    function: the rows' arrival numbers and each column's values (the
    function gets the values in arrival order, as pandas' ``groupby().agg``).
    Every partial is a plain value (checkpoint state).
    """

    def __init__(self, how: str | Callable[[pd.Series], Any], columns: Sequence[Any]) -> None:
        self.how = how
        self.columns = tuple(columns)

    def of_groups(self, grouped: Any, codes: np.ndarray, rows: pd.DataFrame) -> list[Any]:
        """The partial of each group of ``grouped`` (in its order); ``codes``: each row's group."""
        how, cols = self.how, list(self.columns)
        if how == "size":
            return list(grouped.size().tolist())
        if how == "mean":
            sums = _columns(grouped[cols].sum())
            counts = _columns(grouped[cols].count())
            return list(zip(sums, counts))
        if how in ("count", "sum", "min", "max"):
            return _columns(getattr(grouped[cols], str(how))())
        # a function: the values themselves, split by group in one pass
        order = np.argsort(codes, kind="stable")
        order = order[codes[order] >= 0]
        bounds = np.flatnonzero(np.diff(codes[order])) + 1
        parts = [np.split(rows[c].to_numpy()[order], bounds) for c in [SEQ, *cols]]
        return [tuple(tuple(p.tolist()) for p in group) for group in zip(*parts)]

    def combine(self, a: Any, b: Any) -> Any:
        how = self.how
        if how == "size":
            return a + b
        if how == "mean":
            return (_add(a[0], b[0]), _add(a[1], b[1]))
        if how in ("count", "sum"):
            return _add(a, b)
        if how == "min":
            return tuple(_fmin(x, y) for x, y in zip(a, b))
        if how == "max":
            return tuple(_fmax(x, y) for x, y in zip(a, b))
        return tuple(x + y for x, y in zip(a, b))

    def combine_all(self, accs: list[Any], parts: list[Any]) -> list[Any]:
        """:meth:`combine` of each ``acc`` with its ``part`` (the usual shapes in one pass)."""
        how = self.how
        if how == "size":
            return list(map(operator.add, accs, parts))
        if how in ("count", "sum") and len(self.columns) == 1:
            # (a[0] + b[0],) per window, the tuples built by zip
            return list(zip(map(operator.add, map(_first, accs), map(_first, parts))))
        return list(map(self.combine, accs, parts))

    def result(self, acc: Any) -> tuple[Any, ...]:
        """One value per output column."""
        how = self.how
        if how == "size":
            return (acc,)
        if how == "mean":
            return tuple(s / n if n else math.nan for s, n in zip(*acc))
        if isinstance(how, str):
            return tuple(acc)
        seqs = acc[0]
        order = sorted(range(len(seqs)), key=seqs.__getitem__)
        return tuple(how(pd.Series([vals[i] for i in order])) for vals in acc[1:])


#: the first (only) value of a one-column partial
_first = operator.itemgetter(0)


def _columns(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Each row of ``frame`` as a tuple of plain Python values (per column, keeping ints ints)."""
    return list(zip(*(frame[c].tolist() for c in frame.columns)))


def _add(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(x + y for x, y in zip(a, b))
