"""Incremental checkpoints of :class:`rivermark.KeyedState`: deltas, bases, compaction.

A stateful node whose ``get_state()`` is a dict with one or more
``KeyedState`` values (``accumulate(f, start=KeyedState())``) is written as
one state file per checkpoint holding::

    {"rest": <pickled dict of the node's other state>,
     "keyed": {attr: {key: value or DELETED, ...}},
     "base": True}          # a base (holds no DELETED); absent in a delta

In a *delta* the ``keyed`` part holds the keys changed since the parent
checkpoint; in a *base* it holds every key.  The manifest's ``chains``
names each file's parent (``None`` for a base) and base, so restoring
applies the base and then every delta in order (:func:`materialise`).

:class:`Chains` is the job's book of each such node's chain: which
``KeyedState`` objects it follows, its parent epoch, how many deltas and
bytes lie on top of the base.  At a barrier :meth:`Chains.view` decides
between a delta and a base and takes an O(1) view (the changes dictionary);
a base whose content is not in memory is *compacted* in the worker thread
from the parent's chain, read back from the store, plus the new changes.
"""

from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass, field
from typing import Any

from ..state import DELETED, KeyedState, apply_delta
from .faults import fault_point
from .store import Store

logger = logging.getLogger(__name__)

__all__ = ["Chains", "KeyedView", "materialise", "COMPACT_EVERY"]

#: a base is written after this many deltas, or once the deltas outweigh the base
COMPACT_EVERY = 20


def keyed_attrs(state: Any) -> dict[str, KeyedState]:
    """The ``KeyedState`` values of a node's state dict (empty: plain state)."""
    if not isinstance(state, dict):
        return {}
    return {a: v for a, v in state.items() if isinstance(v, KeyedState)}


@dataclass
class _Chain:
    parent: int
    base: int
    lineages: dict[str, int]
    deltas: int = 0
    delta_bytes: int = 0
    base_bytes: int = 0


@dataclass
class KeyedView:
    """One node's state frozen at a barrier, serialised in the worker thread."""

    node_id: str
    rest: bytes
    #: attr -> changes since the parent (a delta), or the whole content (a base)
    parts: dict[str, dict[Any, Any]]
    parent: int | None
    base: int
    #: the ``KeyedState`` objects (by lineage) the view was taken from
    lineages: dict[str, int] = field(default_factory=dict)
    #: a base compacted from the parent's chain in the store plus ``parts``
    compact_from: int | None = None
    store: Store | None = None
    size: int = field(default=0)

    def serialise(self) -> bytes:
        parts = self.parts
        if self.compact_from is not None:
            assert self.store is not None
            _, chains = self.store.load_chains(self.compact_from)
            _, content = materialise(chains[self.node_id])
            for attr, changes in parts.items():
                apply_delta(content.setdefault(attr, {}), changes)
            parts = content
            fault_point("compaction")
        out: dict[str, Any] = {"rest": self.rest, "keyed": parts}
        if self.parent is None:
            # a base is a copy of the whole content (``KeyedState.take_delta`` the
            # first time, ``copy_all``, or a compaction): no key marked deleted
            out["base"] = True
        blob = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.size = len(blob)
        return blob


def without_deleted(changes: dict[Any, Any]) -> dict[Any, Any]:
    """``changes`` without the keys marked deleted (the dict itself when there are none).

    >>> without_deleted({"a": 1, "b": DELETED})
    {'a': 1}
    """
    if DELETED in changes.values():  # a scan in C (identity), no Python loop
        return {k: v for k, v in changes.items() if v is not DELETED}
    return changes


def materialise(blobs: list[bytes]) -> tuple[dict[str, Any], dict[str, dict[Any, Any]]]:
    """The node's other state and each keyed attribute's content, from base + deltas.

    The base's dictionary is taken as it was unpickled (not copied key by
    key: a compaction, and a restore, cost one ``pickle.loads`` of it); each
    delta is applied to it in order.
    """
    rest: dict[str, Any] = {}
    content: dict[str, dict[Any, Any]] = {}
    for blob in blobs:
        part = pickle.loads(blob)
        rest = pickle.loads(part["rest"])
        for attr, changes in part["keyed"].items():
            if attr in content:
                apply_delta(content[attr], changes)
            else:  # the base (older versions wrote bases that may mark deleted keys)
                content[attr] = changes if part.get("base") else without_deleted(changes)
    return rest, content


class Chains:
    """The job's book of delta chains, one per node with ``KeyedState`` state."""

    def __init__(self, store: Store, compact_every: int = COMPACT_EVERY) -> None:
        self.store = store
        self.compact_every = compact_every
        self._chains: dict[str, _Chain] = {}

    def view(self, node_id: str, state: dict[str, Any], epoch: int, last: int) -> KeyedView:
        """At the barrier of ``epoch`` (the last durable one is ``last``): the node's view."""
        keyed = keyed_attrs(state)
        rest = pickle.dumps({a: v for a, v in state.items() if a not in keyed})
        deltas = {a: ks.take_delta() for a, ks in keyed.items()}
        chain = self._chains.get(node_id)
        lineages = {a: d.lineage for a, d in deltas.items()}
        follows = chain is not None and chain.parent == last and chain.lineages == lineages
        if follows:
            assert chain is not None
            due = chain.deltas + 1 >= self.compact_every or (
                chain.delta_bytes > chain.base_bytes > 0
            )
            changes = {a: d.changes for a, d in deltas.items()}
            if not due:
                return KeyedView(node_id, rest, changes, last, chain.base, lineages)
            return KeyedView(
                node_id, rest, changes, None, epoch, lineages, compact_from=last, store=self.store
            )
        # a new chain: the changes are the whole content, or the content is copied
        parts = {a: d.changes if d.complete else keyed[a].copy_all() for a, d in deltas.items()}
        return KeyedView(node_id, rest, parts, None, epoch, lineages)

    def link(self, view: KeyedView) -> dict[str, Any]:
        """The manifest's ``chains`` entry of ``view``."""
        return {"parent": view.parent, "base": view.base}

    def written(self, view: KeyedView, epoch: int) -> None:
        """``view`` is durable as part of ``epoch``: the chain goes on from there."""
        if view.parent is None:
            self._chains[view.node_id] = _Chain(epoch, epoch, view.lineages, base_bytes=view.size)
            return
        chain = self._chains[view.node_id]
        chain.parent = epoch
        chain.deltas += 1
        chain.delta_bytes += view.size

    def restored(
        self, node_id: str, epoch: int, link: dict[str, Any], blobs: list[bytes]
    ) -> dict[str, Any]:
        """The node's state from its chain's ``blobs``; the chain goes on from ``epoch``."""
        rest, content = materialise(blobs)
        state: dict[str, Any] = dict(rest)
        for attr, data in content.items():
            state[attr] = KeyedState.restored(data)
        self._chains[node_id] = _Chain(
            parent=epoch,
            base=link["base"],
            lineages={a: state[a].lineage for a in content},
            deltas=len(blobs) - 1,
            delta_bytes=sum(len(b) for b in blobs[1:]),
            base_bytes=len(blobs[0]),
        )
        return state
