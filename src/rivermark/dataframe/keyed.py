"""Incremental checkpoints of a running grouped aggregation.

A running (not windowed) groupby aggregation keeps its per-key partials in
a :class:`~rivermark.dataframe.partials.KeyedAcc`: the keys and one numpy
array per component, updated a batch at a time.  :class:`KeyedPartials`
gives the node a :class:`~rivermark.KeyedState` of the same partials (key ->
its value of the one component, or a tuple of its values of each), so that a checkpoint writes only the keys changed
since the previous one (see "Keyed state" in ``docs/checkpointing.md``):

* per batch, :meth:`KeyedPartials.note` keeps the batch's keys (a pandas
  Index; O(1), no Python loop over keys);
* at a checkpoint's barrier, :meth:`KeyedPartials.sync` writes the current
  values of those keys into the ``KeyedState`` (O(keys changed since the
  last barrier)), and the job takes the changes as a delta;
* on restore, :func:`restore_acc` rebuilds the arrays from the
  ``KeyedState`` and the small :class:`KeyedLayout` (index and component
  dtypes) kept beside it.

The arrays stay the truth the results are computed from; the ``KeyedState``
is a copy of them as of the last barrier (it exists only once a
checkpoint asked for it).

>>> import pandas as pd
>>> acc = KeyedAcc.from_partial([pd.Series([1, 2], index=["a", "b"], name="v")])
>>> book = KeyedPartials()
>>> book.note(acc.keys)
>>> state = book.sync(acc)
>>> dict(state)
{'a': 1, 'b': 2}
>>> acc.add([pd.Series([5], index=["b"], name="v")]); book.note(pd.Index(["b"]))
>>> _ = state.take_delta()  # the first checkpoint: all of it
>>> book.sync(acc).take_delta().changes  # the next one: the changed key
{'b': 7}
>>> restore_acc(book.layout(acc), state).wrap(acc.comps[0], acc.meta[0]).to_dict()
{'a': 1, 'b': 7}
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from rivermark.dataframe.partials import KeyedAcc, Meta
from rivermark.state import KeyedState, KeyedStore
from rivermark.statedata import register_state_class

logger = logging.getLogger(__name__)

__all__ = ["KeyedLayout", "KeyedPartials", "PARTS", "parts_frame", "parts_of", "restore_acc"]


@dataclass(frozen=True)
class KeyedLayout:
    """What a ``KeyedAcc`` is besides its per-key values (O(columns), not O(keys)).

    ``template`` is the keys' index emptied (its type, dtype and names),
    ``freq`` the keys' frequency (a datetime key that has one), ``dtypes``
    and ``tails`` each component array's dtype and shape after the first
    axis (a DataFrame partial has one value per column).
    """

    template: pd.Index
    freq: pd.DateOffset | None
    dtypes: tuple[np.dtype[np.generic], ...]
    tails: tuple[tuple[int, ...], ...]
    meta: list[Meta]
    layout: str

    def pandas_form(self, state: Mapping[str, object]) -> pd.Series | pd.DataFrame | None:
        """The pandas form of a running grouped aggregation's ``state`` (see ``parts_frame``).

        What ``rivermark.checkpoint.read()`` gives for the node; ``None`` for
        a state that holds no per-key partials.
        """
        partials = state.get("partials")
        if not isinstance(partials, Mapping) or state.get("parts"):
            return None
        return parts_frame(restore_acc(self, partials))


#: the names of an accumulator's components where its result is not one of them
PARTS = {"mean": ("sum", "count"), "moments": ("count", "mean", "m2")}


def parts_frame(acc: KeyedAcc) -> pd.Series | pd.DataFrame | None:
    """``acc`` as pandas, indexed by its keys: its one component, or its components side by side.

    The one component of ``sum``, ``count``, ``size``, ``min`` and ``max``
    is the value the aggregation emits (a Series, or a DataFrame of the
    selected columns); the components of ``mean`` (``sum``, ``count``) and
    of ``var`` and ``std`` (``count``, ``mean``, ``m2``) are the outer level
    of a DataFrame's columns, the selected columns the inner one.

    >>> acc = KeyedAcc.from_partial(
    ...     [pd.Series([4.0, 2.0], index=["a", "b"], name="v"), pd.Series([2, 1], index=["a", "b"], name="v")],
    ...     "mean",
    ... )
    >>> parts_frame(acc)
       sum count
         v     v
    a  4.0     2
    b  2.0     1
    """
    parts = [acc.wrap(c.copy(), m, keep_dtypes=True) for c, m in zip(acc.comps, acc.meta)]
    names = PARTS.get(acc.layout)
    if names is None or len(names) != len(parts):
        return parts[0] if len(parts) == 1 else None
    frames = [x.to_frame() if isinstance(x, pd.Series) else x for x in parts]
    return pd.concat(frames, axis=1, keys=list(names))


def parts_of(
    value: pd.DataFrame | pd.Series, layout: str, one: bool
) -> list[pd.Series | pd.DataFrame]:
    """The components of an accumulator in ``layout`` from its pandas form (:func:`parts_frame`).

    ``one``: each component is a Series (one column selected).  ``ValueError``
    when ``value`` is not such a form.
    """
    names = PARTS.get(layout)
    if names is None:
        kind = pd.Series if one else pd.DataFrame
        if not isinstance(value, kind):
            raise ValueError(f"a {kind.__name__} indexed by the group keys")
        return [value]
    columns = value.columns if isinstance(value, pd.DataFrame) else None
    if not isinstance(columns, pd.MultiIndex) or set(columns.get_level_values(0)) != set(names):
        listed = ", ".join(repr(n) for n in names)
        raise ValueError(
            f"a DataFrame indexed by the group keys whose columns are {listed}, each over the "
            "selected columns"
        )
    parts = [value[n] for n in names]
    return [x.iloc[:, 0] for x in parts] if one else parts


class KeyedPartials:
    """The per-key partials of a running ``KeyedAcc`` as a :class:`~rivermark.KeyedState`.

    The node calls :meth:`note` with each batch's keys and, when a
    checkpoint takes its state, :meth:`sync`.  The keys noted since the last
    sync are kept as the batches' indexes; when they outnumber twice the
    accumulator's keys they are merged into one index of distinct keys.
    """

    def __init__(self, state: KeyedStore | None = None) -> None:
        #: key -> the key's component value (a tuple of them for several), as of the last sync
        self.state: KeyedStore = KeyedState() if state is None else state
        self._noted: list[pd.Index] = []
        self._noted_len = 0

    def note(self, keys: pd.Index, bound: int = 0) -> None:
        """The partials of ``keys`` changed (O(1) but once per ``bound`` noted keys).

        ``bound`` is the accumulator's number of keys: when more keys than
        twice that are noted, they are merged into one index of distinct keys.
        """
        self._noted.append(keys)
        self._noted_len += len(keys)
        if self._noted_len > max(2 * bound, 1024) and len(self._noted) > 1:
            merged = self._noted[0].append(self._noted[1:]).unique()
            self._noted, self._noted_len = [merged], len(merged)

    def sync(self, acc: KeyedAcc | None) -> KeyedStore:
        """The ``KeyedState``, with the current values of the keys noted since the last sync."""
        noted, self._noted, self._noted_len = self._noted, [], 0
        if acc is None or not noted:
            return self.state
        keys = noted[0].append(noted[1:]) if len(noted) > 1 else noted[0]
        pos = acc.keys.get_indexer(keys)
        marked = np.zeros(len(acc.keys), dtype=bool)
        marked[pos[pos >= 0]] = True
        # in the order of the accumulator's keys: the order they are restored in
        at = np.flatnonzero(marked)
        self.state.update(zip(acc.keys[at].tolist(), _rows(acc, at)))
        return self.state

    @staticmethod
    def layout(acc: KeyedAcc) -> KeyedLayout:
        """The layout of ``acc`` (kept beside the ``KeyedState`` in a checkpoint)."""
        keys = acc.keys
        template = keys[:0]
        if isinstance(template, pd.MultiIndex):
            template = template.remove_unused_levels()
        return KeyedLayout(
            template,
            # optional: only a DatetimeIndex has freq
            getattr(keys, "freq", None),
            tuple(c.dtype for c in acc.comps),
            tuple(c.shape[1:] for c in acc.comps),
            acc.meta,
            acc.layout,
        )


def _rows(acc: KeyedAcc, at: np.ndarray) -> list[object]:
    """Each key's value at positions ``at``, as Python values (a tuple for several components).

    A component of a DataFrame result has a tuple per key (one value per column).
    """
    columns: list[list[object]] = []
    for c in acc.comps:
        values = c[at].tolist()
        columns.append([tuple(v) for v in values] if c.ndim > 1 else values)
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def restore_acc(layout: KeyedLayout, partials: Mapping[Hashable, object]) -> KeyedAcc:
    """The ``KeyedAcc`` of ``partials`` (key -> component values) in ``layout``.

    The keys are put back in the accumulator's order: sorted, as the union
    of grouped indexes is (or, for keys that cannot be compared, in the
    order they were first written).
    """
    labels = list(partials)
    rows = list(partials.values())
    keys = _index_like(layout, labels)
    order: slice | np.ndarray = slice(None)
    # keys of types that cannot be compared stay in first-seen order
    with contextlib.suppress(TypeError):
        keys, order = keys.sort_values(return_indexer=True)
    keys = _with_freq(keys, layout.freq)
    shapes = list(zip(layout.dtypes, layout.tails))
    if len(shapes) == 1:
        comps = [_column(rows, *shapes[0])[order]]
    else:
        # several components: each key's value is a tuple of them
        tuples = [cast("Sequence[object]", r) for r in rows]
        comps = [_column([r[i] for r in tuples], *shape)[order] for i, shape in enumerate(shapes)]
    return KeyedAcc(keys, comps, layout.meta, layout.layout)


def _index_like(layout: KeyedLayout, labels: list[Hashable]) -> pd.Index:
    template = layout.template
    if not labels:
        return template
    if isinstance(template, pd.MultiIndex):
        index = pd.MultiIndex.from_tuples(labels, names=template.names)
        return index.set_levels(
            [level.astype(t.dtype) for level, t in zip(index.levels, template.levels)]
        )
    return pd.Index(labels, dtype=template.dtype, name=template.name)


def _with_freq(keys: pd.Index, freq: pd.DateOffset | None) -> pd.Index:
    if freq is None or not isinstance(keys, (pd.DatetimeIndex, pd.TimedeltaIndex)):
        return keys
    try:
        return type(keys)(keys, freq=freq)
    except ValueError:  # pragma: no cover - the keys had the freq when written
        return keys


def _column(values: list[object], dtype: np.dtype[np.generic], tail: tuple[int, ...]) -> np.ndarray:
    if dtype.kind == "O" and not tail:
        # element by element: a value that is itself a tuple stays one element
        return np.fromiter(values, dtype=object, count=len(values))
    out = np.array(values, dtype=dtype)
    return out.reshape((len(values),) + tail)


# a grouped aggregation's state: checkpoints write it as data
register_state_class(KeyedLayout, ("template", "freq", "dtypes", "tails", "meta", "layout"))
