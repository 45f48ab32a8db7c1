"""State files as data: a tagged msgpack encoding that cannot run code when read.

A state file written by this version starts with :data:`MAGIC` and holds
one msgpack document.  msgpack's own types carry ``None``, ``bool``,
``int`` (64 bits), ``float``, ``str``, ``bytes``, ``list`` and ``dict``;
everything else rivermark's operators keep is an extension with a type tag
(:class:`Tag`): tuples, sets, frozensets, integers beyond 64 bits,
complex numbers, the ``DELETED`` and ``no_default`` markers,
:class:`rivermark.KeyedState`, rivermark's own data classes of state (those
registered with :func:`rivermark.statedata.register_state_class`), numpy arrays, scalars and dtypes of a numeric,
boolean, string or time dtype, and pandas ``Series`` / ``DataFrame`` /
``Index`` whose columns have such dtypes (a tagged columnar form), and a
mapping of keyed state written by its columns (:class:`.columns.Columns`:
numbers as buffers, a table's versions as nested columns; :class:`Table`,
what earlier versions wrote).  Reading
any of these builds the value from its parts; no class named by the file is
looked up, no constructor it names is called.

Anything else (a user's own class, an object-dtype array of such objects) is
written as a :attr:`Tag.PICKLE` extension holding pickle bytes, and only
that part: decoding one needs ``allow_pickle=True``, which the job and the
``rivermark checkpoints`` command give only for a checkpoint whose
signature verified, or when the user said ``--trust-store``
(``Job(trust_store=True)``).  Otherwise it raises
:class:`~rivermark.checkpoint.errors.UntrustedStateError`.  A state file
without :data:`MAGIC` was written by an older rivermark as one pickle, and
is treated as a pickle part as a whole.

>>> blob = dumps({"n": 3, "pair": (1, "a"), "seen": {2, 3}})
>>> loads(blob)
{'n': 3, 'pair': (1, 'a'), 'seen': {2, 3}}
>>> has_pickle(blob), has_pickle(dumps(object()))
(False, True)
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import pickle
import sys
import threading
from typing import Any

import msgpack

from rivermark.checkpoint.errors import UntrustedStateError
from rivermark.checkpoint.state.columns import Columns, split_deleted
from rivermark.state import DELETED, KeyedState, no_default
from rivermark.statedata import registered, state_class

__all__ = [
    "MAGIC",
    "Tag",
    "Table",
    "dumps",
    "loads",
    "has_pickle",
    "is_legacy",
    "pack",
    "unpack",
    "reader",
]

#: the first bytes of a state file in this encoding (older ones are a bare pickle)
MAGIC = b"RMS\x01"


class Tag(enum.IntEnum):
    """msgpack extension type codes of the values msgpack has no type of its own for."""

    TUPLE = 1
    SET = 2
    FROZENSET = 3
    BIGINT = 4
    COMPLEX = 5
    DELETED = 6
    NO_DEFAULT = 7
    KEYED = 8
    NDARRAY = 9
    NPSCALAR = 10
    PANDAS = 11
    NPDTYPE = 12
    DATACLASS = 13
    TABLE = 14
    COLUMNS = 15
    PICKLE = 127


def _data_class_fields(value: Any) -> dict[str, Any] | None:
    """The attributes of one of rivermark's classes registered for state, or ``None``.

    The classes are registered by the layers that define them
    (:mod:`rivermark.statedata`); the codec imports none of those layers.
    """
    known = registered(type(value))
    if known is None:
        return None
    if dataclasses.is_dataclass(value):
        attrs = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif isinstance(value, tuple):  # a NamedTuple
        attrs = dict(value._asdict())  # type: ignore[attr-defined]
    else:
        # optional: an object with __slots__ has no __dict__
        attrs = dict(getattr(value, "__dict__", {}))
    return attrs if tuple(attrs) == known else None


_TUPLE_CODE = 1  # Tag.TUPLE, without the enum's cost per tuple


class Table:
    """A mapping to write column by column: keys and values tuples of one length each.

    What versions before :class:`.columns.Columns` wrote (every column a
    msgpack list); their state files are read as before.

    Keyed state is often such a mapping (an event-time window's
    ``{(key, start): (end, seq, acc)}``).  Written as a dict, each tuple is a
    tagged value of its own (a call into Python per tuple); as a
    :attr:`Tag.TABLE` it is its key columns and value columns, lists that
    msgpack writes in C, and the keys marked deleted (a delta).  It reads
    back as the plain dict (deleted keys last; the order of a delta's keys
    does not matter).  :meth:`of` wraps only a mapping that has that shape.

    >>> loads(dumps(Table.of({(1, "a"): (2.0, 3), (4, "b"): DELETED})))
    {(1, 'a'): (2.0, 3), (4, 'b'): DELETED}
    """

    __slots__ = ("data", "columns")

    #: a smaller mapping is written as a dict (the columns would not pay)
    MIN_ROWS = 64

    def __init__(self, data: dict[object, object]) -> None:
        self.data = data
        self.columns: list[Any] | None = None

    @classmethod
    def of(cls, data: dict[Any, Any]) -> Any:
        """``data`` as a :class:`Table` when it has the shape, else ``data`` itself."""
        if type(data) is not dict or len(data) < cls.MIN_ROWS:
            return data
        columns = cls._columns(data)
        if columns is None:
            return data
        table = cls(data)
        table.columns = columns
        return table

    @staticmethod
    def _columns(data: dict[Any, Any]) -> list[Any] | None:
        live, deleted = split_deleted(data)
        keys, values = list(live), list(live.values())
        if not keys:
            return None
        # every key a tuple of one length, every value too (checks in C: map, set)
        if set(map(type, keys)) != {tuple} or set(map(type, values)) != {tuple}:
            return None
        key_lengths, value_lengths = set(map(len, keys)), set(map(len, values))
        if len(key_lengths) != 1 or len(value_lengths) != 1 or 0 in key_lengths | value_lengths:
            return None
        # a column: one position of every tuple (map and itemgetter: in C)
        nk, nv = key_lengths.pop(), value_lengths.pop()
        return [
            [list(map(operator.itemgetter(i), keys)) for i in range(nk)],
            [list(map(operator.itemgetter(i), values)) for i in range(nv)],
            deleted,
        ]

    def parts(self) -> list[object]:
        columns = self.columns if self.columns is not None else self._columns(self.data)
        if columns is None:
            raise ValueError("Table: the mapping's keys and values are not tuples of one length")
        return columns


#: the mappings written by their columns: :class:`~.columns.Columns`, and
#: :class:`Table` (what versions before it wrote; read, and written by tests)
_BY_COLUMNS: dict[type, Tag] = {Columns: Tag.COLUMNS, Table: Tag.TABLE}


#: per thread, packers not in use (a tagged value packs its parts with another
#: packer while the outer one is busy); making one per value costs more than packing
_packers = threading.local()


def _free_packers() -> list[msgpack.Packer]:
    """This thread's packers not in use."""
    try:
        free: list[msgpack.Packer] = _packers.free
    except AttributeError:  # the thread's first
        free = _packers.free = []
    return free


