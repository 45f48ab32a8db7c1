"""The nodes of a job's graph by the part each plays in a checkpoint.

A :class:`~rivermark.checkpoint.protocol.job.Job`, its recovery at start
(:class:`~rivermark.checkpoint.protocol.recovery.Recovery`) and its shutdown
(:class:`~rivermark.checkpoint.protocol.shutdown.Shutdown`) all work on the same
sorting of the graph, made once when the job is created: every node in
topological order, the sources, the stateful nodes, the checkpointed sinks,
and the stable id the checkpoint stores each node under.

>>> from rivermark import Stream
>>> source = Stream.from_iterable([1, 2])
>>> totals = source.accumulate(lambda a, x: a + x, start=0)
>>> roles = JobGraph.of(source)
>>> [roles.id_of(n) for n in roles.nodes], len(roles.sources), len(roles.stateful)
(['fromiterable-1', 'accumulate-1'], 1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

from rivermark.core import graph
from rivermark.core.node import Stream
from rivermark.sinks.base import CheckpointedSink, ClosingSink
from rivermark.sources.base import Source

__all__ = ["JobGraph"]


@dataclass(frozen=True)
class JobGraph:
    """A job's nodes sorted by role; ``ids`` maps ``id(node)`` to its checkpoint id."""

    #: every node of the graph, in topological order
    nodes: list[Stream]
    #: the nodes that produce records (their positions are checkpointed)
    sources: list[Source]
    #: the nodes, sources excepted, whose state is checkpointed
    stateful: list[Stream]
    #: the sinks that take part in checkpoints (pre-commit, commit, restore)
    sinks: list[CheckpointedSink]
    ids: dict[int, str]
    #: the nodes, sources excepted, that hold a file or a connection to close when
    #: the job stops (the checkpointed sinks among them, and e.g. ``lookup_sql``)
    closing: tuple[ClosingSink, ...] = ()

    @classmethod
    def of(cls, node: Stream) -> JobGraph:
        """The roles in the whole graph of ``node``."""
        nodes = graph.topological(node)
        return cls(
            nodes=nodes,
            sources=[n for n in nodes if isinstance(n, Source)],
            stateful=[n for n in nodes if n.is_stateful and not isinstance(n, Source)],
            sinks=[
                n for n in nodes if isinstance(n, CheckpointedSink) and not isinstance(n, Source)
            ],
            ids=graph.node_ids(node),
            closing=tuple(
                n for n in nodes if isinstance(n, ClosingSink) and not isinstance(n, Source)
            ),
        )

    def id_of(self, node: Stream | CheckpointedSink) -> str:
        """The stable id the checkpoint stores ``node`` under."""
        return self.ids[id(node)]
