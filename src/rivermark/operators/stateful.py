"""Stateful record operators: accumulate (scan), pairwise, frequencies, slice, unique, collect.

Each node's state is checkpointed (``get_state``/``set_state``); the state is
made of plain values only.  ``collect`` holds records until ``flush()`` and
therefore retains their references while they wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Any, Unpack

from rivermark.core.naming import function_name
from rivermark.core.node import (
    Fixed,
    NodeOptions,
    Planned,
    Stream,
    check_callable,
    check_positive_int,
    identity,
)
from rivermark.core.refs import Metadata, merge_metadata
from rivermark.errors import ConfigurationError
from rivermark.execution.steps import step
from rivermark.state import KeyedState, KeyedStore, as_keyed, no_default

logger = logging.getLogger(__name__)

__all__ = ["Accumulate", "Pairwise", "Frequencies", "Slice", "Unique", "Collect", "no_default"]

Results = list[Awaitable[object]] | None


def _fname(func: object) -> str:
    return function_name(func)


def _node_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs.pop(k) for k in ("stream_name", "name", "on_error", "loop") if k in kwargs}


@Stream.register_api(attribute_name="accumulate")
class Accumulate(Stream):
    """Running reduction: ``state = func(state, x, **kwargs)``, emitting each new state.

    ``start`` is the first state (default: the first record, which is emitted
    as it is).  With ``returns_state=True`` ``func`` returns
    ``(state, result)`` and ``result`` is emitted; ``with_state=True`` emits
    ``(state, result)`` pairs.  If ``func`` raises and the error policy drops
    the record, the state stays as it was.  Also available as ``scan``.

    >>> s = Stream()
    >>> L = s.accumulate(lambda acc, x: acc + x).sink_to_list()
    >>> for i in range(5):
    ...     s.emit(i)
    >>> L
    [0, 1, 3, 6, 10]
    >>> s2 = Stream()
    >>> L2 = s2.scan(lambda n, x: (n + 1, (n, x)), start=0, returns_state=True).sink_to_list()
    >>> s2.emit("a"); s2.emit("b"); L2
    [(0, 'a'), (1, 'b')]
    """

    derived_out = True

    _graphviz_shape = "box"
    _state_attrs = ("state",)
    returns_state = Fixed()
    with_state = Fixed()
    kwargs = Fixed()
    # read on every record: the generated code holds it; assigning it rebuilds that code
    func = Planned()

    def __init__(
        self,
        upstream: Stream,
        func: Callable[..., Any],
        start: Any = no_default,
        returns_state: bool = False,
        **kwargs: Any,
    ) -> None:
        check_callable("accumulate", "func", func)
        self.func = func
        self.state = start
        self._returns_state = returns_state
        self._with_state = bool(kwargs.pop("with_state", False))
        node_kwargs = _node_kwargs(kwargs)
        self._kwargs = kwargs
        Stream.__init__(self, upstream, **node_kwargs)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        state = self.state
        if state is no_default:  # no start: the first record is the state, passed on as it is
            self.state = x
            return self._emit((x, x) if self._with_state else x, metadata)
        func = self.func
        try:
            if self._returns_state:
                state, result = func(state, x, **self._kwargs)
            else:
                state = result = func(state, x, **self._kwargs)
        except Exception as e:
            self._user_error(x, e, func)  # the state stays as it was
            return None
        self.state = state
        return self._emit((state, result) if self._with_state else result, metadata)

    def state_signature(self) -> str:
        return (
            f"Accumulate(func={_fname(self.func)}, returns_state={self.returns_state}, "
            f"with_state={self.with_state})"
        )


Stream.register_api(attribute_name="scan")(Accumulate)


@Stream.register_api(attribute_name="pairwise")
class Pairwise(Stream):
    """Pass on each record with the one before it, as a ``(previous, record)`` pair.

    The first record waits for the second.  The record held (the previous
    one) is the node's state, and keeps its reference until it has left
    in its pair.

    >>> s = Stream()
    >>> L = s.pairwise().sink_to_list()
    >>> for x in "abcd":
    ...     s.emit(x)
    >>> L
    [('a', 'b'), ('b', 'c'), ('c', 'd')]
    """

    _state_attrs = ("previous",)

    def __init__(self, upstream: Stream, **kwargs: Unpack[NodeOptions]) -> None:
        self.previous: Any = no_default
        self._held: Metadata | None = None  # the previous record's metadata (tracked)
        Stream.__init__(self, upstream, **kwargs)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        previous, held = self.previous, self._held
        self.previous = x
        if metadata:
            self._retain_refs(metadata)
        self._held = metadata
        if previous is no_default:
            return None
        if held or metadata:  # the pair carries both; the previous record leaves with it
            return self._emit_and_release((previous, x), merge_metadata([held, metadata]), held)
        return self._emit((previous, x), None)

    def set_state(self, state: Any) -> None:
        self.previous = state["previous"]
        self._held = None


@Stream.register_api(attribute_name="frequencies")
class Frequencies(Stream):
    """Count occurrences of each record; emit a new ``{record: count}`` dict each time.

    The counts are a :class:`~rivermark.KeyedState`: a checkpoint writes only
    the counts changed since the previous one (see "Keyed state" in
    ``docs/checkpointing.md``).

    >>> s = Stream()
    >>> L = s.frequencies().sink_to_list()
    >>> for v in "aba":
    ...     s.emit(v)
    >>> L[-1]
    {'a': 2, 'b': 1}
    >>> L[0]
    {'a': 1}
    """

    def __init__(self, upstream: Stream, **kwargs: Unpack[NodeOptions]) -> None:
        self.counts: KeyedStore = KeyedState()
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        counts = self.counts
        try:
            counts[x] = counts.get(x, 0) + 1
        except TypeError as e:  # unhashable record
            self._user_error(x, e, "frequencies")
            return None
        return self._emit(counts.copy(), metadata)  # a plain dict

    def get_state(self) -> object:
        # the live container: the checkpoint takes its changed keys at the barrier
        return {"counts": self.counts}

    def set_state(self, state: Any) -> None:
        self.counts = as_keyed(state["counts"])


@Stream.register_api(attribute_name="slice")
class Slice(Stream):
    """Pass on only the records at some positions, like ``list[start:end:step]``.

    Positions count from 0; negative values are not supported.  Unlike
    streamz (which tests ``position % step``), the step counts from
    ``start``, exactly as a Python slice does.  After ``end`` nothing more
    is passed on (records are dropped and complete at once).

    >>> s = Stream()
    >>> L = s.slice(1, 7, 2).sink_to_list()
    >>> for i in range(10):
    ...     s.emit(i)
    >>> L
    [1, 3, 5]
    """

    _state_attrs = ("state",)
    str_list = ["begin", "end", "step"]

    def __init__(
        self,
        upstream: Stream,
        start: int | None = None,
        end: int | None = None,
        step: int | None = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        for arg, v in (("start", start), ("end", end)):
            if v is not None:
                check_positive_int("slice", arg, v, minimum=0)
        if step is not None:
            check_positive_int("slice", "step", step)
        self.begin = start or 0  # not "start": that is Stream.start()
        self.end = end
        self.step = step or 1
        self.state = 0
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        i = self.state
        self.state = i + 1
        if i < self.begin or (self.end is not None and i >= self.end):
            return None
        if (i - self.begin) % self.step:
            return None
        return self._emit(x, metadata)

    def state_signature(self) -> str:
        return f"Slice(start={self.begin}, end={self.end}, step={self.step})"


@Stream.register_api(attribute_name="unique")
class Unique(Stream):
    """Drop records whose ``key(x)`` was seen before (among the last ``maxsize`` keys).

    With ``hashable=True`` (default) seen keys live in a dict; with
    ``maxsize`` it is a least-recently-used cache (a repeat refreshes the
    key).  ``hashable=False`` keeps a list (most recent first) for keys that
    cannot be hashed.  A dropped duplicate completes at once.  Without
    ``maxsize`` (and hashable keys) the seen keys are a
    :class:`~rivermark.KeyedState`: a checkpoint writes only the keys seen
    since the previous one.

    >>> s = Stream()
    >>> L = s.unique().sink_to_list()
    >>> for v in [1, 2, 1, 3]:
    ...     s.emit(v)
    >>> L
    [1, 2, 3]
    >>> s2 = Stream(); L2 = s2.unique(maxsize=1).sink_to_list()
    >>> for v in [1, 1, 2, 1]:
    ...     s2.emit(v)
    >>> L2
    [1, 2, 1]
    """

    def __init__(
        self,
        upstream: Stream,
        maxsize: int | None = None,
        key: Callable[[Any], Any] = identity,
        hashable: bool = True,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        if maxsize is not None:
            check_positive_int("unique", "maxsize", maxsize)
        check_callable("unique", "key", key)
        self.maxsize = maxsize
        self.key = key
        self.hashable = hashable
        #: seen keys: a KeyedState (key -> None) without maxsize, else an LRU OrderedDict
        self._seen: KeyedStore | OrderedDict[Any, None] = (
            KeyedState() if maxsize is None else OrderedDict()
        )
        self._seen_list: list[Any] = []
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        try:
            y = self.key(x)
            if self.hashable:
                seen = self._seen
                if y in seen:
                    if self.maxsize:
                        seen.move_to_end(y)  # type: ignore[union-attr]
                    return None
                seen[y] = None
                if self.maxsize and len(seen) > self.maxsize:
                    seen.popitem(last=False)  # type: ignore[call-arg]
            else:
                lst = self._seen_list
                if y in lst:
                    lst.remove(y)
                    lst.insert(0, y)
                    return None
                lst.insert(0, y)
                if self.maxsize:
                    del lst[self.maxsize :]
        except Exception as e:
            self._user_error(x, e, self.key)
            return None
        return self._emit(x, metadata)

    def get_state(self) -> object:
        if not self.hashable:
            return {"seen": list(self._seen_list)}
        if isinstance(self._seen, KeyedStore):
            # the live container: the checkpoint takes its new keys at the barrier
            return {"seen": self._seen}
        return {"seen": list(self._seen)}

    def set_state(self, state: Any) -> None:
        seen = state["seen"]
        if not self.hashable:
            self._seen_list = list(seen)
        elif self.maxsize is None:
            # a checkpoint before keyed state held the list of seen keys
            self._seen = as_keyed(seen if isinstance(seen, KeyedStore) else dict.fromkeys(seen))
        else:
            self._seen = OrderedDict.fromkeys(seen)

    def state_signature(self) -> str:
        return f"Unique(maxsize={self.maxsize}, key={_fname(self.key)}, hashable={self.hashable})"


@Stream.register_api(attribute_name="collect")
class Collect(Stream):
    """Hold records until :meth:`flush` is called, then emit them as one tuple.

    Held records keep their references until the tuple has been emitted and
    its downstream work has finished.  ``cache`` may be a ``deque`` (with a
    ``maxlen``: a record pushed out of it is dropped and completes).

    >>> s = Stream()
    >>> c = s.collect()
    >>> L = c.sink_to_list()
    >>> s.emit(1); s.emit(2); L
    []
    >>> c.flush(); L
    [(1, 2)]
    >>> c.flush(); L
    [(1, 2), ()]
    """

    def __init__(
        self, upstream: Stream, cache: deque[object] | None = None, **kwargs: Unpack[NodeOptions]
    ) -> None:
        if cache is None:
            cache = deque()
        elif not isinstance(cache, deque):
            raise ConfigurationError(
                f"collect: cache must be a collections.deque, got {cache!r}; "
                "pass e.g. cache=deque(maxlen=100) or leave it out"
            )
        self.cache = cache
        self._meta: deque[Metadata | None] = deque()
        self._tasks: set[asyncio.Future[Any]] = set()
        Stream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        cache = self.cache
        if cache.maxlen is not None and len(cache) >= cache.maxlen:
            if not cache.maxlen:
                return None  # a zero-length cache drops everything at once
            self._release_refs(self._meta.popleft())
        if metadata:
            self._retain_refs(metadata)
        cache.append(x)
        self._meta.append(metadata)
        return None

    def flush(self, _: object = None) -> None:
        """Emit everything held so far as one tuple (an empty tuple if nothing is held)."""
        out = tuple(self.cache)
        metadata = merge_metadata(self._meta)
        self.cache.clear()
        self._meta.clear()
        try:
            results = self._emit(out, metadata)
        except BaseException:
            self._release_refs(metadata)
            raise
        pending = self._release_after(results, metadata)
        if pending:
            for fut in pending:
                f = asyncio.ensure_future(fut)
                self._tasks.add(f)
                f.add_done_callback(self._tasks.discard)

    def get_state(self) -> object:
        return {"cache": list(self.cache)}

    def set_state(self, state: Any) -> None:
        self.cache.clear()
        self._meta.clear()
        for v in state["cache"]:
            self.cache.append(v)
            self._meta.append(None)

    def state_signature(self) -> str:
        return f"Collect(maxlen={self.cache.maxlen})"
