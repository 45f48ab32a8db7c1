"""Immutable views of node state, taken at the barrier and serialised later.

A checkpoint's barrier (sources paused, graph quiescent) must leave the
state as it was at that instant for the background write, while the
sources already run on and change the live state.  A :class:`StateView` is
that frozen instant: the job takes one per stateful node at the barrier and
calls :meth:`StateView.serialise` in a worker thread after resuming.

Two kinds exist:

* plain state (anything a node's ``get_state`` returns) is pickled at the
  barrier, in memory (:class:`PlainView`): pickling is the one generic way
  to freeze arbitrary mutable objects, so its cost stays in the pause.  The
  state file is written in the data encoding of :mod:`.codec` from those
  bytes in the background (pickle is only kept for the parts that need it);
* :class:`rivermark.KeyedState` hands out its changed keys since the last
  checkpoint (:mod:`rivermark.state`), which costs O(1) at the barrier; the
  values are encoded in the background (see ``docs/checkpointing.md``).
"""

from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.keyed import Chains, keyed_attrs
from rivermark.checkpoint.state.rocks.backend import rocks_attrs, rocks_view

logger = logging.getLogger(__name__)

__all__ = ["StateView", "PlainView", "view_of", "unpicklable_part"]


@runtime_checkable
class StateView(Protocol):
    """A node's state frozen at a barrier; serialised in the background."""

    def serialise(self) -> bytes:
        """The bytes of the state file (called once, in a worker thread)."""


@dataclass
class PlainView:
    """Plain state frozen at the barrier as pickle bytes (made here, in memory)."""

    frozen: bytes

    @classmethod
    def of(cls, state: object) -> PlainView:
        return cls(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))

    def serialise(self) -> bytes:
        # the bytes were made by this process a moment ago: loading them runs
        # only the job's own classes, as the live state did
        return codec.dumps(pickle.loads(self.frozen))


def view_of(
    chains: Chains,
    node_id: str,
    state: Any,
    epoch: int,
    last: int,
    *,
    base: bool = False,
    compact: bool = False,
    defer: bool = False,
) -> StateView:
    """The view of one node's ``state`` at the barrier of ``epoch`` (``last``: the durable one).

    State holding RocksDB mappings (``Job(state="rocksdb")``) is a
    :class:`~rivermark.checkpoint.state.rocks.backend.RocksView`: a RocksDB
    checkpoint of each, taken here.  Other state holding a
    :class:`rivermark.KeyedState` is a
    :class:`~rivermark.checkpoint.state.keyed.KeyedView` on the node's delta chain
    in ``chains`` (a base with ``base``, as in a savepoint; a delta even
    when a compaction is due with ``defer``; see :meth:`Chains.view`);
    anything else is a :class:`PlainView`.
    """
    if rocks_attrs(state):
        return rocks_view(node_id, state, epoch, last)
    if keyed_attrs(state):
        return chains.view(node_id, state, epoch, last, base=base, compact=compact, defer=defer)
    return PlainView.of(state)


def unpicklable_part(value: object, where: str = "state", depth: int = 0) -> tuple[str, object]:
    """The innermost part of ``value`` that cannot be pickled, and where it sits.

    What a message about state that cannot be written names (``where`` is the
    path from the state down to it):

    >>> import threading
    >>> unpicklable_part({"ok": 1, "held": [2, threading.Lock()]})[0]
    "state['held'][1]"
    """
    if depth < 20:
        items: list[tuple[str, Any]] = []
        if isinstance(value, dict):
            items = [(f"{where}[{k!r}]", v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            items = [(f"{where}.{k}", v) for k, v in vars(value).items()]
        for w, v in items:
            try:
                pickle.dumps(v)
            except Exception:
                return unpicklable_part(v, w, depth + 1)
    return where, value
