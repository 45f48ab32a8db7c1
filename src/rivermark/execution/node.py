"""What the data flow needs of a node: the :class:`Node` protocol, and the graph walk.

:class:`rivermark.core.node.Stream` provides it.  The data flow is written
against this protocol, not against the class, so that the node can import
the data flow and never the reverse: ``execution`` imports nothing of the
node class, not even for type checking.

>>> from rivermark import Stream
>>> isinstance(Stream(), Node)
True
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["Node", "Results", "Metadata", "walk_from"]

_N = TypeVar("_N")

#: a tracked record's metadata (a list of dicts, as in streamz; see ``core.refs``)
Metadata = list[dict[str, Any]]

#: what an update returns: None, or awaitables of work still running below
Results = list[Awaitable[object]] | None


@runtime_checkable
class Node(Protocol):
    """A node of a graph, as the data flow sees it."""

    #: the graph's shape
    upstreams: list[Any]
    downstreams: list[Any]
    #: created with ``asynchronous=True`` (every emit returns an awaitable)
    asynchronous: bool | None
    #: passes a record on only from an event loop (its update schedules work there)
    _is_async: bool
    #: counting (:mod:`.counting`): how the node's records out are kept
    derived_out: bool
    counts_emits: bool
    out_counter: itertools.repeat[None]
    #: the plan of the node's graph (:mod:`.plan`), None until one is built
    _rivermark_plan: Any

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Results: ...

    def _emit(self, x: Any, metadata: Any = None) -> Results: ...

    def _push(self, x: Any, metadata: Any) -> Results:
        """The node's push to its downstreams (put on it by its plan)."""
        ...

    def emit(self, x: Any, asynchronous: bool = False, metadata: Any = None) -> Any: ...

    def walk(self) -> Iterator[Any]: ...


def walk_from(start: Iterable[_N], nexts: Callable[[_N], Iterable[_N]]) -> Iterator[_N]:
    """The nodes of ``start`` and every node reached from them by ``nexts``, each once.

    Depth first: the last node of ``start`` (and of each ``nexts``) is walked
    first.  Every walk of a graph's nodes (``Stream.walk``, ``ancestors``,
    ``descendants``, the nodes an emit waits for) is this one.

    >>> below = {1: [2, 3], 2: [4], 3: [4], 4: []}
    >>> list(walk_from([1], below.__getitem__))
    [1, 3, 4, 2]
    """
    seen: set[int] = set()
    todo = list(start)
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        todo.extend(nexts(n))
