"""Keyed state column by column: cheap to write, and compacted without a Python object per key.

A mapping whose keys are all tuples of one length (or all scalars) and
whose values are too (an event-time window's ``{(key, start): (end, seq,
acc)}``, a keyed accumulator's ``{key: total}``) is written as its columns
(:class:`Columns`, the codec's :attr:`~.codec.Tag.COLUMNS`).  A column whose
values are all ``int`` (within 64 bits) or all ``float`` is one buffer of
little-endian machine numbers (``array`` of the standard library: made and
read in C); any other column is a list of values in the codec's encoding.
The keys marked deleted (a delta) are columns of their own.  A mapping whose
values are tuples of varying length whose items are tuples of one length (a
table's versions ``{key: ((time, value), (time, value), ...)}``) is written
as *nested* columns: the items' columns, all values' items one after
another, and a column of how many items each value has.  It reads back
as the plain dict, so :func:`~.inspection.read` and ``rivermark
checkpoints export`` give the same rows as from any other encoding.

Compacting a delta chain into a new base (:func:`compact`) merges the
chain's columns directly when numpy is installed: the keys' columns are
sorted together (numpy sorts numbers without holding the GIL), the newest
row of each key is kept, and those that were deleted dropped; no tuple and
no dict is made per key.  Without numpy, or for columns that do not fit,
the caller builds the dicts as before.

>>> from .codec import dumps, loads
>>> c = Columns.of({(1, 0.0): (10.0, 3), (2, 0.0): (10.0, 4)})
>>> loads(dumps(c))
{(1, 0.0): (10.0, 3), (2, 0.0): (10.0, 4)}
"""

from __future__ import annotations

import itertools
import operator
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from rivermark.state import DELETED

__all__ = ["Columns", "compact", "split_deleted"]

#: a column: a list of values, or numbers in an ``array`` or a numpy array
Column = Any

_BIG = sys.byteorder == "big"
#: the array typecode of each buffer kind written (little-endian on disk)
_KINDS = {"<i8": "q", "<f8": "d"}


def _number_column(values: list[object]) -> Column:
    """``values`` as an ``array`` when they are all ``int`` (64 bits) or all ``float``."""
    types = set(map(type, values))
    if len(types) != 1:
        return values
    t = types.pop()
    try:
        if t is float:
            return array("d", values)
        if t is int:
            return array("q", values)
    except OverflowError:  # an int beyond 64 bits: written as a value of its own
        pass
    return values


def _split(items: list[Any], width: int) -> list[Column] | None:
    """The columns of ``items`` (tuples of ``width``, or scalars when ``width`` is 0)."""
    if width == 0:
        return [_number_column(items)]
    return [_number_column(list(map(operator.itemgetter(i), items))) for i in range(width)]


def _width(items: list[Any]) -> int | None:
    """0 when no item is a tuple, their length when all are tuples of one length, else None."""
    types = set(map(type, items))
    if tuple not in types:
        return 0
    if types != {tuple}:
        return None
    lengths = set(map(len, items))
    if len(lengths) != 1:
        return None
    n = lengths.pop()
    return n if n > 0 else None


def split_deleted(data: dict[Any, Any]) -> tuple[dict[Any, Any], list[Any]]:
    """``data``'s live entries and the keys it marks :data:`~rivermark.state.DELETED`
    (``data`` itself, no copy, when none is).

    >>> split_deleted({1: "a", 2: DELETED})
    ({1: 'a'}, [2])
    """
    if DELETED not in data.values():  # a scan in C (identity)
        return data, []
    deleted = [k for k, v in data.items() if v is DELETED]
    return {k: v for k, v in data.items() if v is not DELETED}, deleted


