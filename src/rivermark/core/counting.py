"""Counting the records each node passes on: the one hook of the metrics.

A node's *records out* is kept in one of two ways, chosen per node class:

* **derived** (``derived_out = True``): nodes that pass on exactly one
  record per record received unless their user function fails (``map``,
  ``accumulate``, ``union``, ...).  Nothing is counted on the hot path;
  :mod:`rivermark.observe.metrics` computes ``out = in - errors`` when the
  figures are read, and ``in`` of any node is the sum of its upstreams'
  ``out`` (every record a synchronous node passes on reaches each of its
  downstreams once).
* **counted** (the default): every other node with downstreams adds one to
  ``node.records_out`` per record it passes on.  The increment is attached
  where a node hands a record to its downstreams, in exactly two places:
  :meth:`rivermark.core.node.Stream._downstream_push` (the general and
  fused paths, through :func:`counting_push`) and
  :meth:`rivermark.fastpath.codegen.Codegen.push_down` (the generated code,
  through :func:`count_statement`).

Sources count ``emitted`` themselves (:class:`rivermark.sources.base.Source`)
and are not counted again here.  A plain ``Stream()`` root fed by ``emit``
is counted only after :func:`count_emits` (a :class:`Job` calls it for its
``emit`` roots): outside a job, pushing records into a graph costs no
counting at the root.

``ENABLED = False`` (set before a graph is built or changed) turns the
counting off, for measuring what it costs (``benchmarks/``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .fusion import Push
    from .node import Stream

__all__ = ["ENABLED", "counts_output", "counting_push", "count_statement", "count_emits"]

#: count records passed on by nodes that are not derived (see the module docs)
ENABLED = True


def counts_output(node: Stream) -> bool:
    """Whether ``node`` adds to ``records_out`` when it passes a record on."""
    if not ENABLED or not node.downstreams:
        return False
    if not node.upstreams:
        return node.counts_emits
    return not node.derived_out


def count_emits(node: Stream) -> None:
    """Count the records a root fed by ``emit`` passes on (from now on)."""
    from .node import _bump

    if not node.counts_emits:
        node.counts_emits = True
        _bump()


def counting_push(node: Stream, push: Push) -> Push:
    """``push`` preceded by ``node.records_out += 1`` when the node counts."""
    if not counts_output(node):
        return push

    def counted(x: Any, metadata: Any) -> Any:
        node.records_out += 1
        return push(x, metadata)

    return counted


def count_statement(node: Stream, name: str) -> str | None:
    """The statement generated code runs per record ``node`` (bound as ``name``) passes on."""
    if not counts_output(node):
        return None
    return f"{name}.records_out += 1"
