"""The fast path: how records cross a graph without one Python call per node.

* :mod:`.push` -- the node-by-node path: ``push(x, metadata)`` calls the
  downstream's ``update``; a node's ``_emit`` calls one per downstream.
* :mod:`.codegen` -- writes the synchronous graph below a node out as one
  generated function: ``emit`` (one record) or ``run(records)`` (the loop a
  source runs over a chunk of records).
  An operator's *kernel* (its per-record step, written in its own module
  and registered per class) is written out inside that function, and is
  also compiled per node as the node's own ``update``
  (:func:`.codegen.derived_update`).

See ``docs/architecture.md``.  Nothing is imported here: the operators
import the engine, which imports :mod:`.codegen` and :mod:`.push`.
"""