class Columns:
    """A mapping held as its key columns, value columns and deleted keys' columns.

    ``key_width``/``value_width`` is the length of the key/value tuples (0:
    the keys/values are not tuples, one column).  Rows ``i`` of the key and
    value columns are one entry; ``deleted`` holds the key columns of the
    keys marked :data:`~rivermark.state.DELETED`.

    ``counts`` (nested values, see the module's docs): per row, how many
    items its value has; ``values`` are then the items' columns (``value_width``
    their width), the rows' items one after another.  ``None``: each row's
    value is one row of ``values``.
    """

    __slots__ = ("key_width", "value_width", "keys", "values", "deleted", "counts")

    #: a smaller mapping is written as a dict (the columns would not pay)
    MIN_ROWS = 64

    def __init__(
        self,
        key_width: int,
        value_width: int,
        keys: list[Column],
        values: list[Column],
        deleted: list[Column],
        counts: Column | None = None,
    ) -> None:
        self.key_width = key_width
        self.value_width = value_width
        self.keys = keys
        self.values = values
        self.deleted = deleted
        self.counts = counts

    @classmethod
    def of(cls, data: dict[Any, Any]) -> Any:
        """``data`` as :class:`Columns` when it has the shape, else ``data`` itself."""
        if type(data) is not dict or len(data) < cls.MIN_ROWS:
            return data
        columns = cls.from_mapping(data)
        return data if columns is None else columns

    @classmethod
    def from_mapping(cls, data: dict[object, object]) -> Columns | None:
        """The columns of ``data``, or ``None`` when its keys or values have no one shape."""
        live, deleted = split_deleted(data)
        keys, values = list(live), list(live.values())
        kw = _width(keys + deleted if deleted else keys)
        if kw is None:
            return None
        counts: Column | None = None
        vw: int | None
        nested = _nested(values) if values and _nested_first(values[0]) else None
        if nested is not None:  # tuples of tuples: the items' columns and their counts
            vw, values, counts = nested
        else:
            vw = _width(values) if values else 0
        if vw is None:
            return None
        key_columns, value_columns = _split(keys, kw), _split(values, vw)
        deleted_columns = _split(deleted, kw)
        assert key_columns is not None and value_columns is not None
        assert deleted_columns is not None
        return cls(kw, vw, key_columns, value_columns, deleted_columns, counts)

    def __len__(self) -> int:
        return len(self.keys[0]) if self.keys else 0

    # the encoding (see codec.Tag.COLUMNS): nested values add their counts' column
    def parts(self) -> list[object]:
        out: list[object] = [
            self.key_width,
            self.value_width,
            [_encode_column(c) for c in self.keys],
            [_encode_column(c) for c in self.values],
            [_encode_column(c) for c in self.deleted],
        ]
        if self.counts is not None:
            out.append(_encode_column(self.counts))
        return out

    @classmethod
    def from_parts(cls, v: Sequence[Any]) -> Columns:
        if len(v) not in (5, 6):
            raise ValueError(f"not a columns part: {len(v)} parts")
        kw, vw, keys, values, deleted = v[:5]
        if not isinstance(kw, int) or not isinstance(vw, int) or kw < 0 or vw < 0:
            raise ValueError(f"not a columns part: widths {kw!r}, {vw!r}")
        counts = _decode_column(v[5]) if len(v) == 6 else None
        if counts is not None and (type(counts) is not array or counts.typecode != "q"):
            raise ValueError("not a columns part: the counts of nested values are not integers")
        return cls(
            kw,
            vw,
            [_decode_column(c) for c in keys],
            [_decode_column(c) for c in values],
            [_decode_column(c) for c in deleted],
            counts,
        )

    def to_dict(self) -> dict[Any, Any]:
        """The mapping (deleted keys last, marked :data:`~rivermark.state.DELETED`)."""
        keys = _rows(self.keys, self.key_width)
        values = _rows(self.values, self.value_width)
        if self.counts is not None:  # each row's items, as a tuple
            items = iter(values)
            counts: list[int] = _as_list(self.counts)  # type: ignore[assignment]
            values = [tuple(itertools.islice(items, n)) for n in counts]
            if next(items, _END) is not _END:
                raise ValueError("not a columns part: more nested items than their counts")
        out = dict(zip(keys, values, strict=True))
        if self.deleted and len(self.deleted[0]):
            out.update(dict.fromkeys(_rows(self.deleted, self.key_width), DELETED))
        return out