def _pack(value: object) -> bytes:
    free = _free_packers()
    packer = (
        free.pop()
        if free
        else msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)
    )
    out: bytes = packer.pack(value)  # on an error the packer is dropped, not reused
    free.append(packer)
    return out


#: an ``ExtType`` made without its checks (``ExtType.__new__`` is Python code, and a
#: tuple's code and bytes are right by construction): the tuple's constructor
_new_ext = tuple.__new__
_EXT_TYPE = msgpack.ExtType


def _ext(tag: Tag, value: object) -> msgpack.ExtType:
    return msgpack.ExtType(int(tag), _pack(value))


def _pickled(value: object) -> msgpack.ExtType:
    return msgpack.ExtType(int(Tag.PICKLE), pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _default(value: Any) -> Any:
    """The tagged form of a value msgpack does not carry itself (strict types).

    A tuple, the most frequent one (several per key of a table), is its items
    as a list, packed here (what :func:`_ext` does, at less cost: no call per
    step, no enum, and an ``ExtType`` made without its checks).
    """
    if type(value) is not tuple:
        return _tagged(value)
    try:
        free: list[msgpack.Packer] = _packers.free
    except AttributeError:  # the thread's first
        free = _free_packers()
    packer = (
        free.pop()
        if free
        else msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)
    )
    data: bytes = packer.pack(list(value))  # on an error the packer is dropped, not reused
    free.append(packer)
    return _new_ext(_EXT_TYPE, (_TUPLE_CODE, data))


def _tagged(value: Any) -> Any:
    """:func:`_default` of a value that is not a tuple."""
    t = type(value)
    if t is set or t is frozenset:
        return _ext(Tag.SET if t is set else Tag.FROZENSET, list(value))
    if t is int:  # beyond 64 bits
        return _ext(Tag.BIGINT, str(value))
    if t is complex:
        return _ext(Tag.COMPLEX, [value.real, value.imag])
    if value is DELETED:
        return _ext(Tag.DELETED, None)
    if value is no_default:
        return _ext(Tag.NO_DEFAULT, None)
    by_columns = _BY_COLUMNS.get(t)
    if by_columns is not None:
        return _ext(by_columns, value.parts())
    if t is KeyedState:
        return _ext(Tag.KEYED, dict(value))
    fields = _data_class_fields(value)
    if fields is not None:
        return _ext(Tag.DATACLASS, [t.__qualname__, fields])
    encoded = _numpy_or_pandas(value)
    return _pickled(value) if encoded is None else encoded


