"""What a job reads from the nodes of its graph, declared in one place.

A :class:`~rivermark.checkpoint.Job` drives nodes it did not write (built-in
operators, sources, sinks, plugins).  Each thing it relies on is one of the
protocols below, with public members only; ``Stream`` and ``Source``
provide the defaults, and a node that differs overrides the member:

* :class:`HoldsWork`: ``in_flight``, the records a node has taken in and not
  yet passed on or written (an asynchronous sink's pending writes, an
  ``async`` map's calls, a Dask ``gather``'s futures).  A checkpoint barrier
  and a job's final checkpoint wait until every node's count is 0.
* :class:`JobAware`: ``job_id``, for a node that names its job in what it
  writes outside (a Kafka source's commit metadata, a sink's transactional
  id).  It starts as ``None``; the job sets it when it adopts the node.
* :class:`Stateful`: ``get_state``/``set_state`` and ``state_signature``,
  the configuration a restore is checked against.
* :class:`Positioned`: a source's :data:`Position` (``position``,
  ``position_now``) and ``seek`` to resume from it.

>>> from rivermark import Stream
>>> node = Stream()
>>> isinstance(node, HoldsWork), node.in_flight, isinstance(node, Stateful)
(True, 0, True)
>>> isinstance(node, JobAware)
False
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias, runtime_checkable

__all__ = ["HoldsWork", "JobAware", "Position", "Positioned", "Stateful"]

#: where a source is: a JSON value (a line number, offsets by partition, ...),
#: written into the checkpoint manifest and handed back to ``seek``
Position: TypeAlias = Any


@runtime_checkable
class HoldsWork(Protocol):
    """A node that can hold records in flight (0 when it holds none)."""

    in_flight: int


@runtime_checkable
class JobAware(Protocol):
    """A node that names the job running it (``None`` until a job adopts it)."""

    job_id: str | None


@runtime_checkable
class Stateful(Protocol):
    """A node whose state a checkpoint keeps."""

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...

    def state_signature(self) -> str: ...


@runtime_checkable
class Positioned(Protocol):
    """A source that can say where it is and resume from there."""

    def position(self) -> Position: ...

    def position_now(self) -> Position: ...

    def seek(self, position: Position) -> None: ...