#: the end of an iterator (``next``'s default)
_END = object()


def _nested_first(value: object) -> bool:
    """Whether ``value`` (a mapping's first value) may start nested values: a tuple of
    tuples, or an empty tuple."""
    return type(value) is tuple and (not value or type(value[0]) is tuple)


def _nested(values: list[Any]) -> tuple[int, list[Any], Column] | None:
    """``values`` as nested columns: the items' width, the items one after another, and
    how many each value has; ``None`` unless every value is a tuple of tuples of one
    length (the number of them varying)."""
    if set(map(type, values)) != {tuple}:
        return None
    items = list(itertools.chain.from_iterable(values))
    width = _width(items) if items else None
    if not width:  # no items, or items that are not tuples of one length
        return None
    return width, items, array("q", list(map(len, values)))  # from a list: in one go


def _as_list(column: Column) -> list[object]:
    if type(column) is list:
        return column
    out: list[Any] = column.tolist()
    return out


def _rows(columns: list[Column], width: int) -> Any:
    lists = [_as_list(c) for c in columns]
    if width == 0:
        return lists[0]
    return zip(*lists, strict=True)


def _encode_column(column: Column) -> object:
    """``["", values]`` for a list; ``[kind, little-endian bytes]`` for numbers."""
    if type(column) is list:
        column = _number_column(column)
        if type(column) is list:
            return ["", column]
    if type(column) is array:
        a = column
        if _BIG:
            a = array(a.typecode, a)
            a.byteswap()
        return ["<i8" if a.typecode == "q" else "<f8", a.tobytes()]
    # a numpy array of int64 or float64 (a compaction's result)
    kind = "<i8" if column.dtype.kind == "i" else "<f8"
    return [kind, column.astype(kind, copy=False).tobytes()]


def _decode_column(c: object) -> Column:
    if not isinstance(c, list) or len(c) != 2:
        raise ValueError(f"not a column: {type(c).__name__}")
    kind, payload = c
    if kind == "" and isinstance(payload, list):
        return payload
    if kind in _KINDS and isinstance(payload, bytes):
        a = array(_KINDS[kind])
        a.frombytes(payload)
        if _BIG:
            a.byteswap()
        return a
    raise ValueError(f"not a column: kind {kind!r}")


