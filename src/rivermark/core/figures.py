"""The running figures of a join or a table, as a node reports them to the metrics.

A node that joins streams or keeps a table answers
:meth:`rivermark.core.node.Stream.join_figures` with a :class:`JoinFigures`;
every other node answers ``None``.  The metrics (``rivermark.observe``) read
it from their own thread and show each figure under its field's name, the
same in the metrics, ``GET /api/job``, Prometheus and the live page
(``docs/joins.md``, "Seen while running").

Gauges (what the node holds now) are recomputed from the state a restore
gives back; counters count since the job first started and carry over a
restore in the node's checkpointed state.

>>> f = JoinFigures(buffered={"left": 3, "right": 1}, late={"left": 0, "right": 2})
>>> f.as_json()["buffered"], f.keys
({'left': 3, 'right': 1}, None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["JoinFigures", "SIDES"]

#: the sides of a join, in the order of its upstreams
SIDES = ("left", "right")


@dataclass(frozen=True)
class JoinFigures:
    """What a join or a table holds and has counted (None: not this kind of node)."""

    #: gauge: records (DataFrame rows) held now per side (``left``, ``right``), waiting
    #: for a watermark or kept for partners still to come; an as-of join's table side
    #: is held by its table (``keys``), not by the join
    buffered: Mapping[str, int] = field(default_factory=dict)
    #: counter: records per side that arrived after their side's watermark had passed
    #: their time (they went to ``.late``); a table's own are the node's late records
    late: Mapping[str, int] = field(default_factory=dict)
    #: counter, as-of joins: left records that had to wait for the table side's
    #: watermark before they were joined (the others were joined on arrival)
    waited: int | None = None
    #: gauge, as-of joins: the event time (Unix seconds) of the oldest left record
    #: waiting now; the join's output is held back to it (None: none waits)
    oldest_waiting: float | None = None
    #: gauge, tables: keys held (deleted keys a join may still need included)
    keys: int | None = None
    #: counter, tables: versions dropped by retention
    versions_dropped: int | None = None
    #: counters, lookup joins: keys answered from the cache, and keys read from the
    #: table (since the process started: the cache is not checkpointed)
    cache_hits: int | None = None
    cache_misses: int | None = None
    #: gauge, lookup joins: keys in the cache now
    cache_size: int | None = None

    def as_json(self) -> dict[str, object]:
        """The figures under their names, as ``GET /api/job`` and the live page carry them."""
        return {
            "buffered": dict(self.buffered),
            "late": dict(self.late),
            "waited": self.waited,
            "oldest_waiting": self.oldest_waiting,
            "keys": self.keys,
            "versions_dropped": self.versions_dropped,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "cache_size": self.cache_size,
        }
