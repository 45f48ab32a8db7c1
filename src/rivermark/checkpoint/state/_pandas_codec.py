"""The tagged columnar form of pandas objects in state files (see :mod:`.codec`).

A ``Series``, ``DataFrame`` or ``Index`` (plain, range, datetime,
categorical, multi-level) is written as its labels and one numpy array per
column; numpy dtypes and pandas' string dtypes are taken (numbers,
booleans, times without a time zone, strings and other objects element by
element), and, by their parts, datetimes with a time zone (UTC ticks and
the dtype's name), categoricals (codes and categories) and nullable
numbers and booleans (``Int64``, ``boolean``: values and the mask of the
missing ones).  ``CategoricalDtype``, ``Timestamp`` (with its time zone's
name), ``Timedelta`` and date offsets (an index's ``freq``) are written by
their parts.  A pandas extension dtype on its own (a frame's
schema holds them: ``str``, ``string``, ``Int64``, ``datetime64[ns, UTC]``)
is written by its name when pandas reads that name back as an equal dtype.
Anything else (other
extension dtypes, a time zone whose name does not give it back) is left to
the pickle part of the codec (``None`` here).
"""

from __future__ import annotations

from typing import Any

__all__ = ["encode_pandas", "decode_pandas"]


#: pandas' string dtypes, written as their values (objects) and the dtype's name
_STRING_DTYPES = ("str", "string")


def _numpy_dtype(dtype: object) -> bool:
    """Whether a column of ``dtype`` is written as data (numpy's, a string dtype, a time
    zone's datetimes, a categorical of such categories, a nullable number or boolean)."""
    import numpy as np
    import pandas as pd

    if isinstance(dtype, np.dtype):
        return dtype.kind in "biufcmMOSU" and dtype.fields is None
    if str(dtype) in _STRING_DTYPES:
        return True
    if isinstance(dtype, pd.DatetimeTZDtype):
        return _named_dtype(pd, dtype) is not None
    if isinstance(dtype, pd.CategoricalDtype):
        return dtype.categories is not None and _index(pd, dtype.categories) is not None
    return _masked(pd, dtype)


def _masked(pd: Any, dtype: Any) -> bool:
    """A nullable integer, float or boolean dtype (``Int64``, ``Float64``, ``boolean``)."""
    return (
        isinstance(dtype, pd.api.extensions.ExtensionDtype)
        # optional: only pandas' extension dtypes backed by numpy have numpy_dtype
        and getattr(dtype, "numpy_dtype", None) is not None
        and dtype.kind in "biuf"
        and _named_dtype(pd, dtype) is not None
    )


def _values(column: Any) -> dict[str, Any]:
    """A column's (or index's) values: a numpy array, and a string dtype's name.

    Datetimes with a time zone are their UTC ticks (``utc``), a categorical
    its codes and its dtype's parts (``categories``), a nullable column its
    numpy values and the mask of its missing ones (``mask``).
    """
    import numpy as np
    import pandas as pd

    dtype = column.dtype
    if isinstance(dtype, np.dtype):
        return {"values": column.to_numpy(), "dtype": None}
    if isinstance(dtype, pd.DatetimeTZDtype):
        ticks = column.to_numpy(dtype=f"datetime64[{dtype.unit}]")
        return {"values": ticks, "dtype": str(dtype), "utc": True}
    if isinstance(dtype, pd.CategoricalDtype):
        codes = np.asarray(pd.Categorical(column, dtype=dtype).codes)
        return {"values": codes, "dtype": None, "categories": _other(pd, dtype)}
    if _masked(pd, dtype):
        mask = np.asarray(column.isna(), dtype=bool)
        data = column.to_numpy(dtype=dtype.numpy_dtype, na_value=dtype.numpy_dtype.type(0))
        return {"values": data, "dtype": str(dtype), "mask": mask}
    return {"values": column.to_numpy(dtype=object), "dtype": str(dtype)}


def _array(parts: dict[str, Any]) -> Any:
    """The values :func:`_values` wrote, as an array of their dtype."""
    import pandas as pd

    values = parts["values"]
    if parts.get("utc"):
        tz = pd.api.types.pandas_dtype(parts["dtype"]).tz
        return pd.DatetimeIndex(values, tz="UTC").tz_convert(tz).array
    if parts.get("categories") is not None:
        return pd.Categorical.from_codes(values, dtype=decode_pandas(parts["categories"]))
    out = pd.array(values, dtype=_dtype(parts))
    mask = parts.get("mask")
    if mask is not None and mask.any():
        out[mask] = pd.NA
    return out


