"""Counting the records each node passes on: the one hook of the metrics.

A node's *records out* is kept in one of two ways, chosen per node class:

* **derived** (``derived_out = True``): nodes that pass on exactly one
  record per record received unless their user function fails (``map``,
  ``accumulate``, ``union``, ...).  Nothing is counted on the hot path;
  :mod:`rivermark.observe.metrics` computes ``out = in - errors`` when the
  figures are read, and ``in`` of any node is the sum of its upstreams'
  ``out`` (every record a synchronous node passes on reaches each of its
  downstreams once).
* **counted** (the default): every other node with downstreams steps its
  :func:`new_counter` once per record it passes on.  The step is attached
  where a node hands a record to its downstreams, in exactly two places:
  the node's push (:meth:`rivermark.execution.plan.Plan.push_of`, through
  :func:`counting_push`) and the generated code
  (:meth:`rivermark.execution.graphcode.GraphWriter.push_down`).

The counter is an ``itertools.repeat(None, 2**62)`` counting down: ``next``
on it changes one C integer and returns the shared ``None``, where
``node.records_out += 1`` makes a new Python integer per record (about
half the cost on the loop a source runs, see benchmarks/results/).  Its
remaining length (``operator.length_hint``) says how many steps were taken,
exactly and from any thread, also while the loop is held inside a record:
:func:`passed` is what ``Stream.records_out`` reads.

Sources count ``emitted`` themselves (:class:`rivermark.sources.base.Source`)
and are not counted again here.  A plain ``Stream()`` root fed by ``emit``
is counted only after :func:`count_emits` (a :class:`Job` calls it for its
``emit`` roots): outside a job, pushing records into a graph costs no
counting at the root.

``ENABLED = False`` (set before a graph is built or changed) turns the
counting off, for measuring what it costs (``benchmarks/``).
"""

from __future__ import annotations

import itertools
from operator import length_hint
from typing import TYPE_CHECKING, Any

from rivermark.execution.node import Node

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.execution.push import Push

__all__ = [
    "ENABLED",
    "Counter",
    "new_counter",
    "passed",
    "counts_output",
    "counting_push",
]

#: count records passed on by nodes that are not derived (see the module docs)
ENABLED = True

#: where a counter starts counting down (2**62 records: never reached)
_START = 1 << 62

Counter = itertools.repeat
"""The type of a node's counter of records passed on."""


def new_counter() -> Counter[None]:
    """A counter of records passed on: ``next(counter)`` per record, read by :func:`passed`."""
    return itertools.repeat(None, _START)


def passed(counter: Counter[None]) -> int:
    """How many times ``counter`` was stepped (exact, from any thread)."""
    return _START - length_hint(counter)


def counts_output(node: Node) -> bool:
    """Whether ``node`` adds to ``records_out`` when it passes a record on."""
    if not ENABLED or not node.downstreams:
        return False
    if not node.upstreams:
        return node.counts_emits
    return not node.derived_out


def counting_push(node: Node, push: Push) -> Push:
    """``push`` preceded by a step of the node's counter when the node counts."""
    if not counts_output(node):
        return push
    counter = node.out_counter

    def counted(x: Any, metadata: Any) -> Any:
        next(counter)
        return push(x, metadata)

    return counted
