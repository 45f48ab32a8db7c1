"""Node state as pandas, where that fits: what ``read()`` gives and ``write_savepoint`` takes back.

Two forms, each given only where it turns back into exactly the state it
came from:

* **Keyed state** (a :class:`rivermark.KeyedState`: ``frequencies``,
  ``accumulate(..., start=KeyedState())``, a keyed ``partition``, ...): a
  ``pd.Series`` indexed by key when every value is a scalar (a number, a
  string, a bool, ``None``), a ``pd.DataFrame`` with one row per key when
  every value is a record (a dict with string keys, the same keys in
  each).  A dtype pandas infers is kept when every value comes back as the
  same Python object (type included); otherwise the Series or DataFrame
  holds the objects themselves (``dtype=object``).  Keyed state of other
  values (tuples, lists, objects) stays a dict.
* **A node whose state has a pandas form of its own**: a part of the state
  that implements :class:`PandasForm` gives the whole state's.  A running
  DataFrame groupby aggregation gives the value it emits (``sum``,
  ``count``, ``size``, ``min``, ``max``: a Series or DataFrame indexed by
  the group keys), or the running parts the value is computed from where
  the value alone cannot go on (``mean``: ``sum`` and ``count``; ``var``
  and ``std``: ``count``, ``mean`` and ``m2``, as the outer level of the
  columns).  A node that takes that form back implements
  :class:`TakesPandasForm`.

>>> import pandas as pd
>>> keyed_frame({"river": 2, "mark": 1}).to_dict()
{'river': 2, 'mark': 1}
>>> keyed_frame({"a": {"n": 1, "sum": 2.5}, "b": {"n": 2, "sum": 4.0}})
   n  sum
a  1  2.5
b  2  4.0
>>> keyed_frame({"a": (1, 2)})  # not scalars, not records: stays a dict
{'a': (1, 2)}
>>> keyed_dict(pd.Series({"river": 2, "mark": 1}))
{'river': 2, 'mark': 1}
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol, runtime_checkable

from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "PandasForm",
    "TakesPandasForm",
    "as_pandas",
    "is_pandas",
    "keyed_dict",
    "keyed_frame",
    "require_pandas",
]


@runtime_checkable
class PandasForm(Protocol):
    """A part of a node's state that gives the whole state's pandas form (see module docs)."""

    def pandas_form(self, state: Mapping[str, Any]) -> Any:
        """The pandas form of ``state`` (the node's, this part among it), or ``None``."""


@runtime_checkable
class TakesPandasForm(Protocol):
    """A stateful node that turns its state's pandas form back into its state."""

    def state_from_pandas(self, value: object) -> object:
        """The node's state (as its ``get_state()`` gives it) from its pandas form ``value``."""


def require_pandas(what: str) -> Any:
    """The pandas module, or one line saying what needs it and what to do."""
    try:
        import pandas as pd
    except ImportError:
        raise ConfigurationError(
            f"{what} gives state as pandas, which is not installed: pip install "
            "'rivermark[dataframe]', or pass as_pandas=False for plain Python objects"
        ) from None
    return pd


def is_pandas(value: object) -> bool:
    """Whether ``value`` is a pandas Series or DataFrame (pandas is not imported for this)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(value, (pd.Series, pd.DataFrame))


def as_pandas(state: Any, keyed: Collection[str]) -> Any:
    """A node's ``state`` with pandas where that fits; ``keyed``: its keyed attributes."""
    if not isinstance(state, dict):
        return state
    for part in state.values():
        if isinstance(part, PandasForm):
            form = part.pandas_form(state)
            if form is not None:
                return form
    return {
        a: keyed_frame(v) if a in keyed and isinstance(v, dict) else v for a, v in state.items()
    }


def _same(a: Any, b: Any) -> bool:
    """The same Python value of the same type (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _exact(values: Mapping[object, object], form: object) -> bool:
    back = keyed_dict(form)
    return len(back) == len(values) and all(
        _same(k, j) and _same(v, w) for (k, v), (j, w) in zip(values.items(), back.items())
    )


_SCALARS = (bool, int, float, str, bytes, type(None))


def _is_record(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) for k in v)


def keyed_frame(values: dict[Any, Any]) -> Any:
    """``values`` (a keyed state's content) as a Series or DataFrame, or as it is (module docs)."""
    pd = require_pandas("read(as_pandas=True)")
    keys = list(values)
    index = pd.Index(keys, tupleize_cols=False) if keys else pd.Index([], dtype=object)
    rows = list(values.values())
    tries: list[Callable[[], Any]]
    if all(isinstance(v, _SCALARS) for v in rows):
        tries = [
            lambda: pd.Series(rows, index=index, dtype=None if rows else object),
            lambda: pd.Series(rows, index=index, dtype=object),
        ]
    elif rows and all(_is_record(v) and list(v) == list(rows[0]) for v in rows):
        columns = list(rows[0])
        tries = [
            lambda: pd.DataFrame.from_records(rows, index=index, columns=columns),
            lambda: pd.DataFrame(
                {c: pd.Series([r[c] for r in rows], dtype=object) for c in columns}
            ).set_axis(index),
        ]
    else:
        return values
    for make in tries:
        try:
            form = make()
        except (TypeError, ValueError):
            continue
        if _exact(values, form):
            return form
    return values


def keyed_dict(form: Any) -> dict[Any, Any]:
    """A keyed state's content from its pandas form: key -> value (a Series) or record (a DataFrame)."""
    pd = require_pandas("write_savepoint")
    keys = form.index.tolist()
    if isinstance(form, pd.Series):
        return dict(zip(keys, form.tolist()))
    if isinstance(form, pd.DataFrame):
        columns = list(form.columns)
        if not columns:
            return {k: {} for k in keys}
        values = [form[c].tolist() for c in columns]
        return {k: dict(zip(columns, row)) for k, row in zip(keys, zip(*values))}
    raise TypeError(
        f"a keyed state's pandas form is a Series or a DataFrame, got {type(form).__name__}"
    )
