"""``KeyedState``: a mapping that checkpoints incrementally.

A ``KeyedState`` is a ``dict`` that records which keys were set
or deleted since the last checkpoint.  Used as an ``accumulate`` state
(``accumulate(f, start=KeyedState())``, ``f`` updating it in place and
returning it), a checkpoint writes only those keys, as a *delta* on top of
the previous checkpoint; every so often it writes a whole *base* instead
(compaction).  See "Keyed state" in ``docs/checkpointing.md``.

Rules for the user function:

* update the mapping **in place** and return the same object
  (``acc[k] = acc.get(k, 0) + 1; return acc``).  Returning another mapping
  is correct but not incremental: the next checkpoint writes it whole;
* treat values as immutable (numbers, strings, tuples, frozen dataclasses):
  to change a value, assign a new one (``acc[k] = acc[k] + (x,)``).  A value
  mutated in place (``acc[k].append(x)``) is not seen as changed, and the
  checkpoint written in the background may hold either version of it.

An operator whose values are mutable containers changed in place (the
per-key buffers of ``partition(key=...)``) creates its ``KeyedState`` with a
``freeze`` function (e.g. ``list``, a copy) and calls :meth:`KeyedState.touched`
after each change: at the barrier the changed values are copied with
``freeze`` (O(changed keys)), so the background write sees them as they were.

Until its first checkpoint (``take_delta``) a ``KeyedState`` records
nothing: the first checkpoint copies it whole (a base), so a pipeline that
never checkpoints keeps no record of changes.  A key deleted is recorded as
:data:`DELETED` until the next checkpoint, also when it was set since the
last one.  So that keys that come and go (join buffers, closed windows) do
not pile up such marks between two checkpoints, once the record holds more
than twice as many keys as the mapping, plus :data:`TOMBSTONE_SLACK`, it is
dropped and the next checkpoint copies the mapping whole, as the first one
does (a new chain): the memory a ``KeyedState`` keeps for its next
checkpoint is bounded by the keys it holds, not by how many came and went.

>>> counts = KeyedState({"a": 1})
>>> counts.take_delta().changes  # the first checkpoint: all of it
{'a': 1}
>>> counts["b"] = counts.get("b", 0) + 1
>>> del counts["a"]
>>> dict(counts), counts.take_delta().changes
({'b': 1}, {'b': 1, 'a': DELETED})
"""

from __future__ import annotations

import itertools
import logging
from abc import abstractmethod
from collections.abc import Callable, Hashable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

logger = logging.getLogger(__name__)

__all__ = [
    "KeyedStore",
    "KeyedState",
    "KeyedDelta",
    "DELETED",
    "TOMBSTONE_SLACK",
    "as_keyed",
    "no_default",
]


