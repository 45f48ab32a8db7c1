"""Record-by-record operators: map, starmap, filter, remove, pluck, flatten (concat).

The per-record step of map, starmap, filter, remove and pluck is the
class's ``update``, marked :func:`~rivermark.execution.steps.step`: the one
definition that generated graphs write out in place and the node-by-node
path runs (see ``docs/architecture.md``, "One definition per operator").

None of these holds a record past the synchronous call, so completion
tracking needs little from them: a record dropped by a filter is complete
when the call returns; ``flatten`` holds the incoming record's reference
while it emits the items (and until their downstream work is finished).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rivermark.core.node import Fixed, Planned, Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.execution.push import merge_results
from rivermark.execution.steps import step

logger = logging.getLogger(__name__)

__all__ = ["Map", "Starmap", "Filter", "Remove", "Pluck", "Flatten"]

Results = list[Awaitable[object]] | None


@Stream.register_api(attribute_name="map")
class Map(Stream):
    """Apply ``func(x, *args, **kwargs)`` to every element (record) of the stream.

    >>> s = Stream()
    >>> L = s.map(lambda x, k: x * k, 10).sink_to_list()
    >>> s.emit(1); s.emit(2); L
    [10, 20]

    ``func`` may be replaced at any time (it takes effect from the next
    record); ``args`` and ``kwargs`` are fixed at creation.
    """

    derived_out = True
    args = Fixed()
    kwargs = Fixed()
    # read on every record: the generated code holds it; assigning it rebuilds that code
    func = Planned()
    #: starmap: the record is a tuple of arguments, ``func(*x, ...)``
    star = Fixed()
    _star = False

    def __init__(
        self, upstream: Stream, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        check_callable("map", "func", func)
        self.func = func
        node_kwargs = _node_kwargs(kwargs)
        self._kwargs = kwargs
        self._args = args
        Stream.__init__(self, upstream, **node_kwargs)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        func = self.func
        try:
            if self._star:  # starmap: the record is a tuple of arguments
                y = func(*x, *self._args, **self._kwargs)
            else:
                y = func(x, *self._args, **self._kwargs)
        except Exception as e:
            self._user_error(x, e, func)  # raises, or the policy drops the record
            return None
        return self._emit(y, metadata)


@Stream.register_api(attribute_name="starmap")
class Starmap(Map):
    """Apply ``func(*x, *args, **kwargs)`` to every record (a tuple).

    >>> s = Stream()
    >>> L = s.starmap(lambda a, b: a + b).sink_to_list()
    >>> s.emit((1, 2)); L
    [3]
    """

    _star = True


def _node_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the keyword arguments that belong to :class:`Stream` (not to the user function)."""
    return {k: kwargs.pop(k) for k in ("stream_name", "name", "on_error") if k in kwargs}


def _truthy(x: Any) -> bool:
    return bool(x)


@Stream.register_api(attribute_name="filter")
class Filter(Stream):
    """Pass on only the records for which ``predicate(x, *args, **kwargs)`` is true.

    ``predicate=None`` keeps the truthy records.  A dropped record is complete
    when the call returns.

    >>> s = Stream()
    >>> L = s.filter(lambda x: x % 2 == 0).sink_to_list()
    >>> for i in range(5):
    ...     s.emit(i)
    >>> L
    [0, 2, 4]
    >>> s2 = Stream(); L2 = s2.filter(None).sink_to_list()
    >>> for v in [0, 1, "", "a"]:
    ...     s2.emit(v)
    >>> L2
    [1, 'a']
    """

    #: remove: pass on the records for which the predicate is false
    invert = Fixed()
    # read on every record: the generated code holds it; assigning it rebuilds that code
    predicate = Planned()
    _invert = False
    args = Fixed()
    kwargs = Fixed()

    def __init__(
        self, upstream: Stream, predicate: Callable[..., Any] | None, *args: Any, **kwargs: Any
    ) -> None:
        if predicate is None:
            predicate = _truthy
        check_callable(type(self).__name__.lower(), "predicate", predicate)
        self.predicate = predicate
        node_kwargs = _node_kwargs(kwargs)
        self._args = args
        self._kwargs = kwargs
        Stream.__init__(self, upstream, **node_kwargs)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        predicate = self.predicate
        try:
            keep = predicate(x, *self._args, **self._kwargs)
        except Exception as e:
            self._user_error(x, e, predicate)
            return None
        if keep if self._invert else not keep:
            return None  # dropped (remove: kept by the predicate): complete at once
        return self._emit(x, metadata)


@Stream.register_api(attribute_name="remove")
class Remove(Filter):
    """Drop the records for which ``predicate(x, *args, **kwargs)`` is true.

    >>> s = Stream()
    >>> L = s.remove(lambda x: x % 2 == 0).sink_to_list()
    >>> for i in range(5):
    ...     s.emit(i)
    >>> L
    [1, 3]
    """

    _invert = True

    def __init__(
        self, upstream: Stream, predicate: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        check_callable("remove", "predicate", predicate)
        Filter.__init__(self, upstream, predicate, *args, **kwargs)


def _pick_all(x: Any, picks: list[Any]) -> tuple[Any, ...]:
    return tuple([x[i] for i in picks])


@Stream.register_api(attribute_name="pluck")
class Pluck(Stream):
    """Pick ``x[pick]`` from every record; a list of picks gives a tuple.

    >>> s = Stream()
    >>> L = s.pluck([0, 2]).sink_to_list()
    >>> s.emit((1, 2, 3)); L
    [(1, 3)]
    >>> s2 = Stream(); L2 = s2.pluck("name").sink_to_list()
    >>> s2.emit({"name": "Alice"}); L2
    ['Alice']
    """

    derived_out = True

    str_list = ["pick"]
    pick = Fixed()
    #: the pick is a list: a tuple of ``x[i]`` for each of its items
    many = Fixed()

    def __init__(self, upstream: Stream, pick: Any, **kwargs: Any) -> None:
        self._pick = pick
        self._many = isinstance(pick, list)
        Stream.__init__(self, upstream, **kwargs)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        pick = self._pick
        try:
            y = _pick_all(x, pick) if self._many else x[pick]
        except Exception as e:
            self._user_error(x, e, f"pluck({pick!r})")
            return None
        return self._emit(y, metadata)


@Stream.register_api(attribute_name="flatten")
class Flatten(Stream):
    """Emit every item of each (iterable) record as a record of its own.

    The incoming record's reference is held until every item has been
    passed on and the downstream work of all of them has finished.
    Also available as ``concat``.

    >>> s = Stream()
    >>> L = s.flatten().sink_to_list()
    >>> s.emit([1, 2]); s.emit((3,)); s.emit([]); L
    [1, 2, 3]
    """

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        try:
            items = iter(x)
        except TypeError as e:
            self._user_error(x, e, "flatten")
            return None
        out: list[Awaitable[object]] | None = None
        emit = self._emit
        if not metadata:
            for item in items:
                out = merge_results(out, emit(item, None))
            return out
        self._retain_refs(metadata)
        try:
            for item in items:
                out = merge_results(out, emit(item, metadata))
        except BaseException:
            self._release_refs(metadata)
            raise
        return self._release_after(out, metadata)


Stream.register_api(attribute_name="concat")(Flatten)