def _index(pd: Any, index: Any) -> dict[str, Any] | None:
    t = type(index)
    if t is pd.RangeIndex:
        return {"kind": "range", "range": [index.start, index.stop, index.step], "name": index.name}
    if t is pd.Index and _numpy_dtype(index.dtype):
        return {"kind": "index", **_values(index), "name": index.name}
    if t is pd.DatetimeIndex:
        return _datetime_index(pd, index)
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


def _datetime_index(pd: Any, index: Any) -> dict[str, Any] | None:
    freq = None if index.freq is None else _other(pd, index.freq)
    if index.freq is not None and freq is None:
        return None
    if index.tz is None:
        return {"kind": "datetimes", "values": index.to_numpy(), "name": index.name, "freq": freq}
    if _named_dtype(pd, index.dtype) is None:
        return None
    return {"kind": "datetimes", **_values(index), "name": index.name, "freq": freq}


def _other(pd: Any, value: Any) -> dict[str, Any] | None:
    """A categorical dtype or a date offset, by its parts."""
    if type(value) is pd.CategoricalDtype:
        cats = None if value.categories is None else _index(pd, value.categories)
        if cats is None and value.categories is not None:
            return None
        return {"kind": "catdtype", "categories": cats, "ordered": bool(value.ordered)}
    if type(value) is pd.Timestamp:
        stamp = {"kind": "timestamp", "value": value.value, "unit": value.unit}
        if value.tz is None:
            return stamp
        zone = _named_dtype(pd, pd.DatetimeTZDtype(value.unit, value.tz))
        return None if zone is None else {**stamp, "tz": zone["name"]}
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
        values = _array(parts) if parts.get("utc") else parts["values"]
        return pd.DatetimeIndex(
            values, name=parts["name"], freq=None if freq is None else decode_pandas(freq)
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
    if parts.get("categories") is not None or parts.get("mask") is not None:
        return pd.Index(_array(parts), name=parts["name"])
    return pd.Index(parts["values"], name=parts["name"], dtype=_dtype(parts))


def _extension(parts: dict[str, object]) -> bool:
    """Whether :func:`_values` wrote a time zone's, a categorical's or a nullable column."""
    return bool(parts.get("utc")) or any(parts.get(k) is not None for k in ("categories", "mask"))


def _dtype(parts: dict[str, Any]) -> Any:
    return parts["values"].dtype if parts["dtype"] is None else parts["dtype"]


def _timestamp(pd: Any, parts: dict[str, Any]) -> Any:
    stamp = pd.Timestamp(parts["value"], unit="ns").as_unit(parts["unit"])
    tz = parts.get("tz")
    if tz is None:
        return stamp
    return stamp.tz_localize("UTC").tz_convert(pd.api.types.pandas_dtype(tz).tz)


def _series(pd: Any, parts: dict[str, Any], index: Any, name: Any) -> Any:
    """A column (or series) of :func:`_values`'s ``parts`` on ``index``."""
    if _extension(parts):
        return pd.Series(_array(parts), index=index, name=name)
    return pd.Series(parts["values"], index=index, name=name, dtype=_dtype(parts))


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
        return _timestamp(pd, parts)
    if kind == "timedelta":
        return pd.Timedelta(parts["value"], unit="ns").as_unit(parts["unit"])
    if kind == "dtype":
        return pd.api.types.pandas_dtype(parts["name"])
    if kind == "offset":
        from pandas.tseries.frequencies import to_offset

        return to_offset(parts["freq"])
    index = _build_index(pd, parts["index"])
    if kind == "series":
        return _series(pd, parts, index, parts["name"])
    if kind != "frame":
        raise ValueError(f"unknown pandas part {kind!r}")
    cols = parts["cols"]
    frame = pd.DataFrame(
        {i: _series(pd, c, index, None) for i, c in enumerate(cols)},
        index=index,
    )
    if not cols:
        frame = pd.DataFrame(index=index)
    frame.columns = _build_index(pd, parts["columns"])
    return frame
