"""Count-based windows: partition, partition_unique, sliding_window.

A record parked in a window keeps its reference (retained when it arrives)
until the window it belongs to has been emitted and the downstream work has
finished, or until it is dropped (a duplicate in ``partition_unique``).
The parked values (without metadata) are checkpoint state.

The step of ``partition`` and ``sliding_window`` for untracked records is
their kernel (``update = derived_update(kernel)``: the node's own update and
what generated graphs write out); tracked records take a method of the node
(``_update_general``, ``_update_tracked``), as does a keyed or timed
partition.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from ..core import runtime
from ..core.node import Fixed, Stream, check_positive_int, identity
from ..core.refs import Metadata, merge_metadata, release_refs
from ..errors import ConfigurationError
from ..fastpath.codegen import Codegen, derived_update
from ..state import KeyedState, as_keyed

logger = logging.getLogger(__name__)

__all__ = ["Partition", "PartitionUnique", "SlidingWindow"]

Results = list[Awaitable[Any]] | None


def _key_name(key: Any) -> str:
    if callable(key):
        return getattr(key, "__qualname__", None) or repr(key)
    return repr(key)


def _partition_kernel(cg: Codegen, node: Partition, who: Stream | None, x: str) -> bool:
    # append x to the open group; once it holds n records, emit it as a tuple
    n = cg.fields(node)
    if node.key is not None or node.timeout is not None:
        # groups per key, timers: the method is the node's update (a graph calls it)
        return cg.delegate(node, "_update_general")
    general = f"return {n('_update_general')}({x}, who, metadata)"
    # a tracked record: its references are kept with the group (the node's own
    # update only; a graph carries none)
    if cg.node is not None:
        cg.rare("metadata", node, who, x, lambda: cg.line(general))
    buf, meta, out = cg.tmp("buf"), cg.tmp("m"), cg.tmp()
    # The list of the key None stays in ``_buffers`` (emptied in place when a
    # partition is emitted; ``_update_general`` pops it): an empty list and
    # no entry are the same state for the node (``get_state`` lists only
    # non-empty buffers; ``_update_general`` appends to an empty one as to a new one).
    cg.line("try:")
    cg.line(f"    {buf} = {n('_buffers')}[None]")
    cg.line("except KeyError:")
    cg.line(f"    {buf} = {n('_buffers')}[None] = []")
    cg.line(f"    {n('_metas')}[None] = []")
    cg.line(f"{buf}.append({x})")
    cg.only_if(f"len({buf}) >= {n('n')}")
    cg.line(f"{meta} = {n('_metas')}[None]")
    # tracked records in the group: the node's flush merges their metadata
    cg.skip_if(meta, cg.result(f"{n('_flush_now')}(None)"))
    cg.line(f"{out} = tuple({buf})")
    cg.line(f"{buf}.clear()")
    cg.push_down(node, out, "None")
    return True


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
    #: a partition's list (key None) stays in ``_buffers`` once created (emptied in
    #: place when emitted); ``_flush_now`` emits one with its records' metadata
    _kernel_fields = frozenset({"_buffers", "_metas", "n", "_flush_now", "_update_general"})

    def __init__(
        self,
        upstream: Stream,
        n: int,
        timeout: float | None = None,
        key: Hashable | Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        check_positive_int("partition", "n", n)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
        ):
            raise ConfigurationError(
                f"partition: timeout must be a number of seconds > 0, got {timeout!r}; "
                "pass e.g. timeout=1.5, or None to emit only full partitions"
            )
        self.n = n
        self._timeout = timeout
        self._key = key
        #: per-key groups with a key (checkpointed incrementally), else one group
        self._buffers: dict[Any, list[Any]] | KeyedState = (
            {} if key is None else KeyedState(freeze=list)
        )
        self._metas: dict[Any, list[dict[str, Any]]] = {}
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.in_flight = 0
        # asynchronous only when a timeout needs the event loop
        self._is_async = timeout is not None
        Stream.__init__(self, upstream, **kwargs)

    def _get_key(self, x: Any) -> Any:
        k = self._key
        if k is None:
            return None
        if callable(k):
            return k(x)
        return x[k]

    def records_held(self) -> int | None:
        return sum(len(b) for b in list(self._buffers.values()))

    def emits_later(self) -> bool:
        # with a timeout, an open partition is emitted when it expires
        if self._timeout is not None and any(self._buffers.values()):
            return True
        return self.in_flight > 0

    update = derived_update(_partition_kernel)

    def _update_general(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        """The step with a key or a timeout, or for a tracked record."""
        if self.failure is not None:  # a timed-out emit failed
            self._raise_if_failed()
        try:
            k = self._get_key(x)
        except Exception as e:
            self._user_error(x, e, self._key)
            return None
        buf = self._buffers.get(k)
        if buf is None:
            try:
                buf = self._buffers[k] = []
            except TypeError as e:  # unhashable key
                self._user_error(x, e, self._key)
                return None
            self._metas[k] = []
        buf.append(x)
        if self._key is not None:
            self._buffers.touched(k)  # type: ignore[union-attr]
        if metadata:
            self._retain_refs(metadata)
            self._metas[k].extend(metadata)
        if len(buf) >= self.n:
            timer = self._timers.pop(k, None)
            if timer is not None:
                timer.cancel()
            return self._flush_now(k)
        if self._timeout is not None and k not in self._timers:
            self._arm(k)
        return None

    def _take(self, k: Any) -> tuple[tuple[Any, ...], Metadata | None]:
        buf = self._buffers.pop(k, [])
        meta = self._metas.pop(k, [])
        return tuple(buf), (meta or None)

    def _flush_now(self, k: Any) -> Results:
        out, meta = self._take(k)
        try:
            results = self._emit(out, meta)
        except BaseException:
            release_refs(meta)
            raise
        return self._release_after(results, meta)

    # ------------------------------------------------------------------ timeout
    def _arm(self, k: Any) -> None:
        loop = self.loop
        assert self._timeout is not None
        if runtime.in_loop_thread(loop):
            self._timers[k] = loop.call_later(self._timeout, self._on_timeout, k)
        else:  # called from another thread: arm it on the loop
            loop.call_soon_threadsafe(self._arm_if_pending, k)

    def _arm_if_pending(self, k: Any) -> None:
        if k in self._buffers and k not in self._timers:
            assert self._timeout is not None
            self._timers[k] = self.loop.call_later(self._timeout, self._on_timeout, k)

    def _on_timeout(self, k: Any) -> None:
        self._timers.pop(k, None)
        if not self._buffers.get(k):
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
    def get_state(self) -> Any:
        if isinstance(self._buffers, KeyedState):
            # the live groups: the checkpoint copies the changed ones at the barrier
            return {"buffers": self._buffers}
        return {"buffers": [(k, list(v)) for k, v in self._buffers.items() if v]}

    def set_state(self, state: Any) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        buffers = state["buffers"]
        if self._key is None:
            self._buffers = {k: list(v) for k, v in buffers}
        else:
            # a checkpoint before keyed state held a list of (key, records) pairs
            self._buffers = as_keyed(
                buffers if isinstance(buffers, KeyedState) else {k: list(v) for k, v in buffers},
                freeze=list,
            )
        self._metas = {k: [] for k in self._buffers}
        if self._timeout is not None:
            # restored partial partitions get a fresh timeout (timers are not state)
            for k in self._buffers:
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
        **kwargs: Any,
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

    def get_state(self) -> Any:
        return {"buffer": list(self._buffer.items())}

    def set_state(self, state: Any) -> None:
        self._buffer = dict(state["buffer"])
        self._meta = dict.fromkeys(self._buffer)

    def state_signature(self) -> str:
        return f"PartitionUnique(n={self.n}, key={_key_name(self.key)}, keep={self.keep!r})"


def _sliding_window_kernel(cg: Codegen, node: SlidingWindow, who: Stream | None, x: str) -> bool:
    # append x to the window (a deque of n); emit the window as a tuple once it
    # holds n records (return_partial: at every record)
    n = cg.fields(node)
    # a tracked record, or one held in the window: its references are kept per
    # record and merged into each window (``_update_tracked``, the node's own
    # update only; a generated graph hands such a record to it)
    tracked = f"metadata or {n('_n_meta')}" if cg.node is not None else n("_n_meta")
    cg.rare(tracked, node, who, x, lambda: cg.line(f"return {n('_update_tracked')}({x}, metadata)"))
    buf, out = cg.tmp("buf"), cg.tmp()
    cg.line(f"{buf} = {n('_buffer')}")
    cg.line(f"{buf}.append({x})")
    # ``_meta`` holds one entry per record still held: all but the oldest of a
    # full window.  A record that fills the window (or arrives at a full one)
    # leaves it as it was (appended, then the oldest released); otherwise it
    # gains a None.
    if node.partial:
        cg.when(f"len({buf}) != {node.n}", f"{n('_meta')}.append(None)")
    else:
        cg.skip_if(f"len({buf}) != {node.n}", f"{n('_meta')}.append(None)")
    cg.line(f"{out} = tuple({buf})")
    cg.push_down(node, out, "None")
    return True


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
    _kernel_fields = frozenset({"_buffer", "_meta", "_n_meta", "_update_tracked"})

    def __init__(
        self, upstream: Stream, n: int, return_partial: bool = True, **kwargs: Any
    ) -> None:
        check_positive_int("sliding_window", "n", n)
        self._n = n
        self._partial = bool(return_partial)
        # with partial windows it passes on one window per record (derived count)
        self.derived_out = self._partial
        self._buffer: deque[Any] = deque(maxlen=n)
        # metadata of the records still held (the oldest value may already be released)
        self._meta: deque[Metadata | None] = deque()
        self._n_meta = 0
        Stream.__init__(self, upstream, **kwargs)

    update = derived_update(_sliding_window_kernel)

    def _update_tracked(self, x: Any, metadata: Metadata | None) -> Results:
        """The step while tracked records are in the window (or ``x`` is one)."""
        buf = self._buffer
        buf.append(x)
        if metadata:
            self._retain_refs(metadata)
            self._n_meta += 1
        self._meta.append(metadata)
        full = len(buf) == self._n
        if not (full or self._partial):
            return None
        meta = merge_metadata(self._meta) if self._n_meta else None
        try:
            results = self._emit(tuple(buf), meta)
        except BaseException:
            if full:
                self._evict(None)
            raise
        if full:
            return self._evict(results)
        return results

    def _evict(self, results: Results) -> Results:
        evicted = self._meta.popleft()
        if not evicted:
            return results
        self._n_meta -= 1
        return self._release_after(results, evicted)

    def get_state(self) -> Any:
        return {"buffer": list(self._buffer)}

    def set_state(self, state: Any) -> None:
        self._buffer = deque(state["buffer"], maxlen=self._n)
        # the oldest of a full window was already released when it was emitted
        held = len(self._buffer) - (1 if len(self._buffer) == self._n else 0)
        self._meta = deque([None] * held)
        self._n_meta = 0

    def state_signature(self) -> str:
        return f"SlidingWindow(n={self._n}, return_partial={self._partial})"
