"""Record-by-record operators: map, starmap, filter, remove, pluck, flatten (concat).

The per-record step of map, starmap, filter, remove and pluck is written
once, as a kernel (``_*_kernel`` below): ``update = derived_update(kernel)``
makes it both the node's own ``update`` and what generated graphs write
out (see ``docs/architecture.md``, "One definition per operator").

None of these holds a record past the synchronous call, so completion
tracking needs little from them: a record dropped by a filter is complete
when the call returns; ``flatten`` holds the incoming record's reference
while it emits the items (and until their downstream work is finished).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.node import Fixed, Stream, check_callable
from ..core.refs import Metadata
from ..fastpath.codegen import Codegen, derived_update

logger = logging.getLogger(__name__)

__all__ = ["Map", "Starmap", "Filter", "Remove", "Pluck", "Flatten"]


def _map_kernel(cg: Codegen, node: Map, who: Stream | None, x: str) -> bool:
    # y = func(x, *args, **kwargs); an error goes to the node's policy
    f = cg.read(node, "func")
    y = cg.tmp()
    cg.call_user(y, f"{f}({cg.call_args(x, node.args, node.kwargs)})", x, node, f)
    cg.push_down(node, y)
    return True


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
    _kernel_fields = frozenset({"func"})

    def __init__(
        self, upstream: Stream, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        check_callable("map", "func", func)
        self.func = func
        stream_name = kwargs.pop("stream_name", None)
        name = kwargs.pop("name", None)
        on_error = kwargs.pop("on_error", None)
        self._kwargs = kwargs
        self._args = args
        Stream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    update = derived_update(_map_kernel)


def _starmap_kernel(cg: Codegen, node: Starmap, who: Stream | None, x: str) -> bool:
    # y = func(*x, *args, **kwargs)
    f = cg.read(node, "func")
    y = cg.tmp()
    cg.call_user(y, f"{f}({cg.call_args('*' + x, node.args, node.kwargs)})", x, node, f)
    cg.push_down(node, y)
    return True


@Stream.register_api(attribute_name="starmap")
class Starmap(Map):
    """Apply ``func(*x, *args, **kwargs)`` to every record (a tuple).

    >>> s = Stream()
    >>> L = s.starmap(lambda a, b: a + b).sink_to_list()
    >>> s.emit((1, 2)); L
    [3]
    """

    update = derived_update(_starmap_kernel)


def _node_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the keyword arguments that belong to :class:`Stream` (not to the user function)."""
    return {k: kwargs.pop(k) for k in ("stream_name", "name", "on_error") if k in kwargs}


def _truthy(x: Any) -> bool:
    return bool(x)


def _filter_kernel(cg: Codegen, node: Filter, who: Stream | None, x: str) -> bool:
    # keep = predicate(x, *args, **kwargs); pass x on when keep (remove: when not keep)
    p = cg.read(node, "predicate")
    k = cg.tmp("k")
    cg.call_user(k, f"{p}({cg.call_args(x, node.args, node.kwargs)})", x, node, p)
    cg.only_if(f"not {k}" if node._invert else k)  # noqa: SLF001 - filter's own kernel
    cg.push_down(node, x)
    return True


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

    _invert = False
    args = Fixed()
    kwargs = Fixed()
    _kernel_fields = frozenset({"predicate"})

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

    update = derived_update(_filter_kernel)


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

    update = derived_update(_filter_kernel)  # registers the kernel for Remove too


def _pick_all(x: Any, picks: list[Any]) -> tuple[Any, ...]:
    return tuple([x[i] for i in picks])


def _pluck_kernel(cg: Codegen, node: Pluck, who: Stream | None, x: str) -> bool:
    # y = x[pick], or a tuple of x[i] for every i of a list of picks
    pick = cg.bind(node.pick, "pick")
    label = cg.bind(f"pluck({node.pick!r})", "label")
    y = cg.tmp()
    many = node._many  # noqa: SLF001 - pluck's own kernel
    get = f"{cg.bind(_pick_all, 'pickall')}({x}, {pick})" if many else f"{x}[{pick}]"
    cg.call_user(y, get, x, node, label)
    cg.push_down(node, y)
    return True


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

    def __init__(self, upstream: Stream, pick: Any, **kwargs: Any) -> None:
        self._pick = pick
        self._many = isinstance(pick, list)
        Stream.__init__(self, upstream, **kwargs)

    update = derived_update(_pluck_kernel)


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
    ) -> list[Awaitable[Any]] | None:
        try:
            items = iter(x)
        except TypeError as e:
            self._user_error(x, e, "flatten")
            return None
        out: list[Awaitable[Any]] | None = None
        emit = self._emit
        if not metadata:
            for item in items:
                r = emit(item, None)
                if r:
                    if out is None:
                        out = []
                    out.extend(r)
            return out
        self._retain_refs(metadata)
        try:
            for item in items:
                r = emit(item, metadata)
                if r:
                    if out is None:
                        out = []
                    out.extend(r)
        except BaseException:
            self._release_refs(metadata)
            raise
        return self._release_after(out, metadata)


Stream.register_api(attribute_name="concat")(Flatten)
