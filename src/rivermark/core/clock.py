"""The graph clock: one version number for the shape of every graph.

Every change of a graph's shape (a node created, connected, disconnected or
destroyed; a node found to be asynchronous) calls :func:`_bump`.  What a node
builds for one shape is keyed by that version: its push function, its
``emit`` installed through :class:`_EmitMethod`, a source's generated record
loop.  :func:`_bump` takes back what was generated for the previous shape.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .node import Stream


class _GraphClock:
    """A counter bumped on every change of any graph's shape (cheap cache keys).

    Change it only through :func:`_bump`, which also takes back every
    ``emit`` installed on a node for the previous shape.
    """

    version = 0


#: nodes with an ``emit`` of their own installed by ``Stream._bind_emit`` (weakly)
_BOUND: list[weakref.ref[Stream]] = []
#: generated loops handed out by ``Stream.record_loop`` for the current graph version
_PUSHES: list[Callable[..., Any]] = []


def retire(fn: Callable[..., Any]) -> None:
    """Make the generated function ``fn`` hand every call to its node's current ``emit``.

    Every generated function checks the flag ``_valid`` in its own globals
    (see :mod:`rivermark.fastpath.codegen`); clearing it takes the function back.
    """
    if hasattr(fn, "rivermark_source"):
        fn.__globals__["_valid"] = False


def _bump() -> None:
    _GraphClock.version += 1
    if _PUSHES:
        for fn in _PUSHES:
            retire(fn)
        _PUSHES.clear()
    if _BOUND:
        bound = list(_BOUND)
        _BOUND.clear()
        for ref in bound:
            node = ref()
            if node is not None:
                node._unbind_emit()  # noqa: SLF001 - the clock retires what nodes generated


class _EmitMethod:
    """``Stream.emit``: on an instance, what :meth:`Stream._bind_emit` installs.

    Looking ``emit`` up on a node that has nothing installed for the current
    graph version builds it then, so ``emit = source.emit`` taken after
    building a synchronous graph is its generated function.  On the class
    it is the plain function.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.__doc__ = func.__doc__
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__

    def __get__(self, obj: Stream | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self.func
        return obj._bind_emit()  # noqa: SLF001 - the descriptor of the node's own emit
