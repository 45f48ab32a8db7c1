"""The schema policy: every batch is matched to the DataFrame's example.

Applied by each stateful DataFrame node to every batch it receives, however
the batch arrives (``sdf.emit``, the upstream stream, a restored job), so
that no aggregation ever works on a batch unlike its example:

- columns are matched by **name**: a batch with the example's columns in
  another order is reordered; a missing or extra column raises
  :class:`ColumnsError`;
- the first non-empty batch fixes each column's dtype: the dtype pandas gives
  for the example and that batch together (``pd.concat([example.iloc[:0],
  batch])``: the example takes part as an empty leading batch would), numpy
  numbers widened to 64 bits as pandas' sums are (the node keeps it in its
  checkpointed state).  An untyped example (``pd.DataFrame({"x": []})``,
  float64 columns) makes int data float64, as the same data concatenated
  after it are (a Series is concatenated as a one-column frame, as pandas
  2.2 leaves an empty Series out of that choice).  A typed example
  (``df.iloc[:0]``) keeps the data's dtype;
- a later batch whose column has another dtype is converted to the first
  dtype only when the conversion is a safe widening and every value survives
  it exactly (``int32`` into ``int64``, ints into ``float64`` below 2**53,
  ``float32`` into ``float64``, values among a categorical's categories,
  strings between ``object`` and ``str``; numpy bools into ``float64``, as an
  untyped example makes them; anything into ``object``);
  otherwise :class:`SchemaError` names the column and both dtypes (a float
  batch into an int column, the ``a=[1]`` then ``a=[0.5]`` case, is refused:
  declare the column float64 from the start);
- an empty batch takes the kept dtypes (it has no value to lose).

A node whose result is the same either way may take a column in the batch's
own dtype and convert only its small result (:func:`conform_deferring`):
numpy ints bound for a float64 column when the batch's magnitudes add up to
at most 2**53, so every sum of them, and so every sum, mean, minimum and
maximum, is exact in both dtypes.  A batch beyond that bound is converted
(or refused) as above.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Collection, Hashable
from typing import TypeAlias, cast

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype, is_string_dtype

from rivermark.errors import RivermarkError

logger = logging.getLogger(__name__)

#: a column's dtype: numpy's, or a pandas extension dtype
Dtype: TypeAlias = "np.dtype[np.generic] | pd.api.extensions.ExtensionDtype"
#: what a node keeps: the dtypes of a DataFrame's columns, or a Series' dtype
Schema: TypeAlias = "pd.Series | Dtype"

__all__ = [
    "SchemaError",
    "ColumnsError",
    "conform",
    "conform_deferring",
    "check_dtypes",
    "DtypePlan",
    "exact_sums_in_float64",
    "first_schema",
]


class SchemaError(RivermarkError, TypeError):
    """A batch emitted into a streaming DataFrame does not match its example."""


class ColumnsError(SchemaError, IndexError):
    """A batch's columns differ from the example's (an ``IndexError`` as in streamz)."""


def _is_object(dtype: Dtype) -> bool:
    # optional: a pandas extension dtype may have no numpy kind
    return getattr(dtype, "kind", None) == "O" and not isinstance(dtype, pd.CategoricalDtype)


_REMEDY = (
    "declare the column's dtype once for all batches (cast them upstream, e.g. with "
    "sdf.astype({...}) before the aggregation)"
)


def _exact(values: pd.Series, dtype: Dtype) -> pd.Series | None:
    """``values`` as ``dtype`` if no value changes, else None."""
    try:
        out = values.astype(dtype)
        if isinstance(dtype, pd.CategoricalDtype):
            # a value outside the categories would become missing
            ok = bool((out.isna() == values.isna()).all())
        else:
            back = out.astype(values.dtype)
            ok = bool(((back == values) | (back.isna() & values.isna())).all())
    except (TypeError, ValueError, OverflowError):
        return None
    return out if ok else None


#: the largest integer magnitude below which every integer is a float64 exactly
_FLOAT64_EXACT = 2**53


def _widen_numpy(values: pd.Series, have: Dtype, dtype: Dtype) -> pd.Series | None:
    """``values`` widened between plain numpy dtypes without a round trip, or None.

    A widening within one kind (``int32`` to ``int64``, ``float32`` to
    ``float64``) keeps every value; ints become float64 exactly when every
    magnitude is at most 2**53 (one min/max instead of converting back).
    Anything else (extension dtypes, other targets) is left to the round trip.
    """
    if not isinstance(have, np.dtype) or not isinstance(dtype, np.dtype):
        return None
    if have.kind == dtype.kind and have.kind in "iuf":
        return values.astype(dtype)
    if have.kind in "iu" and dtype == np.float64:
        arr = values.to_numpy()
        if len(arr) and (arr.min() < -_FLOAT64_EXACT or arr.max() > _FLOAT64_EXACT):
            return None
        return values.astype(dtype)
    return None


def convert_column(values: pd.Series, dtype: Dtype) -> pd.Series | None:
    """``values`` converted exactly to ``dtype``, or None when that is not allowed.

    Allowed: the same dtype; a numeric dtype that widens safely (``int32`` to
    ``int64``, ints to ``float64``, ``float32`` to ``float64``) when every
    value round-trips; values among a categorical's categories; strings
    between ``object`` and ``str``; anything into ``object``; ``bool`` into
    ``float64`` (the dtype an untyped example gives bool data).

    >>> convert_column(pd.Series([1, 2], dtype="int32"), np.dtype("int64")).dtype
    dtype('int64')
    >>> convert_column(pd.Series([0.5]), np.dtype("int64")) is None
    True
    """
    have = values.dtype
    if have == dtype or _is_object(dtype):
        return values
    if isinstance(dtype, pd.CategoricalDtype):
        return _exact(values, dtype)
    if is_bool_dtype(have) and dtype == np.float64 and isinstance(have, np.dtype):
        # what pd.concat makes of bool data after an untyped (float64) example: 0.0 and 1.0
        return values.astype(dtype)
    if is_bool_dtype(have) or is_bool_dtype(dtype):
        return None
    if is_numeric_dtype(have) and is_numeric_dtype(dtype):
        if not np.can_cast(have, dtype, casting="safe"):
            return None
        fast = _widen_numpy(values, have, dtype)
        return fast if fast is not None else _exact(values, dtype)
    if (
        is_string_dtype(dtype)
        and (_is_object(have) or is_string_dtype(have))
        and values.map(lambda v: isinstance(v, str) or v is None or v is pd.NA or v != v).all()
    ):
        return _exact(values, dtype)
    return None


def _widest(dtype: Dtype) -> Dtype:
    """The 64-bit dtype of a numpy int/uint/float dtype (what the schema keeps)."""
    if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
        return np.dtype({"i": "int64", "u": "uint64", "f": "float64"}[dtype.kind])
    return dtype


def widest(dtypes: Schema) -> Schema:
    """The schema for a first batch's dtypes: numpy numbers widened to 64 bits.

    >>> widest(pd.Series({"a": np.dtype("int32"), "k": np.dtype("O")})).to_dict()
    {'a': dtype('int64'), 'k': dtype('O')}
    """
    if isinstance(dtypes, pd.Series):
        return dtypes.map(_widest)
    return _widest(dtypes)


def first_schema(example: pd.DataFrame | pd.Series, x: pd.DataFrame | pd.Series) -> Schema:
    """The schema fixed by the first non-empty batch ``x``: see the module docs.

    >>> typed = pd.DataFrame({"k": pd.Series([], dtype=object), "x": pd.Series([], dtype="int64")})
    >>> first = pd.DataFrame({"k": ["a"], "x": pd.Series([1], dtype="int32")})
    >>> first_schema(typed, first).to_dict()
    {'k': dtype('O'), 'x': dtype('int64')}
    """
    if isinstance(x, pd.Series):
        # as frames: pandas 2.2 leaves an empty Series out of concat's choice, not a frame
        frames = first_schema(example.rename(0).to_frame(), x.rename(0).to_frame())
        return cast("pd.Series", frames).iloc[0]
    with warnings.catch_warnings():
        # pandas 2.x warns that empty entries will take part in the dtype (as in 3)
        warnings.simplefilter("ignore", FutureWarning)
        joined = pd.concat([example.iloc[:0], x])
    return widest(joined.dtypes)


def _refuse(where: str, col: Hashable, want: Dtype, have: Dtype) -> SchemaError:
    return SchemaError(
        f"{where}: column {col!r} changed dtype from {str(want)!r} (earlier batches) to "
        f"{str(have)!r}, which does not convert exactly; {_REMEDY}"
    )


class _Where:
    """A lazily formatted operation name (formatting costs more than the check)."""

    def __init__(self, make: Callable[[], str]) -> None:
        self.make = make

    def __str__(self) -> str:
        return self.make()


def exact_sums_in_float64(values: pd.Series) -> bool:
    """Whether every sum of ``values`` (numpy ints) is a float64 exactly: magnitudes add up to <= 2**53.

    >>> exact_sums_in_float64(pd.Series([2**52, -(2**52)])), exact_sums_in_float64(pd.Series([2**53, 1]))
    (True, False)
    """
    arr = values.to_numpy()
    if not len(arr):
        return True
    return max(-int(arr.min()), int(arr.max())) * len(arr) <= _FLOAT64_EXACT


#: one column of a :class:`DtypePlan`: (label, kept dtype, batch dtype, may wait)
Step = tuple[Hashable, Dtype, Dtype, bool]


class DtypePlan:
    """What a batch of given dtypes needs, decided once per dtypes (and schema) a node sees.

    For each column whose dtype differs from the schema's (and is not bound
    for ``object``, which takes anything): whether the caller may take it as
    it is (a numpy int bound for float64, in ``defer``); the magnitudes are
    checked per batch.
    """

    #: distinct batch dtypes remembered (streams see a handful)
    LIMIT = 64

    def __init__(self, defer: Collection[Hashable] = ()) -> None:
        self.defer = frozenset(defer)
        self.schema: pd.Series | None = None
        self.plans: dict[tuple[Dtype, ...], list[Step]] = {}

    def steps(self, schema: pd.Series, have: list[Dtype]) -> list[Step]:
        if schema is not self.schema:
            self.schema, self.plans = schema, {}
        key = tuple(have)
        steps = self.plans.get(key)
        if steps is None:
            steps = [
                (col, want, got, self._may_wait(col, got, want))
                for col, want, got in zip(schema.index.tolist(), schema.tolist(), have)
                if want != got and not _is_object(want)
            ]
            if len(self.plans) < self.LIMIT:
                self.plans[key] = steps
        return steps

    def _may_wait(self, col: Hashable, have: Dtype, want: Dtype) -> bool:
        return (
            col in self.defer
            and isinstance(have, np.dtype)
            and have.kind in "iu"
            and want == np.float64
        )


def check_dtypes(
    batch: pd.DataFrame,
    schema: pd.Series,
    where: object,
    plan: DtypePlan | None = None,
    deferred: dict[Hashable, Dtype] | None = None,
    have: list[Dtype] | None = None,
) -> pd.DataFrame:
    """``batch`` with each column converted to the dtype in ``schema`` (or SchemaError).

    With ``plan``, a column it lets wait whose sums are exact in float64 is
    left as it is and recorded in ``deferred`` (column -> the dtype it
    stands for).  ``where`` (formatted only for an error) names the operation;
    ``have``: the batch's dtypes, when the caller has them.
    """
    fixed: dict[Hashable, pd.Series] = {}
    dtypes = batch.dtypes.tolist() if have is None else have
    for col, want, got, may_wait in (plan or DtypePlan()).steps(schema, dtypes):
        values = batch[col]
        if may_wait and deferred is not None and exact_sums_in_float64(values):
            deferred[col] = want
            continue
        conv = convert_column(values, want)
        if conv is None:
            raise _refuse(str(where), col, want, got)
        fixed[col] = conv
    if not fixed:
        return batch
    out = batch.copy(deep=False)
    for col, conv in fixed.items():
        out[col] = conv
    return out


def conform(
    x: pd.DataFrame | pd.Series,
    example: object,
    schema: Schema | None,
    where: str | Callable[[], str],
    with_example: bool = True,
) -> tuple[pd.DataFrame | pd.Series, Schema | None]:
    """``(x, schema)``: ``x`` matched to the example's columns and to ``schema``'s dtypes.

    ``schema`` is the dtypes fixed by the first non-empty batch (None before
    it; :func:`first_schema`, or the batch's own dtypes widened when
    ``with_example`` is false); the returned one is what to keep.  An empty
    batch takes the schema's dtypes (it has no value to lose).  ``where`` (or a function returning it,
    called only for an error) names the operation.

    >>> ex = pd.DataFrame({"k": pd.Series([], dtype=object), "x": pd.Series([], dtype="float64")})
    >>> x, schema = conform(pd.DataFrame({"x": [1.0], "k": ["a"]}), ex, None, "sum()")
    >>> list(x.columns)
    ['k', 'x']
    >>> conform(pd.DataFrame({"k": ["a"]}), ex, schema, "sum()")
    Traceback (most recent call last):
    ...
    rivermark.dataframe.schema.ColumnsError: sum(): batch columns ['k'] differ from the example's ['k', 'x'] (missing ['x']); emit batches with the example's columns
    >>> conform(pd.DataFrame({"k": ["b"], "x": pd.Series(["oops"], dtype=object)}), ex, schema, "sum()")
    Traceback (most recent call last):
    ...
    rivermark.dataframe.schema.SchemaError: sum(): column 'x' changed dtype from 'float64' (earlier batches) to 'object', which does not convert exactly; declare the column's dtype once for all batches (cast them upstream, e.g. with sdf.astype({...}) before the aggregation)
    """
    label: object = _Where(where) if callable(where) else where
    if isinstance(example, pd.DataFrame):
        x, schema, _ = _conform_frame(x, example, schema, label, with_example, None, None)
        return x, schema
    if isinstance(example, pd.Series):
        return _conform_series(x, example, schema, label, with_example)
    return x, schema


def conform_deferring(
    x: pd.DataFrame,
    example: pd.DataFrame,
    schema: pd.Series | None,
    where: Callable[[], str],
    plan: DtypePlan,
) -> tuple[pd.DataFrame, pd.Series | None, dict[Hashable, Dtype]]:
    """:func:`conform` for a DataFrame, leaving the columns ``plan`` lets wait as they are.

    Returns ``(x, schema, deferred)``: ``deferred`` maps each column left in
    the batch's own dtype to the dtype the schema keeps for it (see the
    module docs for when a column may wait); the caller converts what it
    computes from those columns.  ``plan`` is the caller's, kept across batches.

    >>> ex = pd.DataFrame({"k": [], "x": []})
    >>> x, schema, deferred = conform_deferring(
    ...     pd.DataFrame({"k": ["a"], "x": [3]}), ex, None, lambda: "sum()", DtypePlan(["x"]))
    >>> str(x.x.dtype), deferred
    ('int64', {'x': dtype('float64')})
    """
    return _conform_frame(x, example, schema, _Where(where), True, plan, {})


def _conform_frame(
    x: object,
    example: pd.DataFrame,
    schema: pd.Series | None,
    label: object,
    with_example: bool,
    plan: DtypePlan | None,
    deferred: dict[Hashable, Dtype] | None,
) -> tuple[pd.DataFrame, pd.Series | None, dict[Hashable, Dtype]]:
    """:func:`conform` for a streaming DataFrame (``deferred`` as :func:`check_dtypes`)."""
    out: dict[Hashable, Dtype] = {} if deferred is None else deferred
    if not isinstance(x, pd.DataFrame):
        raise SchemaError(f"{label}: expected a pandas.DataFrame batch, got {x!r}")
    batch = _in_example_order(x, example.columns, label)
    if schema is None:
        if not len(batch):
            return batch, None, out
        first = first_schema(example, batch) if with_example else widest(batch.dtypes)
        schema = cast("pd.Series", first)  # a frame's schema: its columns' dtypes
    have = batch.dtypes.tolist()  # lists compare faster than Series.equals
    if have == schema.tolist():
        return batch, schema, out
    if len(batch) == 0:
        return batch.astype(schema.to_dict()), schema, out
    return check_dtypes(batch, schema, label, plan, deferred, have), schema, out


def _in_example_order(x: pd.DataFrame, cols: pd.Index, label: object) -> pd.DataFrame:
    """``x`` with the example's columns in the example's order; other columns are refused."""
    if x.columns.equals(cols):
        return x
    if len(x.columns) != len(cols) or set(x.columns) != set(cols):
        missing = [c for c in cols if c not in x.columns]
        extra = [c for c in x.columns if c not in cols]
        detail = "; ".join(f"{k} {v!r}" for k, v in (("missing", missing), ("extra", extra)) if v)
        raise ColumnsError(
            f"{label}: batch columns {list(x.columns)!r} differ from the example's "
            f"{list(cols)!r} ({detail}); emit batches with the example's columns"
        )
    return x[list(cols)]


def _conform_series(
    x: object, example: pd.Series, schema: Dtype | None, label: object, with_example: bool
) -> tuple[pd.Series, Dtype | None]:
    """:func:`conform` for a streaming Series."""
    if not isinstance(x, pd.Series):
        raise SchemaError(f"{label}: expected a pandas.Series batch, got {x!r}")
    if schema is None:
        if not len(x):
            return x, None
        schema = first_schema(example, x) if with_example else widest(x.dtype)
    if x.dtype != schema and not _is_object(schema):
        if len(x) == 0:
            return x.astype(schema), schema
        conv = convert_column(x, schema)
        if conv is None:
            raise _refuse(str(label), x.name, schema, x.dtype)
        return conv, schema
    return x, schema