def _plain_dtype(dtype: Any) -> bool:
    """A numpy dtype whose bytes are the whole value (no Python objects, no fields)."""
    return bool(dtype.kind in "biufcmMSU" and dtype.fields is None)


def _numpy_or_pandas(value: Any) -> msgpack.ExtType | None:
    np = sys.modules.get("numpy")
    if np is not None:
        if type(value) is np.ndarray:
            if _plain_dtype(value.dtype):
                a = np.ascontiguousarray(value)
                return _ext(Tag.NDARRAY, [a.dtype.str, list(a.shape), a.tobytes()])
            if value.dtype.kind == "O":
                return _ext(Tag.NDARRAY, ["|O", list(value.shape), value.ravel().tolist()])
            return None
        if isinstance(value, np.generic) and _plain_dtype(value.dtype):
            return _ext(Tag.NPSCALAR, [value.dtype.str, value.tobytes()])
        if isinstance(value, np.dtype) and (_plain_dtype(value) or value.kind == "O"):
            return _ext(Tag.NPDTYPE, value.str)
    pd = sys.modules.get("pandas")
    if pd is not None:
        from rivermark.checkpoint.state._pandas_codec import encode_pandas

        parts = encode_pandas(pd, value)
        if parts is not None:
            return _ext(Tag.PANDAS, parts)
    return None


def dumps(value: object) -> bytes:
    """The state file of ``value``: :data:`MAGIC` and its tagged msgpack document."""
    return MAGIC + _pack(value)


def pack(value: object) -> bytes:
    """One value in the tagged msgpack encoding, without :data:`MAGIC` (a key or value
    of RocksDB state, :mod:`rivermark.checkpoint.state.rocks`).

    The same value always packs to the same bytes (so a packed key names it).

    >>> unpack(pack((1, "a")))
    (1, 'a')
    """
    return _pack(value)


def unpack(data: bytes, *, allow_pickle: bool = False, what: str = "the state") -> Any:
    """The value of :func:`pack`'s ``data`` (a pickled part only with ``allow_pickle``)."""
    try:
        return _Decoder(allow_pickle, what).unpack(data)
    except UntrustedStateError:
        raise
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise ValueError(f"not a valid packed value ({type(e).__name__}: {e})") from None


def reader(*, allow_pickle: bool = False, what: str = "the state") -> Any:
    """A function that :func:`unpack` s many values with the same rules (cheaper per value).

    >>> reader()(pack({"n": (1, 2)}))
    {'n': (1, 2)}
    """
    ext = _Decoder(allow_pickle, what).ext
    unpackb = msgpack.unpackb

    def read(data: bytes) -> Any:
        return unpackb(data, ext_hook=ext, raw=False, strict_map_key=False)

    return read


def is_legacy(blob: bytes) -> bool:
    """Whether ``blob`` is a state file of an older rivermark (one pickle)."""
    return not blob.startswith(MAGIC)


class _Decoder:
    def __init__(self, allow_pickle: bool, what: str, columns: bool = False) -> None:
        self.allow_pickle = allow_pickle
        self.what = what
        self.pickles = 0
        #: a columns part is returned as :class:`Columns` (a compaction), not a dict
        self.columns = columns

    def unpack(self, data: bytes) -> Any:
        return msgpack.unpackb(data, ext_hook=self.ext, raw=False, strict_map_key=False)

    def ext(self, code: int, data: bytes) -> Any:
        if code == _TUPLE:  # the most frequent one: no enum, no table
            return tuple(msgpack.unpackb(data, ext_hook=self.ext, raw=False, strict_map_key=False))
        if code == _PICKLE:
            self.pickles += 1
            if not self.allow_pickle:
                raise UntrustedStateError(self.what)
            return pickle.loads(data)
        tag = Tag(code)
        if tag is Tag.DELETED:
            return DELETED
        if tag is Tag.NO_DEFAULT:
            return no_default
        v = self.unpack(data)
        return _BUILD[tag](v, self)


_TUPLE, _PICKLE = int(Tag.TUPLE), int(Tag.PICKLE)


def _ndarray(v: list[Any], dec: _Decoder) -> Any:
    import numpy as np

    dtype, shape, data = v
    if dtype == "|O":
        out = np.empty(len(data), dtype=object)
        out[:] = data
        return out.reshape(shape)
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()


