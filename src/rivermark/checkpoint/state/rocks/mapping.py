"""``RocksKeyedState``: a :class:`rivermark.state.KeyedStore` whose keys live in RocksDB.

The mapping is what an operator sees (``acc.get(k, 0)``, ``acc[k] = v``,
``del acc[k]``, ``k in acc``, ``len(acc)``, iteration); its content is in
one RocksDB database (through ``rocksdict``), keys and values each in the
data encoding of :mod:`rivermark.checkpoint.state.codec` (``codec.pack``: the
same value always packs to the same bytes).

Between writes to RocksDB the keys read or written recently are kept in a
``dict`` of Python objects (the mapping's cache; the mapping itself is no
``dict`` and holds no other keys in memory): a value read
once is the same object until the cache is written out, so an operator that
changes a value in place and calls :meth:`touched` (``partition(key=...)``)
works as with the in-memory ``KeyedState``.  The cache holds at most
``limit`` keys; when a new key would exceed that, the oldest few keys
(``evict_step``, at most 1,024) leave it, the changed ones among them
written in one small ``WriteBatch`` (the write-ahead log is off: after a
crash the state comes from a checkpoint, never from the live database).
So a record never waits for more than one such small write, never for
the whole cache, and a key not in memory costs one ``get``.

A checkpoint's barrier costs O(1), not a write: :meth:`hand_over` hands
the cache over (O(changed keys) when the operator changes values in place:
each is copied with ``freeze``) and starts an empty one; the worker thread writes them (:meth:`write_frozen`) and takes
the RocksDB checkpoint (:mod:`rivermark.checkpoint.state.rocks.local`) while the
sources run on.  Until then reads look in the handed-over keys before the
database, and nothing else is written to the database: the cache grows
past its limit meanwhile (up to ``FROZEN_GROWTH`` times it), and only a cache that reaches
that writes them and takes the checkpoint itself (a pause that only a
worker slower than ``limit`` new keys causes), so the checkpoint holds
exactly the state at the barrier.

Differences from a ``dict``: keys are compared by their encoding, so ``1``,
``1.0``, ``True`` and ``numpy.int64(1)`` are four keys; iteration is in the
order of the encoded keys (deterministic, not the order of insertion);
``popitem`` takes the first key in that order; ``copy()``, ``|`` and
``dict(state)`` read every key from disk.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from typing import Any

from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.rocks.writes import write
from rivermark.errors import ConfigurationError, RivermarkError
from rivermark.state import KeyedDelta, KeyedState, KeyedStore

logger = logging.getLogger(__name__)

__all__ = ["RocksKeyedState", "RocksSettings", "open_db", "DEFAULT_CACHE"]

#: bytes of RocksDB's block cache (memtables are charged to it), per job
DEFAULT_CACHE = 256 << 20
#: the column family holding the number of keys (the data is in the default one)
META_CF = "rivermark-meta"
_COUNT = b"count"


#: while the worker writes a barrier's changes the cache may grow to this many times
#: its limit before the record loop writes them itself: at 100,000 new keys a
#: second and the default limit (131,072 keys) that is 4 s for the worker, longer
#: than its usual write (an extra 3 x 131,072 keys is about 40 MiB)
FROZEN_GROWTH = 4


def evict_step(limit: int) -> int:
    """The keys that leave a full cache of ``limit`` keys at a time (64 to 1,024)."""
    return max(64, min(1024, limit // 64))


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: a key known to be absent (deleted, or looked up and not found).  A bare
#: ``object()``: the garbage collector does not track it, so a cache whose keys and
#: values are numbers, strings or bytes stays untracked with it in (see KeyedDirty)
_ABSENT: Any = object()
_MISS: Any = _Marker("MISS")


def _rocksdict() -> Any:
    try:
        import rocksdict
    except ImportError:
        raise ConfigurationError(
            "Job(state='rocksdb') needs rocksdict: pip install 'rivermark[rocksdb]'"
        ) from None
    return rocksdict


#: bytes of a data block (RocksDB's default; a point lookup reads one)
BLOCK_SIZE = 4 << 10
#: bytes of an index or filter partition (a point lookup reads one of each)
PARTITION_SIZE = 4 << 10
#: bits of the bloom filter per key (about 1 % false positives)
BLOOM_BITS = 10
#: the share of a memtable's bytes given to its whole-key bloom filter
MEMTABLE_BLOOM_RATIO = 0.1
#: keys per ``WriteBatch`` of a background write: rocksdict holds the GIL while
#: RocksDB writes, so the worker writes a barrier's changes in batches this small
#: (a millisecond or two each) and the record loop runs between them
WRITE_CHUNK = 1024


#: the keys changed since the last write, in the order they changed: a ``dict`` whose
#: values are all None, not a ``set``.  A set is always tracked by the garbage
#: collector, which then visits each of its keys at every collection of its
#: generation (25 ms for 500,000 keys, on the record loop's thread or holding the
#: GIL in another); a dict of numbers, strings or bytes is not tracked at all
KeyedDirty = dict[Any, None]


@dataclass
class RocksSettings:
    """The RocksDB options of one job: one block cache that bounds its memory.

    ``cache`` bytes are shared by every database of the job: data, index
    and filter blocks, and the memtables (charged to the cache by a write
    buffer manager).  ``limit`` is the number of keys each mapping keeps as
    Python objects between writes (the cache of :class:`RocksKeyedState`).
    ``statistics`` turns RocksDB's statistics on (:meth:`statistics_counts`;
    they cost a few per cent of throughput).

    The table options are chosen for point lookups on large key sets in any
    order (docs/checkpointing.md, "Tuning"): the index and the bloom filter
    of each SST file are *partitioned* (a two-level index; partitions of
    ``PARTITION_SIZE`` bytes in the block cache, their top level pinned),
    so a lookup of a key not in memory reads one filter partition, one
    index partition and one data block, however large the files grow.  A
    whole filter or index per file (RocksDB's default) is one block of
    about 1.25 bytes per key: once it outgrows a shard of the block cache it
    is evicted as soon as it is used and read again by the next lookup.
    """

    cache: int = DEFAULT_CACHE
    limit: int = 0
    statistics: bool = False
    _shared: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.limit <= 0:
            self.limit = max(4096, min(262_144, self.cache // 2048))

    def options(self) -> Any:
        """The ``rocksdict.Options`` of a database (raw bytes, one shared cache)."""
        r = _rocksdict()
        if "cache" not in self._shared:
            cache = r.Cache(self.cache)
            self._shared["cache"] = cache
            self._shared["wbm"] = r.WriteBufferManager.new_write_buffer_manager_with_cache(
                self.cache // 4, False, cache
            )
        o = r.Options(raw_mode=True)
        o.create_if_missing(True)
        o.create_missing_column_families(True)
        o.set_max_background_jobs(2)
        o.set_write_buffer_size(max(1 << 20, min(64 << 20, self.cache // 8)))
        o.set_max_write_buffer_number(2)
        o.set_target_file_size_base(64 << 20)
        o.set_level_compaction_dynamic_level_bytes(True)
        o.set_compression_type(r.DBCompressionType.lz4())
        o.set_max_manifest_file_size(4 << 20)
        o.set_keep_log_file_num(2)
        o.set_max_log_file_size(1 << 20)
        # a bloom filter on the whole keys of each memtable: a lookup of a key that is
        # not there (a new key) skips the search of the memtable's skip list
        o.set_memtable_whole_key_filtering(True)
        o.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
        o.set_write_buffer_manager(self._shared["wbm"])
        o.set_block_based_table_factory(self.table_options())
        if self.statistics:
            o.enable_statistics()
            self._shared.setdefault("stats", []).append(o)
        return o

    def table_options(self) -> object:
        """The ``rocksdict.BlockBasedOptions``: partitioned index and filters (see above)."""
        r = _rocksdict()
        table = r.BlockBasedOptions()
        table.set_block_cache(self._shared["cache"])
        table.set_block_size(BLOCK_SIZE)
        # whole-key bloom filters (a new key, a miss, usually reads no block at all)
        table.set_bloom_filter(BLOOM_BITS, False)
        # a two-level index and filters cut into partitions of PARTITION_SIZE bytes:
        # a lookup reads one partition of each, never a whole file's filter or index
        table.set_index_type(r.BlockBasedIndexType.two_level_index_search())
        table.set_partition_filters(True)
        table.set_metadata_block_size(PARTITION_SIZE)
        # index and filter blocks live in the block cache (memory bounded by state_cache),
        # in its high-priority pool (RocksDB's default), the top levels pinned
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_top_level_index_and_filter(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        return table

    def statistics_counts(self) -> dict[str, int]:
        """RocksDB's statistics counters (``rocksdb.block.cache.miss`` ...) summed over the
        databases opened with these settings (``statistics=True``; else empty)."""
        totals: dict[str, int] = {}
        for o in self._shared.get("stats", []):
            for line in (o.get_statistics() or "").splitlines():
                name, sep, rest = line.partition(" COUNT : ")
                if sep and rest.isdigit():  # a counter (a histogram says more)
                    totals[name] = totals.get(name, 0) + int(rest)
        return totals

    def write_options(self) -> object:
        wo = _rocksdict().WriteOptions()
        wo.disable_wal = True  # a crash restores a checkpoint, never the live database
        wo.no_slowdown = True  # a stalled write waits in writes.write, the GIL released
        return wo


def open_db(path: str | os.PathLike[str], settings: RocksSettings) -> Any:
    """Open (or create) the database at ``path``; one clear line when it cannot be."""
    r = _rocksdict()
    o = settings.options()
    try:
        return r.Rdict(os.fspath(path), o, column_families={META_CF: settings.options()})
    except Exception as e:
        raise RivermarkError(
            f"the RocksDB state in {os.fspath(path)!r} cannot be opened ({e}); another job "
            "may use the same state_dir: give each job its own Job(state_dir=...)"
        ) from e


def _fill(batch: Any, changes: list[tuple[Any, Any]], pack: Callable[[Any], bytes]) -> None:
    """Put each changed key's value in ``batch``, or delete the key (``_ABSENT``)."""
    for k, v in changes:
        if v is _ABSENT:
            batch.delete(pack(k))
        else:
            batch.put(pack(k), pack(v))


def write_chunks(keys: KeyedDirty, values: Mapping[Any, Any]) -> Iterator[Callable[[Any], None]]:
    """The changes of ``keys`` as fills of a write batch, :data:`WRITE_CHUNK` keys each.

    A key whose value in ``values`` is absent is deleted, any other is put
    with its value; the caller writes each chunk before the next is made.
    """
    pack = codec.pack
    todo = iter(keys)
    while chunk := [(k, values[k]) for k in islice(todo, WRITE_CHUNK)]:
        yield partial(_fill, changes=chunk, pack=pack)


class _Closed:
    """Stands in for a database that was closed (its job's backend closed, another opened it)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __getattr__(self, name: str) -> Any:
        raise RivermarkError(
            f"the RocksDB state in {self.path!r} was closed (its job's state backend was "
            "closed, or a later job on the same state_dir opened it); read the state before "
            "closing it, or through the job that holds it now"
        )


class RocksKeyedState(KeyedStore):
    """A :class:`~rivermark.state.KeyedStore` on a RocksDB database (see the module docs).

    Created by the job (``Job(state="rocksdb")``), never by an operator: the
    job hands it to each node that keeps a ``KeyedState`` through the node's
    ``set_state``.  ``read`` decodes a value (with the store's pickle rules).
    """

    __slots__ = (
        "db",
        "path",
        "home",
        "_meta",
        "_meta_cf",
        "_dirty",
        "_len",
        "_limit",
        "_step",
        "_read",
        "_wopts",
        "_frozen",
        "_frozen_written",
        "_cache",
        "freeze",
        "waits",
    )

    #: checkpointed as a RocksDB checkpoint, not as a delta (see ``checkpoint.keyed``)
    external = True

    def __init__(
        self,
        db: Any,
        path: str,
        limit: int,
        read: Callable[[bytes], Any],
        write_options: Any,
        home: Any = None,
    ) -> None:
        #: the keys read or written recently, as Python objects (``_ABSENT``: not there)
        self._cache: dict[Any, Any] = {}
        self.freeze: Callable[[Any], Any] | None = None
        #: times a read or write waited for a barrier's changes to be written (the
        #: cache reached FROZEN_GROWTH times its limit before the worker wrote them; a flush)
        self.waits = 0
        self.db = db
        self.path = path
        self.home = home
        self._meta = db.get_column_family(META_CF)
        self._meta_cf = db.get_column_family_handle(META_CF)
        self._dirty: KeyedDirty = {}
        raw = self._meta.get(_COUNT)
        self._len = 0 if raw is None else int.from_bytes(raw, "little")
        self._limit = limit
        #: keys leaving the cache at a time when it is full (one small write)
        self._step = evict_step(limit)
        self._read = read
        self._wopts = write_options
        #: the changes handed over at a barrier, until the worker wrote them
        self._frozen: Frozen | None = None
        self._frozen_written = threading.Event()
        self._frozen_written.set()

    # ------------------------------------------------------------------ reads
    def _load(self, key: Any) -> Any:
        """``key``'s value from the database (or ``_ABSENT``), now in the cache."""
        if len(self._cache) >= self._limit:
            self._evict()
        frozen = self._frozen
        value = _MISS if frozen is None else frozen.values.get(key, _MISS)
        if value is not _MISS and value is not _ABSENT and self.freeze is not None:
            # a value the operator changes in place: the worker writes the handed-over one
            value = self.freeze(value)
        if value is _MISS:
            raw = self.db.get(codec.pack(key))
            value = _ABSENT if raw is None else self._read(raw)
        self._cache[key] = value
        return value

    def __getitem__(self, key: Any) -> Any:
        v = self._cache.get(key, _MISS)
        if v is _MISS:
            v = self._load(key)
        if v is _ABSENT:
            raise KeyError(key)
        return v

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._cache.get(key, _MISS)
        if v is _MISS:
            v = self._load(key)
        return default if v is _ABSENT else v

    def __contains__(self, key: object) -> bool:
        v = self._cache.get(key, _MISS)
        if v is _MISS:
            v = self._load(key)
        return v is not _ABSENT

    def __len__(self) -> int:
        return self._len

    # ------------------------------------------------------------------ writes
    def __setitem__(self, key: Hashable, value: Any) -> None:
        cur = self._cache.get(key, _MISS)
        if cur is _MISS:
            cur = self._load(key)
        if cur is _ABSENT:
            self._len += 1
        self._cache[key] = value
        self._dirty[key] = None

    def __delitem__(self, key: Hashable) -> None:
        if key not in self:
            raise KeyError(key)
        self._cache[key] = _ABSENT
        self._dirty[key] = None
        self._len -= 1

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            value = self._cache[key]
            del self[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[Any, Any]:
        for key in self:
            return key, self.pop(key)
        raise KeyError("popitem(): the mapping is empty")

    # setdefault: MutableMapping's (through this class's ``[]`` and set)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        items = other.items() if isinstance(other, Mapping) else other
        for k, v in items:
            self[k] = v
        for k, v in kwargs.items():
            self[k] = v

    def clear(self) -> None:
        self.flush()
        raws = list(self._keys_raw())
        self._len = 0

        def delete_all(batch: Any) -> None:
            for raw in raws:
                batch.delete(raw)

        self._write(delete_all)

    def touched(self, key: Hashable) -> None:
        """The value of ``key`` was changed in place: it is written with the next flush."""
        if self._cache.get(key, _ABSENT) is not _ABSENT:
            self._dirty[key] = None

    def _write(self, fill: Callable[[Any], object]) -> None:
        """Write the batch ``fill(batch)`` fills with the number of keys, atomically."""
        count, meta = self._len.to_bytes(8, "little"), self._meta_cf

        def fill_counted(batch: Any) -> None:
            fill(batch)
            batch.put(_COUNT, count, meta)

        write(self.db, fill_counted, self._wopts, self.path)

    def _evict(self) -> None:
        """The cache is full: the oldest ``_step`` keys leave it, the changed ones written.

        While the changes handed over at a barrier are not written yet
        (the worker writes them, then takes the RocksDB checkpoint), nothing
        may reach the database: the cache grows past its limit meanwhile, and
        only at ``FROZEN_GROWTH`` times the limit are they written here
        (:meth:`wait_frozen`).
        """
        if self._frozen is not None:
            if len(self._cache) < FROZEN_GROWTH * self._limit:
                return
            self.wait_frozen()
        dirty, cache = self._dirty, self._cache
        pack = codec.pack
        changed: list[tuple[Any, Any]] = []
        for k in list(islice(cache, self._step)):
            v = cache.pop(k)
            if k in dirty:
                del dirty[k]
                changed.append((k, v))
        if changed:
            self._write(lambda batch: _fill(batch, changed, pack))

    def flush(self) -> int:
        """Write the keys changed since the last flush to the database; empty the cache.

        Returns the number of keys written.  Called before every key is read
        from the database (iteration, ``clear``), after the worker wrote the
        changes handed over at a barrier, if any.
        """
        self.wait_frozen()
        dirty = self._dirty
        n = len(dirty)
        if n:
            for fill in write_chunks(dirty, self._cache):
                self._write(fill)
            dirty.clear()
        self._cache.clear()
        return n

    # ------------------------------------------------------------------ barriers
    def hand_over(self) -> Frozen:
        """At a barrier: hand the changes since the last write over (O(1): the cache itself).

        The cache is emptied; :meth:`write_frozen` (worker thread) writes them.
        With ``freeze`` (values changed in place) each changed value is copied.
        """
        self.wait_frozen()
        dirty, self._dirty = self._dirty, {}
        freeze = self.freeze
        cache = self._cache
        if freeze is None:
            values = cache  # values immutable (the KeyedState rule): the cache itself
        else:
            values = {}
            for k in dirty:
                v = cache[k]
                values[k] = v if v is _ABSENT else freeze(v)
        self._cache = {}
        frozen = Frozen(values, dirty, self._len)
        self._frozen = frozen
        self._frozen_written.clear()
        return frozen

    def write_frozen(self, frozen: Frozen) -> int:
        """Write what :meth:`hand_over` handed over (worker thread); the keys written.

        The caller releases it (:meth:`release`) once the RocksDB checkpoint
        is taken: until then no other write may reach the database.
        """
        if frozen.dirty:
            # in batches of WRITE_CHUNK keys (the GIL is released between them); not
            # atomic, and need not be: reads look in ``frozen`` first until it is
            # released, and a crash restores a checkpoint, never this database
            for fill in write_chunks(frozen.dirty, frozen.values):
                write(self.db, fill, self._wopts, self.path)
            count, meta = frozen.count.to_bytes(8, "little"), self._meta_cf
            write(self.db, lambda batch: batch.put(_COUNT, count, meta), self._wopts, self.path)
        return len(frozen.dirty)

    def release(self, frozen: Frozen) -> None:
        """The frozen changes are in the database (or the job stops): reads go there again."""
        if self._frozen is frozen:
            self._frozen = None
        self._frozen_written.set()

    def wait_frozen(self) -> None:
        """Before anything else is written: the changes handed over at the last barrier.

        The worker writes them (and takes the RocksDB checkpoint).  When the
        database is needed before it got to it (the cache filled up, or every
        key is read), they are written here, with the checkpoint, by
        ``home.make_pending()``: the worker may not even have started, since
        it is started from the event loop this thread may be running.
        """
        if self._frozen is None:
            return
        self.waits += 1
        if self.home is not None:
            self.home.make_pending()
        self._frozen_written.wait()

    # ------------------------------------------------------------------ iteration
    def _items_raw(self) -> Iterator[tuple[bytes, bytes]]:
        self.flush()
        return iter(self.db.items())

    def __iter__(self) -> Iterator[Any]:
        read = self._read
        return (read(k) for k in self._keys_raw())

    def _keys_raw(self) -> Iterator[bytes]:
        self.flush()
        keys: Iterator[bytes] = iter(self.db.keys())
        return keys

    def keys(self) -> KeysView[Any]:
        return _Keys(self)

    def values(self) -> ValuesView[Any]:
        return _Values(self)

    def items(self) -> ItemsView[Any, Any]:
        return _Items(self)

    def __reversed__(self) -> Iterator[object]:
        keys: list[Any] = list(self)
        return iter(keys[::-1])

    def copy(self) -> dict[Any, Any]:
        return dict(self.items())

    def copy_all(self) -> dict[Any, Any]:
        return self.copy()

    def __or__(self, other: Any) -> dict[Any, Any]:
        return self.copy() | dict(other)

    def __ror__(self, other: Any) -> dict[Any, Any]:
        return dict(other) | self.copy()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and self.copy() == dict(other)

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RocksKeyedState({self.path!r}, {self._len} keys)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (KeyedState, (self.copy(),))

    # ------------------------------------------------------------------ checkpoints
    def cached(self) -> int:
        """The keys held as Python objects now (the cache: at most ``limit``, but while a
        barrier's changes are being written)."""
        return len(self._cache)

    def pending_changes(self) -> int:
        return len(self._dirty)

    def take_delta(self) -> KeyedDelta:
        raise TypeError(
            f"{self!r} is checkpointed as a RocksDB checkpoint, not as a delta of its keys"
        )

    def close(self) -> None:
        """Close the database (the mapping cannot be used any more)."""
        if self._frozen is not None:
            self.release(self._frozen)
        db, self.db = self.db, _Closed(self.path)
        meta, self._meta, self._meta_cf = self._meta, self.db, None
        self._cache.clear()
        self._dirty.clear()
        if not isinstance(db, _Closed):
            meta.close()
            db.close()


@dataclass
class Frozen:
    """The changes of a mapping handed over at a barrier (:meth:`RocksKeyedState.hand_over`)."""

    #: key -> value (or the absent marker), for every key in ``dirty`` (and maybe others)
    values: dict[Any, Any]
    dirty: KeyedDirty
    #: the number of keys at the barrier
    count: int


class _Keys(KeysView[Any]):
    _mapping: RocksKeyedState

    def __iter__(self) -> Iterator[Any]:
        return iter(self._mapping)


class _Values(ValuesView[Any]):
    _mapping: RocksKeyedState

    def __iter__(self) -> Iterator[Any]:
        read = self._mapping._read  # noqa: SLF001 - the mapping's own decoder
        return (read(v) for _, v in self._mapping._items_raw())  # noqa: SLF001


class _Items(ItemsView[Any, Any]):
    _mapping: RocksKeyedState

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        read = self._mapping._read  # noqa: SLF001 - the mapping's own decoder
        return ((read(k), read(v)) for k, v in self._mapping._items_raw())  # noqa: SLF001
