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
* :class:`Positioned`: a source's position (``position``, ``position_now``)
  and ``seek`` to resume from it, generic in the position's type as
  :class:`~rivermark.sources.base.Source` is.
* :class:`Bootstraps` and :class:`ReadsToEnd`: a node (a table with
  ``bootstrap=True``) whose sources are read to the end their input has when
  the job starts before the job's other sources start, and a source that can
  be read so (a Kafka source: its partitions' end offsets at start).

>>> from rivermark import Stream
>>> node = Stream()
>>> isinstance(node, HoldsWork), node.in_flight, isinstance(node, Stateful)
(True, 0, True)
>>> isinstance(node, JobAware)
False
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    # a bare Positioned has a position of any type (a default of a type variable:
    # typing has it from Python 3.13)
    from typing_extensions import TypeVar

    P = TypeVar("P", default=Any)
else:
    from typing import TypeVar

    P = TypeVar("P")

__all__ = [
    "Bootstraps",
    "GraphNode",
    "HoldsWork",
    "JobAware",
    "Position",
    "Positioned",
    "ReadsToEnd",
    "Stateful",
]

#: where a source of unknown type is: a JSON value (a line number, offsets by
#: partition, ...), as a checkpoint manifest holds it and hands it back to ``seek``
Position: TypeAlias = Any


@runtime_checkable
class GraphNode(Protocol):
    """A node as the graph's walks see it (:mod:`rivermark.core.graph`; ``Stream`` is one)."""

    upstreams: list[Any]
    downstreams: list[Any]
    #: its stable name, if it was given one (``name=``)
    name: str | None
    stream_name: str | None
    #: the order nodes were created in (roots are ordered by it)
    _serial: int

    @property
    def is_stateful(self) -> bool: ...

    # how pictures draw it (streamz's names, class attributes of a node class)
    @property
    def _graphviz_shape(self) -> str: ...

    @property
    def _graphviz_style(self) -> str: ...

    @property
    def _graphviz_fillcolor(self) -> str: ...

    @property
    def _graphviz_orientation(self) -> int: ...

    def walk(self) -> Iterator[Any]: ...

    def state_signature(self) -> str: ...

    def display_name(self) -> str: ...


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
class Positioned(Protocol[P]):
    """A source that can say where it is and resume from there."""

    def position(self) -> P: ...

    def position_now(self) -> P: ...

    def seek(self, position: P) -> None: ...


@runtime_checkable
class Bootstraps(Protocol):
    """A node whose upstream sources a job reads to their end before its other sources.

    ``bootstrap`` true: when the job starts (fresh or restored), the sources
    upstream of the node are read up to where their input ends at that moment,
    and only then do the job's other sources start (a table's bootstrap).
    """

    @property
    def bootstrap(self) -> bool: ...


@runtime_checkable
class ReadsToEnd(Protocol):
    """A source that can be read to the end its input has when the job starts."""

    async def mark_end(self) -> None:
        """Note where the input ends now (after ``prepare``, before the source starts)."""
        ...

    def caught_up(self) -> bool:
        """Whether every record before that end has been emitted (and processed)."""
        ...

    def records_read(self) -> int:
        """Records emitted so far (the bootstrap reports how many it read)."""
        ...
