"""Fusing chains of synchronous nodes into direct function calls.

Unfused, a record crosses each node as ``update`` -> user function ->
``_emit`` -> next ``update``.  A node class can register a *fuser*: a factory
that, given the node, the upstream that feeds it and the already-built push
function of its downstreams, returns ``push(x, metadata)`` doing the node's
work and calling the next push directly.  ``Stream._emit`` builds these
functions lazily and rebuilds them whenever any graph changes shape, so a
fused path never outlives a ``connect``/``disconnect``/``destroy``.

Fusers apply to exact classes only: a user subclass that overrides
``update`` always goes through its own ``update``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .node import Stream

__all__ = ["Push", "Fuser", "register_fuser", "build_push", "fan_out", "own_update"]

Push = Callable[[Any, Any], Any]
Fuser = Callable[["Stream", "Stream", Push], Push]

_FUSERS: dict[type, Fuser] = {}


def register_fuser(cls: type, fuser: Fuser) -> None:
    """Use ``fuser`` for nodes whose type is exactly ``cls``."""
    _FUSERS[cls] = fuser


def build_push(node: Stream, who: Stream) -> Push:
    """A function equivalent to ``node.update(x, who, metadata)``."""
    fuser = _FUSERS.get(type(node))
    if fuser is not None and own_update(node):
        return fuser(node, who, node._downstream_push())
    update = node.update

    def push(x: Any, metadata: Any) -> Any:
        return update(x, who, metadata)

    return push


def own_update(node: Stream) -> bool:
    """True unless the instance has an ``update`` of its own (set on it after creation).

    Checked through the bound method, not the instance ``__dict__``: on
    CPython 3.11 touching ``__dict__`` makes every later attribute access on
    the node slower.
    """
    return getattr(node.update, "__func__", None) is type(node).update


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