def _npscalar(v: list[Any], dec: _Decoder) -> Any:
    import numpy as np

    return np.frombuffer(v[1], dtype=np.dtype(v[0]))[0]


def _npdtype(v: str, dec: _Decoder) -> object:
    import numpy as np

    return np.dtype(v)


def _dataclass(v: list[Any], dec: _Decoder) -> Any:
    name, fields = v
    known = state_class(name) if isinstance(name, str) else None
    if known is None or not isinstance(fields, dict) or tuple(fields) != known[1]:
        raise ValueError(f"not a data class of rivermark's state: {name!r}")
    return known[0](**fields)


def _table(v: list[Any], dec: _Decoder) -> dict[Any, Any]:
    key_columns, value_columns, deleted = v
    out = dict(zip(zip(*key_columns), zip(*value_columns), strict=True))
    if deleted:
        out.update(dict.fromkeys(deleted, DELETED))
    return out


def _columns(v: list[Any], dec: _Decoder) -> Any:
    columns = Columns.from_parts(v)
    return columns if dec.columns else columns.to_dict()


def _pandas(v: dict[str, Any], dec: _Decoder) -> Any:
    from rivermark.checkpoint.state._pandas_codec import decode_pandas

    return decode_pandas(v)


_BUILD: dict[Tag, Any] = {
    Tag.TUPLE: lambda v, d: tuple(v),
    Tag.SET: lambda v, d: set(v),
    Tag.FROZENSET: lambda v, d: frozenset(v),
    Tag.BIGINT: lambda v, d: int(v),
    Tag.COMPLEX: lambda v, d: complex(v[0], v[1]),
    Tag.KEYED: lambda v, d: KeyedState(v),
    Tag.NDARRAY: _ndarray,
    Tag.NPSCALAR: _npscalar,
    Tag.PANDAS: _pandas,
    Tag.NPDTYPE: _npdtype,
    Tag.DATACLASS: _dataclass,
    Tag.TABLE: _table,
    Tag.COLUMNS: _columns,
}


def loads(
    blob: bytes, *, allow_pickle: bool = False, what: str = "the state", columns: bool = False
) -> Any:
    """The value of state file ``blob``.

    A pickle part (or an older rivermark's whole-pickle file) is loaded only
    with ``allow_pickle``; otherwise :class:`UntrustedStateError` (its message
    is ``what``) is raised before any of it is read.  A file that is not
    valid in this encoding raises ``ValueError``.  With ``columns`` a mapping
    written column by column is given as its :class:`~.columns.Columns`.
    """
    if is_legacy(blob):
        if not allow_pickle:
            raise UntrustedStateError(what)
        try:
            return pickle.loads(blob)
        except _UNDECODABLE as e:
            raise ValueError(f"not a valid state file ({type(e).__name__}: {e})") from None
    try:
        return _Decoder(allow_pickle, what, columns).unpack(blob[len(MAGIC) :])
    except UntrustedStateError:
        raise
    except _UNDECODABLE as e:
        raise ValueError(f"not a valid state file ({type(e).__name__}: {e})") from None


#: what decoding bytes that are not a state file of this encoding raises (an
#: unknown tag, a part of the wrong shape, a truncated pickle, nesting deeper
#: than the stack); an unpickled class that is gone (ImportError,
#: AttributeError) is not among them: its remedy is the code, not the file
_UNDECODABLE = (
    msgpack.ExtraData,
    msgpack.FormatError,
    msgpack.StackError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    EOFError,
    RecursionError,
    pickle.UnpicklingError,
)


def undecodable(where: str, node: str, err: BaseException) -> str:
    """The one line for a state file that passed its checks but does not decode (``err``)."""
    return (
        f"{where}: the state of {node!r} matches its manifest but does not decode ({err}): "
        "it was not written by this version of rivermark (a newer one, or another program); "
        "restore a good copy of the checkpoint directory, or start over with --from-scratch"
    )


def has_pickle(blob: bytes) -> bool:
    """Whether reading ``blob`` needs to unpickle (nothing is unpickled to tell).

    ``ValueError`` if ``blob`` is not a valid state file.

    >>> has_pickle(dumps([1, (2, 3)]))
    False
    """
    if is_legacy(blob):
        return True
    dec = _Decoder(allow_pickle=False, what="")
    try:
        dec.unpack(blob[len(MAGIC) :])
    except UntrustedStateError:
        return True
    except _UNDECODABLE as e:
        raise ValueError(f"not a valid state file ({type(e).__name__}: {e})") from None
    return False
