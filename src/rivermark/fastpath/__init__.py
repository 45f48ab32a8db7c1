"""The fast path: how records cross a graph without one Python call per node.

* :mod:`.push` -- the node-by-node path: ``push(x, metadata)`` calls the
  downstream's ``update``; a node's ``_emit`` calls one per downstream.
* :mod:`.codegen` -- writes the synchronous graph below a node out as one
  generated function: ``emit`` (one record) or ``run(records)`` (the loop a
  source runs over a chunk of records).
* :mod:`.kernels` -- what each common operator's per-record step looks like
  written out inside that function (registered per operator class).

See ``docs/architecture.md``.  Nothing is imported here: :mod:`.kernels`
imports the operators, which import the engine, which imports
:mod:`.codegen` and :mod:`.push`.
"""