class _Marker:
    """A named marker value; pickles to the module-level object of its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


#: the value of a key that was deleted, in a delta
DELETED = _Marker("DELETED")

#: marker for "take the first record as the start state" in ``accumulate``
no_default = _Marker("no_default")

_lineages = itertools.count(1)

#: deleted keys a ``KeyedState`` records beyond the number of keys it holds
#: before its next checkpoint becomes a copy of the whole mapping instead
TOMBSTONE_SLACK = 1024


@dataclass(frozen=True)
class KeyedDelta:
    """The keys a :class:`KeyedState` changed since its last checkpoint.

    ``changes`` maps each changed key to its new value or :data:`DELETED`.
    ``complete`` is True when the changes cover the whole mapping (it was
    created with its content and never checkpointed): they can start a
    chain.  ``lineage`` names the object the changes belong to.
    """

    changes: dict[Any, Any]
    complete: bool
    lineage: int


_dict_set = dict.__setitem__
_dict_pop = dict.pop


class KeyedStore(MutableMapping[Any, Any]):
    """Keyed state, wherever its keys live: the mapping an operator keeps per key.

    Two backends fill it: :class:`KeyedState` (a ``dict`` in memory,
    checkpointed as deltas of its changed keys) and
    :class:`rivermark.checkpoint.state.rocks.RocksKeyedState` (keys in RocksDB,
    ``external``: checkpointed as a RocksDB checkpoint).  An operator reads
    and writes it as a mutable mapping, calls :meth:`touched` after changing
    a value in place, and sets ``freeze`` (a copy of such a value at the
    barrier); the job calls the rest.
    """

    __slots__ = ()

    #: checkpointed by its own backend (a RocksDB checkpoint), not as deltas of its keys
    external: ClassVar[bool] = False
    #: copies a changed value at the barrier (values changed in place); None: as is
    freeze: Callable[[Any], Any] | None

    @abstractmethod
    def touched(self, key: Hashable) -> None:
        """The value of ``key`` was changed in place: the next checkpoint writes it."""

    @abstractmethod
    def pending_changes(self) -> int:
        """Keys the next checkpoint writes."""

    @abstractmethod
    def take_delta(self) -> KeyedDelta:
        """At a barrier: the changes since the last checkpoint (``external`` stores refuse)."""

    @abstractmethod
    def copy_all(self) -> dict[Any, Any]:
        """A copy of the whole mapping in memory (O(n))."""

    def copy(self) -> dict[Any, Any]:
        """A plain ``dict`` of every key (read from disk for a store that is not in memory)."""
        return dict(self.items())


class KeyedState(dict[Any, Any], KeyedStore):
    """A ``dict`` that records its changed keys for incremental checkpoints.

    Reads (``in``, ``[]``, ``get``, ``len``, iteration, ``dict(state)``) are
    the ``dict``'s own; every method that changes it records the keys it
    set or deleted.  ``copy()`` and ``|`` return a plain ``dict``.  See the
    module docs for how a user function must update it.

    ``record`` is for a hot loop that replaces the values of keys the
    mapping **already holds** and cannot afford a Python call per value:
    read it once per value, or once per loop in which no barrier comes (it
    changes at each barrier; one dropped meanwhile for a copy, see the module
    docs, records into nothing that is read, harmless), then ``if record is not None:
    record(key, value)`` and ``dict.__setitem__(state, key, value)``.  It
    is the record's own ``__setitem__`` (a call in C), None while nothing is
    recorded.  What a change records is written in this class only: a key
    set records its value, a key deleted (``del``, ``pop``) :data:`DELETED`
    through the mapping's own methods.

    >>> s = KeyedState({"a": 1})
    >>> s.record is None  # before the first checkpoint nothing is recorded
    True
    >>> _ = s.take_delta()
    >>> record = s.record
    >>> record("a", 2); dict.__setitem__(s, "a", 2)
    >>> s.take_delta().changes
    {'a': 2}
    """

    __slots__ = ("_changes", "_complete", "lineage", "freeze", "record")

    def __init__(
        self,
        initial: Mapping[Any, Any] | None = None,
        *,
        freeze: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__()
        if initial is not None:
            dict.update(self, initial)
        #: every key set (its value) or deleted (DELETED) since the last checkpoint;
        #: None until the first checkpoint, or once it held too many deleted keys
        #: (the next checkpoint copies the whole mapping)
        self._changes: dict[Any, Any] | None = None
        #: records that a key holds a new value (the record's bound ``__setitem__``);
        #: None while nothing is recorded.  See the class docs.
        self.record: Callable[[Any, Any], None] | None = None
        self._complete = True
        self.lineage = next(_lineages)
        #: copies a changed value at the barrier (values changed in place); None: as is
        self.freeze = freeze

    @classmethod
    def restored(
        cls, data: Mapping[Any, Any], *, freeze: Callable[[Any], Any] | None = None
    ) -> KeyedState:
        """A mapping restored from a checkpoint: no pending changes."""
        self = cls.__new__(cls)
        dict.update(self, data)
        self._recording({})
        self._complete = False
        self.lineage = next(_lineages)
        self.freeze = freeze
        return self

    def _recording(self, changes: dict[Any, Any] | None) -> None:
        """Record the changes into ``changes`` from now on (None: record nothing)."""
        self._changes = changes
        self.record = None if changes is None else changes.__setitem__

    # the changes (every other method is the dict's own); the record windows' step
    # and their closing replace values with ``record`` (operators/eventtime.py,
    # operators/windowstore.py)
    def __setitem__(self, key: Hashable, value: Any) -> None:
        changes = self._changes
        if changes is not None:
            changes[key] = value
        _dict_set(self, key, value)

    def __delitem__(self, key: Hashable) -> None:
        dict.__delitem__(self, key)
        changes = self._changes
        if changes is not None:
            changes[key] = DELETED
            if len(changes) > 2 * len(self) + TOMBSTONE_SLACK:
                self._recording(None)  # the next checkpoint: a copy, smaller than the record

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            value = dict.pop(self, key)
            changes = self._changes
            if changes is not None:
                changes[key] = DELETED
                if len(changes) > 2 * len(self) + TOMBSTONE_SLACK:
                    self._recording(None)  # as in __delitem__
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def pop_many(self, keys: list[Any]) -> list[Any]:
        """Remove ``keys`` (each one held) and return their values in order: ``pop`` of
        many keys, recorded at once (a DataFrame window store closes a span this way)."""
        values = list(map(_dict_pop, itertools.repeat(self), keys))  # one lookup per key, in C
        changes = self._changes
        if changes is not None:
            changes.update(dict.fromkeys(keys, DELETED))
            if len(changes) > 2 * len(self) + TOMBSTONE_SLACK:
                self._recording(None)  # as in __delitem__
        return values

    def popitem(self) -> tuple[Any, Any]:
        key, value = dict.popitem(self)
        changes = self._changes
        if changes is not None:
            changes[key] = DELETED
            if len(changes) > 2 * len(self) + TOMBSTONE_SLACK:
                self._recording(None)  # as in __delitem__
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        self[key] = default
        return default

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        changes = self._changes
        if changes is None and not kwargs:
            dict.update(self, other)  # nothing recorded: no copy of ``other`` either
            return
        new = dict(other, **kwargs)
        if changes is not None:
            changes.update(new)  # every key set is recorded (in C, not key by key)
        dict.update(self, new)

    def clear(self) -> None:
        if self._changes is not None:
            self._recording(None)  # the next checkpoint: an empty copy, not a mark per key
        dict.clear(self)

    def __ior__(self, other: object) -> KeyedState:  # type: ignore[misc]
        self.update(other)
        return self

    def touched(self, key: Hashable) -> None:
        """The value of ``key`` was changed in place: the next checkpoint writes it."""
        changes = self._changes
        if changes is not None:
            changes[key] = self[key]

    def __repr__(self) -> str:
        return f"KeyedState({dict(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled whole (e.g. inside other state): restored with every key pending
        return (KeyedState, (dict(self),))

    # checkpoints
    def pending_changes(self) -> int:
        """Keys the next checkpoint writes (all of them before the first checkpoint)."""
        return len(self) if self._changes is None else len(self._changes)

    def take_delta(self) -> KeyedDelta:
        """Hand over the changes since the last checkpoint and start recording anew.

        O(1): the dictionary of changes itself is handed over (with ``freeze``,
        each changed value is copied: O(changed keys)).  The first time, and
        after the record was dropped for holding too many deleted keys, a
        copy of the whole mapping (O(n), a ``dict`` copy in C), ``complete``:
        it starts a new chain.  Called by the job at a checkpoint's barrier.
        """
        changes, freeze = self._changes, self.freeze
        if changes is None:
            return KeyedDelta(self._take_all(), True, self.lineage)
        if freeze is not None:
            changes = {k: v if v is DELETED else freeze(v) for k, v in changes.items()}
        delta = KeyedDelta(changes, self._complete, self.lineage)
        self._recording({})
        self._complete = False
        return delta

    def _take_all(self) -> dict[object, object]:
        content = self.copy_all()
        self._recording({})
        self._complete = False
        return content

    def copy_all(self) -> dict[Any, Any]:
        """A copy of the whole mapping (O(n); a chain that cannot continue)."""
        freeze = self.freeze
        if freeze is not None:
            return {k: freeze(v) for k, v in self.items()}
        return dict(self)


def as_keyed(state: Mapping[Any, Any], *, freeze: Callable[[Any], Any] | None = None) -> KeyedStore:
    """An operator's keyed container from what its ``set_state`` was given.

    A :class:`KeyedStore` (a ``KeyedState`` restored from a delta chain, or
    the job's RocksDB mapping) is adopted, so its chain goes on with a delta
    at the next checkpoint; a plain mapping (a
    checkpoint written before the operator kept keyed state) becomes one,
    and the next checkpoint starts a chain with a base.

    >>> as_keyed({"a": 1}).pending_changes()
    0
    """
    if isinstance(state, KeyedStore):
        state.freeze = freeze
        return state
    return KeyedState.restored(dict(state), freeze=freeze)


def apply_delta(data: dict[Any, Any], changes: Mapping[Any, Any]) -> None:
    """Apply a delta's ``changes`` to ``data`` in place.

    >>> d = {"a": 1, "b": 2}
    >>> apply_delta(d, {"a": DELETED, "c": 3})
    >>> d
    {'b': 2, 'c': 3}
    """
    for k, v in changes.items():
        if v is DELETED:
            data.pop(k, None)
        else:
            data[k] = v
