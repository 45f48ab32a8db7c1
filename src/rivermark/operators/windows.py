"""Count-based windows: partition, partition_unique, sliding_window.

A record parked in a window keeps its reference (retained when it arrives)
until the window it belongs to has been emitted and the downstream work has
finished, or until it is dropped (a duplicate in ``partition_unique``).
The parked values (without metadata) are checkpoint state.

The per-record step of ``partition`` and ``sliding_window`` is each
class's ``update`` (a :func:`~rivermark.execution.steps.step`), one
definition for every configuration and for tracked and untracked records
alike: the bookkeeping of references sits under ``if metadata`` (and the
node's count of tracked records held), which a generated graph, carrying
untracked records only, leaves out.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Unpack

from rivermark.core import runtime
from rivermark.core.node import (
    Fixed,
    NodeOptions,
    Planned,
    Stream,
    check_positive_int,
    identity,
)
from rivermark.core.refs import Metadata, merge_metadata, release_refs
from rivermark.errors import ConfigurationError
from rivermark.execution.steps import step
from rivermark.state import KeyedState, KeyedStore, as_keyed

logger = logging.getLogger(__name__)

__all__ = ["Partition", "PartitionUnique", "SlidingWindow"]

Results = list[Awaitable[object]] | None


def _key_name(key: Hashable) -> str:
    if callable(key):
        # optional: a key may be a column name, not a function
        return getattr(key, "__qualname__", None) or repr(key)
    return repr(key)


@Stream.register_api(attribute_name="partition")
class Partition(Stream):
    """Group records into tuples of ``n``.

    ``timeout`` (seconds): a partial tuple is emitted that long after its
    first record arrived (the node then runs on the event loop).  ``key``
    (a callable, or an index/field for ``x[key]``) keeps a separate group
    per key, each emitted when it reaches ``n`` records; the per-key groups
    are then a :class:`~rivermark.KeyedState`, so a checkpoint writes only
    the groups changed since the previous one.

    >>> s = Stream()
    >>> L = s.partition(3).sink_to_list()
    >>> for i in range(7):
    ...     s.emit(i)
    >>> L
    [(0, 1, 2), (3, 4, 5)]
    >>> s2 = Stream(); L2 = s2.partition(2, key=lambda x: x % 2).sink_to_list()
    >>> for i in range(5):
    ...     s2.emit(i)
    >>> L2
    [(0, 2), (1, 3)]
    """

    _graphviz_shape = "diamond"

    key = Fixed()
    timeout = Fixed()
    # read on every record, held as constants by the generated code: assigning one
    # (or set_state replacing the open group) rebuilds that code; the open group
    # is otherwise changed in place only
    n = Planned()
    current = Planned()

    def __init__(
        self,
        upstream: Stream,
        n: int,
        timeout: float | None = None,
        key: Hashable | Callable[[Any], Any] | None = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        check_positive_int("partition", "n", n)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
        ):
            raise ConfigurationError(
                f"partition: timeout must be a number of seconds > 0, got {timeout!r}; "
                "pass e.g. timeout=1.5, or None to emit only full partitions"
            )
        self._n = n
        self._timeout = timeout
        self._key = key
        #: the open group (no key)
        self._current: list[Any] = []
        #: the open group of each key (with a key; checkpointed incrementally)
        self._buffers: KeyedStore = KeyedState(freeze=list)
        #: the metadata of the tracked records in each open group (key None: no key)
        self._metas: dict[Any, list[dict[str, Any]]] = {}
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.in_flight = 0
        #: the records in keyed open groups, counted as they come and go: the metrics
        #: read it from their own thread, where the groups (RocksDB state) must not be
        #: touched (without a key the one group is a list, whose length is read directly)
        self._held = 0
        # asynchronous only when a timeout needs the event loop
        self._is_async = timeout is not None
        Stream.__init__(self, upstream, **kwargs)

    def _groups(self) -> list[list[object]]:
        return [self._current] if self._key is None else list(self._buffers.values())

    def records_held(self) -> int | None:
        if self._key is None:
            return len(self._current)  # a list's length: safe to read from any thread
        # a plain attribute: reading the groups from another thread would write a
        # RocksDB mapping's cache out under the operator (see Stream.records_held)
        return self._held

    def emits_later(self) -> bool:
        # with a timeout, an open partition is emitted when it expires
        if self._timeout is not None and self.records_held():
            return True
        return self.in_flight > 0

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        if self._timeout is not None and self.failure is not None:
            self._raise_if_failed()  # a timed-out partition could not be passed on
        if self._key is None:
            k = None
            buf = self._current
        else:
            try:
                k = self._key_of(x)
                buf = self._group(k)
            except Exception as e:  # the key function raised, or the key is unhashable
                self._user_error(x, e, self._key)
                return None
            self._held += 1
        buf.append(x)
        if metadata:  # a tracked record: its references are kept with the group
            self._retain_refs(metadata)
            self._metas.setdefault(k, []).extend(metadata)
        if len(buf) < self._n:
            if self._timeout is not None and k not in self._timers:
                self._arm(k)
            return None
        if self._timeout is not None:
            self._disarm(k)
        out, meta = self._take(k)
        if meta:  # tracked records in the group: it carries their references on
            return self._emit_and_release(out, meta, meta)
        return self._emit(out, None)

    def end_of_input(self) -> list[object] | None:
        """The input ended (a job's sources are exhausted): a partial group is not emitted
        (only ``timeout=`` emits one, as in streamz); say so, naming the node."""
        held = self.records_held() or 0
        if held and self._timeout is None:
            logger.warning(
                "%s: the input ended with %d record(s) in partial group(s) of fewer than %d; "
                "they are not emitted (a group is emitted when it has n records) and stay in "
                "the node's state; pass timeout= to emit partial groups",
                self.display_name(), held, self.n,
            )  # fmt: skip
        return None

    def _key_of(self, x: Any) -> Any:
        k = self._key
        return k(x) if callable(k) else x[k]

    def _group(self, k: object) -> list[object]:
        """The open group of key ``k`` (a new one if there is none), marked as changed."""
        groups = self._buffers
        buf = groups.get(k)
        if buf is None:
            buf = groups[k] = []
        groups.touched(k)
        return buf

    def _take(self, k: Any) -> tuple[tuple[Any, ...], Metadata | None]:
        """Group ``k`` as a tuple, with its tracked records' metadata; the group is emptied."""
        if self._key is None:
            out = tuple(self._current)
            self._current.clear()
        else:
            out = tuple(self._buffers.pop(k, ()))
            self._held -= len(out)
        meta = self._metas.pop(k, None) if self._metas else None
        return out, (meta or None)

    # ------------------------------------------------------------------ timeout
    def _arm(self, k: Hashable) -> None:
        loop = self.loop
        assert self._timeout is not None
        if runtime.in_loop_thread(loop):
            self._timers[k] = loop.call_later(self._timeout, self._on_timeout, k)
        else:  # called from another thread: arm it on the loop
            loop.call_soon_threadsafe(self._arm_if_pending, k)

    def _disarm(self, k: Hashable) -> None:
        timer = self._timers.pop(k, None)
        if timer is not None:
            timer.cancel()

    def _pending(self, k: Hashable) -> bool:
        return bool(self._current) if self._key is None else k in self._buffers

    def _arm_if_pending(self, k: Hashable) -> None:
        if self._pending(k) and k not in self._timers:
            assert self._timeout is not None
            self._timers[k] = self.loop.call_later(self._timeout, self._on_timeout, k)

    def _on_timeout(self, k: Hashable) -> None:
        self._timers.pop(k, None)
        if not self._pending(k):
            return
        out, meta = self._take(k)
        # emit at once (so partitions keep their order); only the waiting is a task
        self.in_flight += 1
        try:
            results = self._emit(out, meta)
        except Exception as e:
            self._fail(e)  # the partition stays in flight and incomplete
            return
        if not results:
            self.in_flight -= 1
            release_refs(meta)
            return
        task = asyncio.ensure_future(self._finish_later(results, meta))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish_later(self, results: Results, meta: Metadata | None) -> None:
        try:
            await runtime.gather_results(results)
        except Exception as e:
            self._fail(e)  # the partition stays in flight and incomplete
            return
        self.in_flight -= 1
        release_refs(meta)

    # ------------------------------------------------------------------ state
    def get_state(self) -> object:
        if self._key is not None:
            # the live groups: the checkpoint copies the changed ones at the barrier
            return {"buffers": self._buffers}
        return {"buffers": [(None, list(self._current))] if self._current else []}

    def set_state(self, state: Any) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        buffers = state["buffers"]
        self._metas = {}
        if self._key is None:
            # by the public name: code that holds the old group is rebuilt
            self.current = [v for _, group in buffers for v in group]
            keys: list[Any] = [None] if self._current else []
        else:
            # a checkpoint before keyed state held a list of (key, records) pairs
            self._buffers = as_keyed(
                buffers if isinstance(buffers, KeyedStore) else {k: list(v) for k, v in buffers},
                freeze=list,
            )
            keys = list(self._buffers)
        self._held = 0 if self._key is None else sum(len(g) for g in self._groups())
        if self._timeout is not None:
            # restored partial partitions get a fresh timeout (timers are not state)
            for k in keys:
                self.loop.call_soon_threadsafe(self._arm_if_pending, k)

    def state_signature(self) -> str:
        return f"Partition(n={self.n}, timeout={self._timeout}, key={_key_name(self._key)})"


@Stream.register_api(attribute_name="partition_unique")
class PartitionUnique(Stream):
    """Group records into tuples of ``n`` records with distinct keys.

    ``key`` is a callable or an index/field (``x[key]``).  For a repeated key
    ``keep="first"`` drops the new record, ``keep="last"`` replaces the old
    one (moving it to the end).  A dropped or replaced record completes at
    once (its reference is released).

    >>> s = Stream()
    >>> L = s.partition_unique(3).sink_to_list()
    >>> for v in [1, 2, 1, 3, 1, 3, 3, 2]:
    ...     s.emit(v)
    >>> L
    [(1, 2, 3), (1, 3, 2)]
    >>> s2 = Stream(); L2 = s2.partition_unique(2, keep="last").sink_to_list()
    >>> for v in [1, 1, 2]:
    ...     s2.emit(v)
    >>> L2
    [(1, 2)]
    """

    _graphviz_shape = "diamond"

    def __init__(
        self,
        upstream: Stream,
        n: int,
        key: Hashable | Callable[[Any], Any] = identity,
        keep: str = "first",
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        check_positive_int("partition_unique", "n", n)
        if keep not in ("first", "last"):
            raise ConfigurationError(
                f"partition_unique: keep must be 'first' or 'last', got {keep!r}; "
                "pass keep='first' (drop later duplicates) or keep='last' (replace)"
            )
        self.n = n
        self.key = key
        self.keep = keep
        self._buffer: dict[Any, Any] = {}
        self._meta: dict[Any, Metadata | None] = {}
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        k = self.key
        try:
            y = k(x) if callable(k) else x[k]
            present = y in self._buffer
        except Exception as e:
            self._user_error(x, e, self.key)
            return None
        if present:
            if self.keep == "first":
                return None  # dropped: never held, complete when this call returns
            del self._buffer[y]
            release_refs(self._meta.pop(y))
        if metadata:
            self._retain_refs(metadata)
        self._buffer[y] = x
        self._meta[y] = metadata
        if len(self._buffer) < self.n:
            return None
        out = tuple(self._buffer.values())
        meta = merge_metadata(self._meta.values())
        self._buffer = {}
        self._meta = {}
        try:
            results = self._emit(out, meta)
        except BaseException:
            release_refs(meta)
            raise
        return self._release_after(results, meta)

    def get_state(self) -> object:
        return {"buffer": list(self._buffer.items())}

    def set_state(self, state: Any) -> None:
        self._buffer = dict(state["buffer"])
        self._meta = dict.fromkeys(self._buffer)

    def state_signature(self) -> str:
        return f"PartitionUnique(n={self.n}, key={_key_name(self.key)}, keep={self.keep!r})"


@Stream.register_api(attribute_name="sliding_window")
class SlidingWindow(Stream):
    """Emit overlapping tuples of the last ``n`` records.

    With ``return_partial=True`` (default) the first ``n - 1`` records give
    shorter tuples; with ``False`` output starts once ``n`` records arrived.
    A record's reference is held while it is in the window and released
    after the last window containing it has been emitted (and its
    downstream work finished).

    >>> s = Stream()
    >>> L = s.sliding_window(3, return_partial=False).sink_to_list()
    >>> for i in range(5):
    ...     s.emit(i)
    >>> L
    [(0, 1, 2), (1, 2, 3), (2, 3, 4)]
    >>> s2 = Stream(); L2 = s2.sliding_window(2).sink_to_list()
    >>> for i in range(3):
    ...     s2.emit(i)
    >>> L2
    [(0,), (0, 1), (1, 2)]
    """

    _graphviz_shape = "diamond"
    n = Fixed()  # sizes the window's deque
    partial = Fixed()

    def __init__(
        self, upstream: Stream, n: int, return_partial: bool = True, **kwargs: Unpack[NodeOptions]
    ) -> None:
        check_positive_int("sliding_window", "n", n)
        self._n = n
        self._partial = bool(return_partial)
        # with partial windows it passes on one window per record (derived count)
        self.derived_out = self._partial
        self._buffer: deque[Any] = deque(maxlen=n)
        #: while tracked records are held: the metadata of each record in the
        #: window (None for an untracked one); None when no tracked record is held
        self._meta: deque[Metadata | None] | None = None
        #: tracked records held whose references are not released yet
        self._n_meta = 0
        Stream.__init__(self, upstream, **kwargs)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        buf = self._buffer
        buf.append(x)  # the deque drops the oldest record of a full window
        metas = self._meta
        if metadata and metas is None:  # the first tracked record held
            metas = self._meta = deque([None] * (len(buf) - 1), maxlen=self._n)
        if metas is not None:
            metas.append(metadata)
            if metadata:
                self._retain_refs(metadata)
                self._n_meta += 1
        if not self._partial and len(buf) < self._n:
            return None
        out = tuple(buf)
        if metas is not None:
            return self._pass_tracked_window(out, metas)
        return self._emit(out, None)

    def _pass_tracked_window(
        self, out: tuple[object, ...], metas: deque[Metadata | None]
    ) -> Results:
        """Pass on a window holding tracked records: it carries their references.

        The oldest record of a full window is in no later window: its
        references are released once this one's downstream work is done.
        """
        leaving = metas[0] if len(metas) == self._n else None
        meta = merge_metadata(metas) if self._n_meta else None
        if leaving:
            self._n_meta -= 1
        if not self._n_meta:  # none held any more: back to the untracked way
            self._meta = None
        return self._emit_and_release(out, meta, leaving)

    def get_state(self) -> object:
        return {"buffer": list(self._buffer)}

    def set_state(self, state: Any) -> None:
        self._buffer = deque(state["buffer"], maxlen=self._n)
        self._meta = None
        self._n_meta = 0

    def state_signature(self) -> str:
        return f"SlidingWindow(n={self._n}, return_partial={self._partial})"
