"""The node-by-node path: push functions that carry a record to a node's downstreams.

A node passes a record on with ``_emit``, which calls its *push*:
``push(x, metadata)`` runs ``downstream.update(x, who, metadata)``
(:func:`build_push`), merged over several downstreams by :func:`fan_out`.
The plan (:mod:`.plan`) builds a node's push when it first passes a record
on, and takes it back when the graph changes shape, so a push never
outlives a ``connect``/``disconnect``/``destroy``.

This is the path of tracked records, asynchronous graphs and every node a
generated graph does not write out; the update it calls is the node's step
specialised to its configuration (:func:`.folding.specialized_update`) or the
node's own ``update``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rivermark.execution.node import Node, Results

__all__ = ["Push", "build_push", "fan_out", "merge_results", "no_downstream", "pass_down"]

Push = Callable[[Any, Any], Any]


def build_push(update: Callable[[object, object, object], object], who: object) -> Push:
    """A function equivalent to ``update(x, who, metadata)`` (a node's update, bound)."""

    def push(x: Any, metadata: Any) -> Any:
        return update(x, who, metadata)

    return push


def merge_results(out: list[Any] | None, results: Any) -> list[Any] | None:
    """Add the awaitables ``results`` (what a node's update returned) to ``out``."""
    if not results:
        return out
    if out is None:
        return list(results)
    out.extend(results)
    return out


def fan_out(pushes: list[Push]) -> Push:
    """Call every push in order and merge their awaitables."""

    def push(x: Any, metadata: Any) -> Any:
        out = None
        for p in pushes:
            out = merge_results(out, p(x, metadata))
        return out

    return push


def no_downstream(x: Any, metadata: Any) -> None:
    """The push of a node without downstreams."""
    return None


def pass_down(node: Any, x: Any, metadata: Any = None) -> Results:
    """``Stream._emit``: pass ``x`` on to every downstream, through the node's push.

    Returns what the downstreams returned (awaitables of asynchronous work
    still running below), so the caller can wait for the slowest branch.
    ``node`` is a :class:`.Node` (typed ``Any``: the method's ``self`` is
    every subclass of the node class).
    """
    push: Node = node
    return push._push(x, metadata)  # noqa: SLF001 - the push the plan put on the node
