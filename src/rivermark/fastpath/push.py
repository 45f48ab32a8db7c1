"""The push functions that carry a record from a node to its downstreams.

A node passes a record on with ``_emit``, which calls one *push* function
per downstream: ``push(x, metadata)`` is ``downstream.update(x, who,
metadata)`` (:func:`build_push`), merged over several downstreams by
:func:`fan_out`.  ``Stream._emit`` builds these lazily and rebuilds them
whenever any graph changes shape, so they never outlive a
``connect``/``disconnect``/``destroy``.

This is the node-by-node path: each operator's ``update`` is the only
definition of its per-record behaviour.  The generated code of
:mod:`rivermark.fastpath.codegen` is the fast path over the same operators; for
a node or a record it does not write out, it calls the node's push from
here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..core.node import Stream

__all__ = ["Push", "build_push", "fan_out", "own_update"]

Push = Callable[[Any, Any], Any]


def build_push(node: Stream, who: Stream) -> Push:
    """A function equivalent to ``node.update(x, who, metadata)``."""
    update = node.update

    def push(x: Any, metadata: Any) -> Any:
        return update(x, who, metadata)

    return push


def own_update(node: Stream) -> bool:
    """True unless the instance has an ``update`` of its own (set on it after creation).

    Checked through the bound method, not the instance ``__dict__``: on
    CPython 3.11 touching ``__dict__`` makes every later attribute access on
    the node slower.  A node class whose ``update`` is derived from its
    kernel (:func:`rivermark.fastpath.codegen.derived_update`) keeps the
    function compiled for the node on the node: that one is its own too.
    """
    update = node.update
    func = getattr(update, "__func__", None)
    if func is type(node).update:
        return True
    return getattr(func, "rivermark_derived", False) and getattr(update, "__self__", None) is node


def fan_out(pushes: list[Push]) -> Push:
    """Call every push in order and merge their awaitables."""

    def push(x: Any, metadata: Any) -> Any:
        out = None
        for p in pushes:
            r = p(x, metadata)
            if r:
                if out is None:
                    out = []
                out.extend(r)
        return out

    return push


def no_downstream(x: Any, metadata: Any) -> None:
    return None
