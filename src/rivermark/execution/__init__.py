"""How records travel: from a source through a graph's nodes to its sinks.

The engine's data flow, apart from the graph's shape (:mod:`rivermark.core`):

* :mod:`.steps` -- an operator's per-record step is its ``update`` method,
  marked :func:`.steps.step`; the faster forms the engine runs are derived
  from that method's syntax tree, never written a second time;
* :mod:`.plan` -- one plan per connected graph: what was built for its
  current shape (each node's push, the generated ``emit`` and record
  loops, which nodes need the event loop), retired when the shape changes;
* :mod:`.graphcode` -- writes the synchronous graph below a node out as
  one function, every step in place: ``run(records)`` (what a source runs
  over a chunk) and ``emit(x)``;
* :mod:`.push` -- the node-by-node path (tracked records, asynchronous
  graphs, nodes not written out);
* :mod:`.emitting` -- ``Stream.emit`` on an event loop, with
  ``asynchronous=True``, or waiting for deferred delivery;
* :mod:`.counting` -- the records each node passes on (the metrics' hook);
* :mod:`.delivery` -- the contract of nodes that pass records on after their
  ``update`` returned (Dask's ``gather``, ``latest``).

See ``docs/architecture.md``, "How a record flows".
"""

from __future__ import annotations

from rivermark.execution.steps import graph_fact as graph_fact
from rivermark.execution.steps import step as step

__all__ = ["graph_fact", "step"]
