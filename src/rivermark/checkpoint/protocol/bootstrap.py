"""A table's bootstrap: its sources read to their end before the job's other sources start.

A node that :class:`~rivermark.core.contracts.Bootstraps` (a table made with
``to_table(..., bootstrap=True)``) names the sources upstream of it; each
must be able to read to the end its input has now
(:class:`~rivermark.core.contracts.ReadsToEnd`: a Kafka source, up to its
partitions' end offsets at start), else the job is refused when it is made,
in one line naming the table and the source.

When a run starts (fresh or restored), :class:`Bootstrap` has those sources
note their ends (after ``prepare``, before the checkpoint of a fresh start)
and start; the job's other sources are made but not started, so they emit
nothing and their positions stay where the run began.  The run loop asks
:meth:`Bootstrap.ready` at every turn; once every bootstrap source has
caught up (or ended), the others start.  Checkpoints taken meanwhile are
ordinary ones: the bootstrap sources' positions advance, the held ones'
stay, and a run restored from one of them bootstraps again, to the ends of
its own start.
"""

from __future__ import annotations

import logging
import time

from rivermark.checkpoint.protocol.roles import JobGraph
from rivermark.core.contracts import Bootstraps, ReadsToEnd
from rivermark.core.graph import ancestors
from rivermark.errors import ConfigurationError
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["Bootstrap"]


class Bootstrap:
    """Which sources a job reads first (``first``), and the others it holds until then."""

    def __init__(self, roles: JobGraph) -> None:
        first: dict[int, ReadsToEnd] = {}
        for table in roles.nodes:
            if not isinstance(table, Bootstraps) or not table.bootstrap:
                continue
            upstream = [n for n in ancestors(table) if isinstance(n, Source)]
            if not upstream:
                raise ConfigurationError(
                    f"Job: {table.display_name()} has bootstrap=True, but its changes come "
                    "from no source (they are emitted): read them from Kafka "
                    "(from_kafka, from_kafka_batched), or leave bootstrap=False"
                )
            for src in upstream:
                if not isinstance(src, ReadsToEnd):
                    raise ConfigurationError(
                        f"Job: {table.display_name()} has bootstrap=True, but its changes "
                        f"come from {src.display_name()}, which cannot "
                        "be read to the end its input has at start; read the changes from "
                        "Kafka (from_kafka, from_kafka_batched), or leave bootstrap=False "
                        "(an event-time join waits for the table's watermark instead)"
                    )
                first[id(src)] = src
        #: the sources read to their end first
        self.first: list[ReadsToEnd] = list(first.values())
        #: the sources that start once the first ones caught up
        self.held: list[Source] = [s for s in roles.sources if id(s) not in first]
        #: whether the held sources still wait (set by :meth:`begin`)
        self.pending = False
        self._started = 0.0
        self._read_before = 0

    def holds(self, source: Source) -> bool:
        """Whether ``source`` waits for the bootstrap (do not start it yet)."""
        return self.pending and any(s is source for s in self.held)

    async def begin(self) -> None:
        """A run starts (its sources prepared): the first sources note their ends."""
        if not self.first:
            return
        for src in self.first:
            await src.mark_end()
        self.pending = True
        self._started = time.monotonic()
        self._read_before = sum(s.records_read() for s in self.first)
        logger.info(
            "bootstrap: reading %s to the end it has now before %d other source(s) start",
            ", ".join(_name(s) for s in self.first),
            len(self.held),
        )

    def ready(self) -> bool:
        """Whether the held sources may start now (once: then the bootstrap is over)."""
        if not self.pending or not all(s.caught_up() for s in self.first):
            return False
        self.pending = False
        read = sum(s.records_read() for s in self.first) - self._read_before
        logger.info(
            "bootstrap done: %d records read from %s in %.3f s; starting %d other source(s)",
            read,
            ", ".join(_name(s) for s in self.first),
            time.monotonic() - self._started,
            len(self.held),
            extra={"bootstrap_records": read},
        )
        return True


def _name(src: ReadsToEnd) -> str:
    return src.display_name() if isinstance(src, Source) else type(src).__name__
