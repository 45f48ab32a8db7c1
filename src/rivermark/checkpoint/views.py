"""Immutable views of node state, taken at the barrier and serialised later.

A checkpoint's barrier (sources paused, graph quiescent) must leave the
state as it was at that instant for the background write, while the
sources already run on and change the live state.  A :class:`StateView` is
that frozen instant: the job takes one per stateful node at the barrier and
calls :meth:`StateView.serialise` in a worker thread after resuming.

Two kinds exist:

* plain state (anything a node's ``get_state`` returns) is pickled at the
  barrier: the bytes are the view.  Pickling is the one generic way to
  freeze arbitrary mutable objects, so its cost stays in the pause;
* :class:`rivermark.KeyedState` hands out its changed keys since the last
  checkpoint (:mod:`rivermark.state`), which costs O(1) at the barrier; the
  values are pickled in the background (see ``docs/checkpointing.md``).
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

logger = logging.getLogger(__name__)

__all__ = ["StateView"]


@runtime_checkable
class StateView(Protocol):
    """A node's state frozen at a barrier; serialised in the background."""

    def serialise(self) -> bytes:
        """The bytes of the state file (called once, in a worker thread)."""
