"""Each node's counts since the job first started: what a checkpoint carries per node.

A checkpoint's manifest holds, per node id, the counts of :data:`COUNTS`
(this run's plus those the restored checkpoint carried), so every count
carries over a restore.  The same figures are what the metrics report
(:mod:`rivermark.observe.metrics` reads them through :func:`totals`): one
definition for the checkpoint and the displays.

The hot path only keeps plain integers on the nodes (see
:mod:`rivermark.execution.counting`); a node that does not count what it
passes on derives it from its upstreams' counts (``derived_out``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from rivermark.core.node import Stream
from rivermark.sources.base import Source

__all__ = ["COUNTS", "CountsLate", "EventTimeWindows", "records_out", "totals"]

#: what a checkpoint's ``counts`` hold per node, in this order (totals since the job first
#: started; a checkpoint of an older version holds the first two)
COUNTS = ("records_in", "records_out", "errors_raised", "errors_skipped", "errors_handled", "late")


@runtime_checkable
class CountsLate(Protocol):
    """A node that counts late records: event-time windows, joins and tables.

    Read from another thread by the metrics.
    """

    #: records (DataFrame rows) of this run that arrived after their side's watermark had
    #: passed them (a window's: after their window had closed)
    late_count: int


@runtime_checkable
class EventTimeWindows(Protocol):
    """A node that keeps event-time windows, as the counts and the metrics read it.

    Read from another thread by the metrics.
    """

    #: records (DataFrame rows) that arrived after their window had closed
    late_count: int

    @property
    def open_windows(self) -> int: ...


def _in(n: Stream, outs: Mapping[int, int]) -> int:
    if isinstance(n, Source):
        return n.emitted_now()
    if not n.upstreams:
        return n.records_out
    return sum(outs.get(id(u), 0) for u in n.upstreams)


def _out(n: Stream, outs: Mapping[int, int]) -> int:
    if isinstance(n, Source):
        return n.emitted_now()
    if not n.downstreams:
        return 0
    if n.derived_out:
        return n.derive_records_out([outs.get(id(u), 0) for u in n.upstreams])
    return n.records_out


def records_out(nodes: Sequence[Stream]) -> dict[int, int]:
    """``records_out`` of every node (by ``id()``), derived where the node does not count it.

    ``nodes`` in topological order (upstreams first), as a job lists them.
    """
    outs: dict[int, int] = {}
    for n in nodes:
        outs[id(n)] = _out(n, outs)
    return outs


def totals(
    nodes: Sequence[Stream],
    id_of: Callable[[Stream], str],
    carried: Mapping[str, Sequence[int]],
) -> dict[str, list[int]]:
    """Node id -> its counts since the job first started (:data:`COUNTS` in order).

    This run's counts plus ``carried``, those the restored checkpoint
    carried: records in and out, errors raised, skipped and handled, late
    records.  A checkpoint of an older version carries records in and out only.
    """
    outs = records_out(nodes)
    result = {}
    for n in nodes:
        nid = id_of(n)
        before = [*carried.get(nid, ()), 0, 0, 0, 0, 0, 0][: len(COUNTS)]
        late = n.late_count if isinstance(n, CountsLate) else 0
        raised = max(n.error_count - n.errors_skipped - n.errors_handled, 0)
        now = [_in(n, outs), outs[id(n)], raised, n.errors_skipped, n.errors_handled, late]
        result[nid] = [a + b for a, b in zip(now, before)]
    return result
