"""The tagged columnar form of pandas objects in state files (see :mod:`.codec`).

A ``Series``, ``DataFrame`` or ``Index`` (plain, range, datetime without a
time zone, categorical, multi-level) is written as its labels and one
numpy array per column; only numpy dtypes and pandas' string dtypes are
taken (numbers, booleans, times without a time zone, strings and other
objects element by element).  ``CategoricalDtype``, ``Timestamp`` (without
a time zone), ``Timedelta`` and date offsets (an index's ``freq``) are
written by their parts.  A pandas extension dtype on its own (a frame's
schema holds them: ``str``, ``string``, ``Int64``, ``datetime64[ns, UTC]``)
is written by its name when pandas reads that name back as an equal dtype.
Anything else (other
extension dtypes, a time zone) is left to the pickle part of the codec
(``None`` here).
"""

from __future__ import annotations

from typing import Any

__all__ = ["encode_pandas", "decode_pandas"]


#: pandas' string dtypes, written as their values (objects) and the dtype's name
_STRING_DTYPES = ("str", "string")


def _numpy_dtype(dtype: Any) -> bool:
    import numpy as np

    if isinstance(dtype, np.dtype):
        return dtype.kind in "biufcmMOSU" and dtype.fields is None
    return str(dtype) in _STRING_DTYPES


def _values(column: Any) -> dict[str, Any]:
    """A column's (or index's) values: a numpy array, and a string dtype's name."""
    import numpy as np

    if isinstance(column.dtype, np.dtype):
        return {"values": column.to_numpy(), "dtype": None}
    return {"values": column.to_numpy(dtype=object), "dtype": str(column.dtype)}


def _index(pd: Any, index: Any) -> dict[str, Any] | None:
    t = type(index)
    if t is pd.RangeIndex:
        return {"kind": "range", "range": [index.start, index.stop, index.step], "name": index.name}
    if t is pd.Index and _numpy_dtype(index.dtype):
        return {"kind": "index", **_values(index), "name": index.name}
    if t is pd.DatetimeIndex and index.tz is None:
        freq = None if index.freq is None else _other(pd, index.freq)
        if index.freq is not None and freq is None:
            return None
        return {"kind": "datetimes", "values": index.to_numpy(), "name": index.name, "freq": freq}
    if t is pd.CategoricalIndex:
        cats = _index(pd, index.categories)
        if cats is None:
            return None
        codes = index.codes
        parts = {"kind": "categorical", "codes": codes, "categories": cats}
        return {**parts, "ordered": bool(index.ordered), "name": index.name}
    if t is pd.MultiIndex:
        levels = [_index(pd, level) for level in index.levels]
        if any(level is None for level in levels):
            return None
        return {
            "kind": "multi",
            "levels": levels,
            "codes": list(index.codes),
            "names": list(index.names),
        }
    return None


def _other(pd: Any, value: Any) -> dict[str, Any] | None:
    """A categorical dtype or a date offset, by its parts."""
    if type(value) is pd.CategoricalDtype:
        cats = None if value.categories is None else _index(pd, value.categories)
        if cats is None and value.categories is not None:
            return None
        return {"kind": "catdtype", "categories": cats, "ordered": bool(value.ordered)}
    if type(value) is pd.Timestamp and value.tz is None:
        return {"kind": "timestamp", "value": value.value, "unit": value.unit}
    if type(value) is pd.Timedelta:
        return {"kind": "timedelta", "value": value.value, "unit": value.unit}
    if isinstance(value, pd.offsets.BaseOffset) and isinstance(value.freqstr, str):
        return {"kind": "offset", "freq": value.freqstr}
    if isinstance(value, pd.api.extensions.ExtensionDtype):
        return _named_dtype(pd, value)
    return None


def _named_dtype(pd: Any, dtype: Any) -> dict[str, Any] | None:
    """An extension dtype by its name, if the name gives it back exactly."""
    name = str(dtype)
    try:
        same = pd.api.types.pandas_dtype(name) == dtype
    except (TypeError, ValueError):
        same = False
    return {"kind": "dtype", "name": name} if same else None


def encode_pandas(pd: Any, value: Any) -> dict[str, Any] | None:
    """The parts of a pandas ``value``, or ``None`` if it is not one this form carries."""
    if isinstance(value, pd.Index):
        return _index(pd, value)
    if type(value) is pd.Series:
        index = _index(pd, value.index)
        if index is None or not _numpy_dtype(value.dtype):
            return None
        return {"kind": "series", "index": index, **_values(value), "name": value.name}
    if type(value) is pd.DataFrame:
        index, columns = _index(pd, value.index), _index(pd, value.columns)
        if index is None or columns is None or not all(map(_numpy_dtype, value.dtypes)):
            return None
        cols = [_values(value.iloc[:, i]) for i in range(value.shape[1])]
        return {"kind": "frame", "index": index, "columns": columns, "cols": cols}
    return _other(pd, value)


def _build_index(pd: Any, parts: dict[str, Any]) -> Any:
    kind = parts["kind"]
    if kind == "range":
        return pd.RangeIndex(*parts["range"], name=parts["name"])
    if kind == "datetimes":
        freq = parts["freq"]
        return pd.DatetimeIndex(
            parts["values"], name=parts["name"], freq=None if freq is None else decode_pandas(freq)
        )
    if kind == "categorical":
        cats = _build_index(pd, parts["categories"])
        values = pd.Categorical.from_codes(
            parts["codes"], categories=cats, ordered=parts["ordered"]
        )
        return pd.CategoricalIndex(values, name=parts["name"])
    if kind == "multi":
        levels = [_build_index(pd, level) for level in parts["levels"]]
        return pd.MultiIndex(levels=levels, codes=parts["codes"], names=parts["names"])
    return pd.Index(parts["values"], name=parts["name"], dtype=_dtype(parts))


def _dtype(parts: dict[str, Any]) -> Any:
    return parts["values"].dtype if parts["dtype"] is None else parts["dtype"]


def decode_pandas(parts: dict[str, Any]) -> Any:
    """The pandas object of ``parts`` (from :func:`encode_pandas`)."""
    import pandas as pd

    kind = parts["kind"]
    if kind in ("range", "index", "datetimes", "categorical", "multi"):
        return _build_index(pd, parts)
    if kind == "catdtype":
        cats = None if parts["categories"] is None else _build_index(pd, parts["categories"])
        return pd.CategoricalDtype(cats, ordered=parts["ordered"])
    if kind == "timestamp":
        return pd.Timestamp(parts["value"], unit="ns").as_unit(parts["unit"])
    if kind == "timedelta":
        return pd.Timedelta(parts["value"], unit="ns").as_unit(parts["unit"])
    if kind == "dtype":
        return pd.api.types.pandas_dtype(parts["name"])
    if kind == "offset":
        from pandas.tseries.frequencies import to_offset

        return to_offset(parts["freq"])
    index = _build_index(pd, parts["index"])
    if kind == "series":
        return pd.Series(parts["values"], index=index, name=parts["name"], dtype=_dtype(parts))
    if kind != "frame":
        raise ValueError(f"unknown pandas part {kind!r}")
    cols = parts["cols"]
    frame = pd.DataFrame(
        {i: pd.Series(c["values"], index=index, dtype=_dtype(c)) for i, c in enumerate(cols)},
        index=index,
    )
    if not cols:
        frame = pd.DataFrame(index=index)
    frame.columns = _build_index(pd, parts["columns"])
    return frame
