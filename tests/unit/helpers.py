"""Helpers shared by unit tests in several folders."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rivermark import RefCounter
from rivermark.execution import graphcode, plan


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