def compact(chunks: list[Columns]) -> Columns | None:
    """The merge of ``chunks`` (a base, then deltas in order): the newest row of each key,
    deleted keys dropped; ``None`` when numpy is missing or the columns do not fit.

    >>> base = Columns.from_mapping({(k, 0.0): (1.0, k) for k in range(3)})
    >>> delta = Columns.from_mapping({(1, 0.0): (2.0, 9), (2, 0.0): DELETED})
    >>> sorted(compact([base, delta]).to_dict().items())
    [((0, 0.0), (1.0, 0)), ((1, 0.0), (2.0, 9))]
    """
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with the DataFrame extra
        return None
    if not chunks or not _fit(chunks):
        return None
    live = [c for c in chunks if len(c)]
    # the widths of the rows: a chunk without live rows (an empty base, a delta
    # that only deletes) says value width 0 whatever the values are
    kw, vw = chunks[0].key_width, (live or chunks)[0].value_width
    nested = bool(live) and live[0].counts is not None
    nk = max(kw, 1)
    # the rows, chunk by chunk: its live rows, then its deleted keys; a row's
    # value is row ``live_row`` of the live rows' values (-1: deleted)
    parts: list[list[Column]] = [[] for _ in range(nk)]
    flags = []
    n_live = 0
    for c in chunks:
        live_n = len(c)
        dead_n = len(c.deleted[0]) if c.deleted else 0
        for i in range(nk):
            parts[i].append(c.keys[i])
            if dead_n:
                parts[i].append(c.deleted[i])
        flags.append(np.arange(n_live, n_live + live_n, dtype=np.int64))
        flags.append(np.full(dead_n, -1, dtype=np.int64))
        n_live += live_n
    live_row = np.concatenate(flags)
    codes = [_key_codes(np, p) for p in parts]
    n = len(live_row)
    if n == 0:
        return Columns(kw, vw, [[] for _ in range(nk)], [[] for _ in range(max(vw, 1))], [])
    # by key (a stable sort: rows of one key in the order they were written);
    # a key's value is its last row's, and its place in the mapping that of
    # the row that (re)inserted it: the first after its last deletion (as
    # applying the deltas to a dict in order keeps it)
    order = np.lexsort(codes[::-1])
    same = np.ones(max(n - 1, 0), dtype=bool)
    for c in codes:
        s = c[order]
        same &= s[1:] == s[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = ~same
    dead = live_row[order] < 0
    life = np.ones(n, dtype=bool)  # a new key, or the same key after a deletion
    life[1:] = ~same | dead[:-1]
    begun = np.maximum.accumulate(np.where(life, np.arange(n), 0))
    pick = last & ~dead
    value_rows = live_row[order[pick]]
    inserted = order[begun[pick]]  # rows, numbered in the order they were written
    place = np.argsort(inserted, kind="stable")
    key_rows, value_rows = live_row[inserted[place]], value_rows[place]
    key_columns = [_take(np, [c.keys[i] for c in chunks if len(c)], key_rows) for i in range(nk)]
    counts = None
    if nested:  # the rows' items
        counts, value_rows = _item_rows(np, live, value_rows)
    value_columns = [_take(np, [c.values[i] for c in live], value_rows) for i in range(max(vw, 1))]
    return Columns(kw, vw, key_columns, value_columns, [], counts)


def _fit(chunks: list[Columns]) -> bool:
    """Whether ``chunks`` have one key width, and their rows one value width and one
    kind of values (nested or not)."""
    kw = chunks[0].key_width
    if any(c.key_width != kw for c in chunks):
        return False
    live = [c for c in chunks if len(c)]
    if not live:
        return True
    vw, nested = live[0].value_width, live[0].counts is not None
    return all(c.value_width == vw and (c.counts is not None) == nested for c in live)


def _item_rows(np: Any, live: list[Columns], rows: Any) -> tuple[Any, Any]:
    """The counts of nested values ``rows`` of ``live``'s rows, and the rows of their
    items (each row's run of items, one after another), computed in numpy."""
    counts_all = np.concatenate([np.asarray(c.counts, dtype=np.int64) for c in live])
    starts = np.cumsum(counts_all) - counts_all
    counts = counts_all[rows]
    to = np.cumsum(counts) - counts  # where each row's items start in the result
    return counts, np.repeat(starts[rows] - to, counts) + np.arange(int(counts.sum()))


def _numeric(np: Any, parts: list[Column]) -> Any:
    """The concatenation of ``parts`` as one numpy array when all are buffers of one kind."""
    kinds = {p.typecode if type(p) is array else None for p in parts if len(p)}
    if len(kinds) != 1 or None in kinds:
        return None
    kind = kinds.pop()
    dtype = np.int64 if kind == "q" else np.float64
    return np.concatenate([np.frombuffer(p, dtype=dtype) for p in parts if len(p)])


def _key_codes(np: Any, parts: list[Column]) -> Any:
    """One number per row, equal for equal keys (a dict's equality), ordered for sorting."""
    nums = _numeric(np, parts)
    if nums is not None:
        return nums
    values: list[Any] = []
    for p in parts:
        values += _as_list(p)
    # the last position of each value: equal values (as dict keys) share it, in C
    position = dict(zip(values, range(len(values))))
    return np.fromiter(map(position.__getitem__, values), dtype=np.int64, count=len(values))


def _take(np: Any, parts: list[Column], rows: Any) -> Column:
    """Rows ``rows`` of the concatenation of ``parts`` (a numpy array, or a list)."""
    nums = _numeric(np, parts)
    if nums is not None:
        return nums[rows]
    values: list[Any] = []
    for p in parts:
        values += _as_list(p)
    if len(rows) == 0:
        return []
    if len(rows) == 1:
        return [values[int(rows[0])]]
    return list(operator.itemgetter(*rows.tolist())(values))
