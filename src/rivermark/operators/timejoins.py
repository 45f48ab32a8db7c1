"""Joins by event time: versioned tables and the as-of (temporal) join.

``changes.timestamps(func).to_table(key, value=...)`` keeps a **table**: per
key, the versions of its value by event time, built from a stream of
changes (each change an upsert of its key at its time; a value of ``None``
is a tombstone, which deletes the key from that time on).
``left.timestamps(func).join_asof(table, key=...)`` joins each left record
with its key's version valid at the record's time: the latest version at or
before it.

The join is **deterministic**: a left record at time ``t`` is joined only
once the table side's watermark is past ``t`` (``watermark > t``); until
then it waits in the join's buffer.  A change of the table that arrives
after its side's watermark passed its time (``time < watermark``, judged as
windows judge records) is late: it goes to the table's ``.late`` stream and
changes nothing, so every record is joined with the versions an
uninterrupted, in-order read would have given it.  ``mode="lookup"`` joins at
once with the latest version present instead (not a function of the input
alone: for users who prefer latency and say so).

**Retention.**  Per key the table keeps the versions from the newest one at
or before its *floor* on: the smallest of its joins' floors, a join's floor
being the smaller of its left side's watermark and the time of its oldest
waiting record (a lookup join needs only the latest version; a table without
joins uses its own watermark).  No left record that is not late can need an
older version.  Versions are dropped when their key changes; a key whose
newest version is a tombstone at or before both the floor and the table's
watermark (no change before it can come any more) is forgotten, when it
changes or, for a key that does not change again, at a later change of any
key once the floor has passed it: keys deleted do not pile up in a table
whose keys come and go.

The versions (a :class:`~rivermark.KeyedState` ``{key: ((time, value),
...)}``) and the waiting left records (``{seq: (time, key, record)}``) are
checkpoint state, written as data.  See ``docs/joins.md``.

>>> from rivermark import Stream
>>> changes, orders = Stream(), Stream()
>>> tiers = changes.timestamps(lambda c: c[0]).to_table(key=lambda c: c[1], value=lambda c: c[2])
>>> joined = orders.timestamps(lambda o: o[0]).join_asof(tiers, key=lambda o: o[1])
>>> out = joined.sink_to_list()
>>> changes.emit((0, "ann", "silver")); orders.emit((5, "ann"))
>>> out  # waits: a change at time 5 could still come
[]
>>> changes.emit((4, "ann", "gold")); changes.emit((9, "ann", "platinum")); out
[((5, 'ann'), 'gold')]
>>> tiers.get("ann"), tiers.as_of("ann", 6)
('platinum', 'gold')
"""

from __future__ import annotations

import bisect
import datetime as dt
import heapq
import itertools
import logging
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, Unpack

from rivermark.core.figures import JoinFigures
from rivermark.core.node import NodeOptions, Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.errors import ConfigurationError
from rivermark.operators.intervaljoin import IntervalJoin as IntervalJoin
from rivermark.operators.joinbase import LateSide, func_name, join_key
from rivermark.operators.timestamps import Results, Timestamps, _delay, _merge, attach
from rivermark.operators.watermarks import to_epoch
from rivermark.state import KeyedState, KeyedStore, as_keyed

logger = logging.getLogger(__name__)

__all__ = ["Table", "AsofJoin", "IntervalJoin"]

#: ``Table.as_of``'s answer when the key has no version at that time
_MISSING = object()


class TableReader(Protocol):
    """A join reading a :class:`Table` (:meth:`Table.add_join`)."""

    def floor(self) -> float:
        """The oldest time a record still to be joined may have (``+inf``: only the newest)."""
        ...


