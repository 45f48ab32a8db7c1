"""Helpers shared by unit tests in several folders."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from rivermark import RefCounter
from rivermark.execution import graphcode, plan

#: a record of a join test: ``(side, partition, ...)``
R = TypeVar("R", bound=tuple[Any, ...])


def interleave(recs: list[R], rnd: random.Random) -> list[R]:
    """Another arrival order keeping each (side, partition)'s own order (``r[0]``, ``r[1]``)."""
    queues: dict[tuple[Any, Any], list[R]] = {}
    for r in recs:
        queues.setdefault((r[0], r[1]), []).append(r)
    out: list[R] = []
    live = [q for q in queues.values() if q]
    while live:
        q = rnd.choice(live)
        out.append(q.pop(0))
        live = [q for q in live if q]
    return out


class StrictRef(RefCounter):
    """A RefCounter that also counts releases arriving after completion (double releases)."""

    def __init__(self) -> None:
        super().__init__(callback=self._fire)
        self.fired = 0
        self.late = 0

    def _fire(self) -> None:
        self.fired += 1

    def release(self, n: int = 1) -> None:
        if self.done:
            self.late += 1
        super().release(n)


@contextmanager
def node_by_node() -> Iterator[None]:
    """Graphs built and run inside take the node-by-node path (no generated code)."""
    graphcode.ENABLED = False
    plan.retire_all()
    try:
        yield
    finally:
        graphcode.ENABLED = True
        plan.retire_all()