@Stream.register_api(attribute_name="to_table")
class Table(LateSide, Stream):
    """A keyed table versioned by event time, built from a stream of changes.

    Needs :meth:`Stream.timestamps` right above it (the time of each change).
    ``key`` (a callable, or an index/field name for ``x[key]``) gives the
    key; ``value`` (default: the record) the new value, ``None`` deleting
    the key (a tombstone).  Two changes of a key at the same time: the one
    that arrives last wins (keep a key's changes in one input partition).
    A change whose time is below its side's watermark is late: it goes to
    ``.late`` and changes nothing.  :meth:`get` and :meth:`as_of` read the
    table from Python, while the job runs too.  Emits nothing itself.

    ``bootstrap=True``: a job reads the sources of the changes (Kafka
    topics) up to the end offsets they have when it starts, fresh or
    restored, before any other source of the job starts (see
    ``docs/joins.md``); outside a job it changes nothing.

    >>> s = Stream()
    >>> t = s.timestamps(lambda c: c["ts"], max_delay=5).to_table(key="id", value=lambda c: c.get("v"))
    >>> s.emit({"ts": 1, "id": "a", "v": 10}); s.emit({"ts": 3, "id": "a"})
    >>> t.as_of("a", 2), t.get("a"), t.get("b")
    (10, None, None)
    """

    _graphviz_shape = "cylinder"
    kind = "to_table"

    def __init__(
        self,
        upstream: Stream,
        key: Hashable | Callable[[Any], Any] = None,
        value: Callable[[Any], Any] | None = None,
        bootstrap: bool = False,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        self.clock: Timestamps = attach(self, "to_table", upstream)
        if not isinstance(bootstrap, bool):
            raise ConfigurationError(
                f"to_table: bootstrap must be True or False, got {bootstrap!r}; pass "
                "bootstrap=True to read the table's topic to its end before the other sources"
            )
        #: a job reads the changes' sources to their end before its other sources start
        self.bootstrap = bootstrap
        self.key = key
        self._key_of = join_key("to_table", key)
        if value is not None:
            check_callable("to_table", "value", value)
        self.value = value
        #: per key, its versions ``((time, value), ...)`` in time order (value None: deleted)
        self._versions: KeyedStore = KeyedState()
        #: the joins reading this table (they decide how far back versions are kept)
        self._joins: list[TableReader] = []
        #: versions dropped by retention since the job first started (checkpointed)
        self.versions_dropped = 0
        #: the keys whose newest version is a tombstone: ``(its time, n, key)`` (n unique)
        self._deleted: list[tuple[float, int, Any]] = []
        self._pushes = itertools.count()
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        clock = self.clock
        ts = clock.current
        try:
            k = self._key_of(x)
            v = x if self.value is None else self.value(x)
            hash(k)
        except Exception as e:
            self._user_error(x, e, self.value or self.key)
            return None
        if ts < clock.record_watermark:
            return self._send_late(x, metadata, ts)
        old = self._versions.get(k)
        if old and ts > old[-1][0]:  # in order of time (the common case): appended
            self._store(k, (*old, (ts, v)), True)
        else:
            self._put(k, ts, v, old)
        return None

    def _put(self, k: object, ts: float, v: object, old: Any) -> None:
        """Add the version ``(ts, v)`` to ``k``'s versions ``old`` (falsy: none held)."""
        if not old:
            self._store(k, ((ts, v),), False)
            return
        versions = list(old)
        i = bisect.bisect_right(versions, ts, key=_time)
        if i and versions[i - 1][0] == ts:
            versions[i - 1] = (ts, v)  # the same time again: the later change wins
        else:
            versions.insert(i, (ts, v))
        self._store(k, tuple(versions), True)

    def _store(self, k: object, versions: tuple[tuple[float, object], ...], held: bool) -> None:
        """Keep ``versions`` of ``k`` (``held``: the table holds ``k``) from the newest
        at or before the floor on."""
        joins = self._joins
        floor = joins[0].floor() if len(joins) == 1 else self.floor()
        if len(versions) > 1 and versions[1][0] <= floor:  # versions[0] is not needed
            first = _count_until(versions, floor) - 1
            self.versions_dropped += first
            versions = versions[first:]
        watermark = self.clock.tracker.watermark
        limit = floor if floor < watermark else watermark
        deleted = self._deleted
        if deleted and deleted[0][0] <= limit:
            self._forget_deleted(limit)
            held = k in self._versions
        newest = versions[-1]
        if newest[1] is None:
            if len(versions) == 1 and newest[0] <= limit:
                # deleted, no join can look before it, and no change before it can come
                self.versions_dropped += 1
                self._versions.pop(k, None)
                return
            heapq.heappush(deleted, (newest[0], next(self._pushes), k))
        store = self._versions
        if held and type(store) is KeyedState:
            # a key it holds gets a new value: recorded and set in C (see KeyedState.record)
            record = store.record
            if record is not None:
                record(k, versions)
            dict.__setitem__(store, k, versions)
        else:
            store[k] = versions

    def _forget_deleted(self, limit: float) -> None:
        """Forget the keys whose newest version is a tombstone at or before ``limit``.

        No join can look before ``limit`` (the floor) and no change before it
        can come (the table's watermark): the tombstone answers as no version
        does, so the key and its older versions go.
        """
        deleted, versions_of = self._deleted, self._versions
        while deleted and deleted[0][0] <= limit:
            _, _, k = heapq.heappop(deleted)
            versions = versions_of.get(k)
            if versions and versions[-1][1] is None and versions[-1][0] <= limit:
                self.versions_dropped += len(versions)
                del versions_of[k]

    def add_join(self, join: TableReader) -> None:
        """``join`` reads this table: its :meth:`~TableReader.floor` bounds the retention."""
        self._joins.append(join)

    def floor(self) -> float:
        """The time at or before which only the newest version of a key is kept."""
        if not self._joins:
            return self.clock.watermark
        return min(j.floor() for j in self._joins)

    def as_of(self, key: object, time: float | dt.datetime, default: object = None) -> object:
        """The value of ``key`` at event time ``time`` (the latest version at or before it).

        ``time``: epoch seconds or a timezone-aware datetime, as event times
        are.  ``default`` when the key had no version then or was deleted.
        Exact for times at or after the retention floor (:meth:`floor`).
        """
        try:
            seconds = to_epoch(time)
        except (TypeError, ValueError) as e:
            raise ConfigurationError(f"{self.display_name()}: as_of(key, time): {e}") from None
        found = self._at(key, seconds)
        return default if found is _MISSING or found is None else found

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key`` in its newest version (``default`` if none or deleted)."""
        versions = self._versions.get(key)
        if not versions or versions[-1][1] is None:
            return default
        return versions[-1][1]

    def version_at(self, key: object, time: float) -> tuple[float, object] | None:
        """The version of ``key`` valid at ``time``: ``(its time, value)`` (value None:
        deleted), or None when the key had none."""
        versions = self._versions.get(key)
        if not versions:
            return None
        i = _count_until(versions, time)
        return (versions[i - 1][0], versions[i - 1][1]) if i else None

    def joined_value(self, key: object, time: float, tolerance: float | None) -> object:
        """The value a join gives a record of ``key`` at ``time``: ``key``'s version at
        ``time`` (None: none, deleted, or older than ``tolerance`` seconds before it)."""
        versions = self._versions.get(key)
        if not versions:
            return None
        newest = versions[-1]
        if newest[0] <= time:  # the common case: no search
            found = newest
        else:
            i = _count_until(versions, time)
            if not i:
                return None
            found = versions[i - 1]
        if tolerance is not None and time - found[0] > tolerance:
            return None
        return found[1]

    def _at(self, key: object, time: float) -> object:
        versions = self._versions.get(key)
        if not versions:
            return _MISSING
        i = _count_until(versions, time)
        return versions[i - 1][1] if i else _MISSING

    @property
    def size(self) -> int:
        """How many keys the table holds (deleted keys still needed by a join included)."""
        return len(self._versions)

    def records_held(self) -> int | None:
        return len(self._versions)

    def join_figures(self) -> JoinFigures:
        return JoinFigures(keys=len(self._versions), versions_dropped=self.versions_dropped)

    def _counters(self) -> dict[str, object]:
        return {**super()._counters(), "versions_dropped": self.versions_dropped}

    def get_state(self) -> object:
        # the tombstones still to forget, (time, key): a table in RocksDB is not read whole
        deleted = [(t, k) for t, _, k in self._deleted]
        return {"versions": self._versions, "deleted": deleted, "counters": self._counters()}

    def set_state(self, state: Any) -> None:
        self._versions = as_keyed(state["versions"])
        self._restore_counters(state)
        self.versions_dropped = int(state.get("counters", {}).get("versions_dropped", 0))
        if "deleted" in state:
            pending = [(float(t), k) for t, k in state["deleted"]]
        elif self._versions.external:  # written before tables kept them: not read whole
            pending = []
        else:
            pending = [(v[-1][0], k) for k, v in self._versions.items() if v and v[-1][1] is None]
        self._deleted = [(t, next(self._pushes), k) for t, k in pending]
        heapq.heapify(self._deleted)

    def state_signature(self) -> str:
        key = func_name(self.key) if callable(self.key) else repr(self.key)
        value = "record" if self.value is None else func_name(self.value)
        return f"Table(key={key}, value={value})"


def _time(version: tuple[float, object]) -> float:
    return version[0]


def _count_until(versions: Sequence[tuple[float, object]], t: float) -> int:
    """How many of ``versions`` (in time order) are at or before ``t`` (``bisect_right``
    by time; the newest one first, the common case, without a call per step)."""
    n = len(versions)
    if versions[n - 1][0] <= t:
        return n
    if n <= 8:  # a few versions (retention keeps few): back from the newest
        i = n - 1
        while i and versions[i - 1][0] > t:
            i -= 1
        return i
    return bisect.bisect_right(versions, t, 0, n - 1, key=_time)


@Stream.register_api(attribute_name="join_asof")
class AsofJoin(LateSide, Stream):
    """Join each record with its key's version in ``table`` at the record's time.

    Emits ``(record, value)``: ``value`` is the latest version of the key at
    or before the record's time.  ``how="inner"`` (default) leaves out records
    whose key had no version then (or was deleted); ``how="left"`` emits them
    with ``None``.  ``key`` (a callable, or an index/field name) gives the
    record's key in the table; ``tolerance`` (seconds or a duration string) leaves out
    a version older than that before the record's time.

    ``mode="event_time"`` (default; needs :meth:`Stream.timestamps` right
    above it) is deterministic: a record waits until the table's watermark
    is past its time, then is joined; a record whose time is below its own
    side's watermark is late and goes to ``.late``.  ``mode="lookup"``
    joins every record at once with the key's newest version present: the
    answer depends on how far the table has been read, so a replay can
    differ.

    >>> from rivermark import Stream
    >>> c, s = Stream(), Stream()
    >>> table = c.timestamps(lambda r: r[0]).to_table(key=1, value=lambda r: r[2])
    >>> j = s.timestamps(lambda r: r[0]).join_asof(table, key=1, how="left")
    >>> out = j.sink_to_list()
    >>> for r in [(1, "x", "a"), (4, "x", "b")]:
    ...     c.emit(r)
    >>> s.emit((2, "x")); s.emit((3, "y")); out
    [((2, 'x'), 'a'), ((3, 'y'), None)]
    """

    _graphviz_shape = "triangle"
    kind = "join_asof"

    def __init__(
        self,
        upstream: Stream,
        table: Table,
        key: Hashable | Callable[[Any], Any] = None,
        how: str = "inner",
        mode: str = "event_time",
        tolerance: Any = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        if not isinstance(table, Table):
            raise ConfigurationError(
                f"join_asof: table must be a table, got {table!r}; "
                "make one with changes.timestamps(func).to_table(key=...)"
            )
        if how not in ("inner", "left"):
            raise ConfigurationError(f"join_asof: how must be 'inner' or 'left', got {how!r}")
        if mode not in ("event_time", "lookup"):
            raise ConfigurationError(
                f"join_asof: mode must be 'event_time' (deterministic) or 'lookup' "
                f"(the newest version present, not deterministic), got {mode!r}"
            )
        self.clock: Timestamps | None = (
            attach(self, "join_asof", upstream) if mode == "event_time" else None
        )
        self.table = table
        self.key = key
        self._key_of = join_key("join_asof", key)
        self.how = how
        self.mode = mode
        #: a version older than this many seconds before the record is not used
        self.tolerance = None if tolerance is None else _delay(tolerance, "join_asof", "tolerance")
        #: the records waiting for the table's watermark: ``{seq: (time, key, record)}``
        self._waiting: KeyedStore = KeyedState()
        self._heap: list[tuple[float, int]] = []
        self._seq = 0
        #: left records that waited for the table's watermark, since the job first started
        self.waited = 0
        # the table is an upstream too (it emits nothing): a job that runs the join
        # finds the table and the source of its changes in the graph
        Stream.__init__(self, upstreams=[upstream, table], **kwargs)
        table.add_join(self)
        if mode == "event_time":
            table.clock.add_client(self)  # the table's watermark releases waiting records

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        try:
            k = self._key_of(x)
            hash(k)
        except Exception as e:
            self._user_error(x, e, self.key)
            return None
        clock = self.clock
        if clock is None:  # lookup: the newest version present
            return self._joined(x, self.table.get(k), metadata)
        t = clock.current
        if t < clock.record_watermark:
            return self._send_late(x, metadata, t)
        table_clock = self.table.clock
        if t < table_clock.tracker.watermark:  # every version at or before t is in
            return self._joined(x, self._version(k, t), metadata)
        seq = self._seq
        self._seq = seq + 1
        self.waited += 1
        waiting, entry = self._waiting, (t, k, x)
        if type(waiting) is KeyedState:
            # a new key, recorded and set in C: what KeyedState.__setitem__ does
            record = waiting.record
            if record is not None:
                record(seq, entry)
            dict.__setitem__(waiting, seq, entry)
        else:
            waiting[seq] = entry
        heapq.heappush(self._heap, (t, seq))
        due = math.nextafter(t, math.inf)
        if due < table_clock.due:  # table_clock.wake_at(due)
            table_clock.due = due
        return None

    def _version(self, k: Any, t: float) -> Any:
        return self.table.joined_value(k, t, self.tolerance)

    def _joined(self, x: Any, found: Any, metadata: Metadata | None) -> Results:
        if found is None and self.how == "inner":
            return None
        return self._emit((x, found), metadata)

    def close_until(self, watermark: float) -> Results:
        """The table's watermark moved: join the records whose time is below it."""
        heap = self._heap
        if not heap or heap[0][0] >= watermark:
            return None
        pop, heappop = self._waiting.pop, heapq.heappop
        value, tolerance = self.table.joined_value, self.tolerance
        inner, emit = self.how == "inner", self._emit
        results: Results = None
        while heap and heap[0][0] < watermark:
            t, k, x = pop(heappop(heap)[1])
            found = value(k, t, tolerance)
            if found is None and inner:
                continue
            results = _merge(results, emit((x, found), None))
        return results

    def next_due(self) -> float:
        return math.nextafter(self._heap[0][0], math.inf) if self._heap else math.inf

    def floor(self) -> float:
        """The oldest time a record still to be joined may have (see the module docs)."""
        if self.clock is None:
            return math.inf
        low: float = self.clock.tracker.watermark  # the property, without its call
        if self._heap and self._heap[0][0] < low:
            return self._heap[0][0]
        return low

    @property
    def waiting(self) -> int:
        """How many records wait for the table's watermark."""
        return len(self._waiting)

    def records_held(self) -> int | None:
        return len(self._waiting)

    def join_figures(self) -> JoinFigures:
        try:
            oldest: float | None = self._heap[0][0]
        except IndexError:  # none waits (or the last one left as this was read)
            oldest = None
        return JoinFigures(
            buffered={"left": len(self._waiting)},
            late=self._late_figures(1),
            waited=self.waited,
            oldest_waiting=oldest,
        )

    def _counters(self) -> dict[str, object]:
        return {**super()._counters(), "waited": self.waited}

    def get_state(self) -> object:
        return {"waiting": self._waiting, "seq": self._seq, "counters": self._counters()}

    def set_state(self, state: Any) -> None:
        self._waiting = as_keyed(state["waiting"])
        self._seq = int(state["seq"])
        self._restore_counters(state)
        self.waited = int(state.get("counters", {}).get("waited", 0))
        self._heap = [(float(v[0]), int(seq)) for seq, v in self._waiting.items()]
        heapq.heapify(self._heap)
        self.table.clock.recheck()

    def state_signature(self) -> str:
        key = func_name(self.key) if callable(self.key) else repr(self.key)
        tol = "" if self.tolerance is None else f", tolerance={self.tolerance}"
        return f"AsofJoin(key={key}, how={self.how}, mode={self.mode}{tol})"
