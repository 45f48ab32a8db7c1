"""Incremental checkpoints of :class:`rivermark.KeyedState`: deltas, bases, compaction.

A stateful node whose ``get_state()`` is a dict with one or more
``KeyedState`` values (``accumulate(f, start=KeyedState())``) is written as
one state file per checkpoint holding::

    {"rest": <dict of the node's other state>,
     "keyed": {attr: {key: value or DELETED, ...}},
     "base": True}          # a base (holds no DELETED); absent in a delta

in the data encoding of :mod:`.codec` (before format 4 of the manifest: a
pickle whose ``rest`` was pickled on its own).

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rivermark.checkpoint.faults import fault_point
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.columns import Columns, compact
from rivermark.checkpoint.stores.manifest import sha256_of
from rivermark.checkpoint.stores.store import Store
from rivermark.state import DELETED, KeyedState, apply_delta

logger = logging.getLogger(__name__)

__all__ = ["Chains", "KeyedView", "materialise", "COMPACT_EVERY"]

#: a base is written after this many deltas, or once the deltas outweigh the base
COMPACT_EVERY = 20


def keyed_attrs(state: Any) -> dict[str, KeyedState]:
    """The in-memory ``KeyedState`` values of a node's state dict (empty: plain state).

    A RocksDB mapping (another :class:`~rivermark.state.KeyedStore`,
    ``external``) is not one: it is checkpointed by
    :mod:`rivermark.checkpoint.state.rocks`, not as a delta chain.
    """
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
    #: the sha256 of the chain files this job wrote or restored (see serialise)
    known: set[str] = field(default_factory=set)
    digest: str = ""

    def serialise(self) -> bytes:
        # a mapping of one shape is written column by column (numbers as buffers)
        keyed: dict[str, Any] = {attr: Columns.of(changes) for attr, changes in self.parts.items()}
        if self.compact_from is not None:
            assert self.store is not None
            m, chains = self.store.load_chains(self.compact_from)
            blobs = chains[self.node_id]
            # pickled parts are loaded if the checkpoint is trusted, or if every
            # file is one this job wrote or restored (the same bytes: digests)
            trusted = self.store.trust.allow_pickle(m.signature_status) or all(
                sha256_of(b) in self.known for b in blobs
            )
            keyed = compacted(blobs, keyed, allow_pickle=trusted)
            fault_point("compaction")
        out: dict[str, Any] = {"rest": pickle.loads(self.rest), "keyed": keyed}
        if self.parent is None:
            # a base is a copy of the whole content (``KeyedState.take_delta`` the
            # first time, ``copy_all``, or a compaction): no key marked deleted
            out["base"] = True
        blob = codec.dumps(out)
        self.size = len(blob)
        self.digest = sha256_of(blob)
        return blob


def compacted(
    blobs: list[bytes], changes: dict[str, object], *, allow_pickle: bool = False
) -> dict[str, object]:
    """Each keyed attribute's content: the chain ``blobs`` with ``changes`` on top.

    Where every part of an attribute is :class:`~.columns.Columns` (or can be
    made one), they are merged column by column (:func:`~.columns.compact`:
    no Python object per key); otherwise the dicts are built and the deltas
    applied, as :func:`materialise` does.
    """
    chunks: dict[str, list[Any]] = {}
    for blob in blobs:
        part = codec.loads(blob, allow_pickle=allow_pickle, columns=True)
        for attr, data in part["keyed"].items():
            chunks.setdefault(attr, []).append(data)
    for attr, data in changes.items():
        chunks.setdefault(attr, []).append(data)
    out: dict[str, Any] = {}
    for attr, parts in chunks.items():
        parts = [p for p in parts if type(p) is Columns or p] or [{}]  # an empty one adds nothing
        columns = [p if type(p) is Columns else Columns.from_mapping(p) for p in parts]
        whole = [c for c in columns if c is not None]
        merged = compact(whole) if len(whole) == len(columns) else None
        if merged is not None:
            out[attr] = merged
            continue
        content: dict[Any, Any] = {}
        for i, p in enumerate(parts):
            d = p.to_dict() if type(p) is Columns else p
            if i == 0:
                content = without_deleted(dict(d))
            else:
                apply_delta(content, d)
        out[attr] = Columns.of(content)
    return out


def without_deleted(changes: dict[object, object]) -> dict[object, object]:
    """``changes`` without the keys marked deleted (the dict itself when there are none).

    >>> without_deleted({"a": 1, "b": DELETED})
    {'a': 1}
    """
    if DELETED in changes.values():  # a scan in C (identity), no Python loop
        return {k: v for k, v in changes.items() if v is not DELETED}
    return changes


def checkpoint_kind(views: Iterable[object]) -> str:
    """``"delta"`` when one of a checkpoint's views is a delta on a parent, else ``"full"``."""
    return (
        "delta" if any(isinstance(v, KeyedView) and v.parent is not None for v in views) else "full"
    )


def materialise(
    blobs: list[bytes], *, allow_pickle: bool = False, what: str = "the state"
) -> tuple[dict[str, object], dict[str, dict[object, object]]]:
    """The node's other state and each keyed attribute's content, from base + deltas.

    The base's dictionary is taken as it was decoded (not copied key by
    key: a compaction, and a restore, cost one decoding of it); each
    delta is applied to it in order.  Pickled parts (and files of older
    versions, pickles) are loaded only with ``allow_pickle``
    (:func:`.codec.loads`).
    """
    rest: dict[str, Any] = {}
    content: dict[str, dict[Any, Any]] = {}
    for blob in blobs:
        part = codec.loads(blob, allow_pickle=allow_pickle, what=what)
        # an older version pickled the rest on its own (loading it was allowed above)
        rest = pickle.loads(part["rest"]) if codec.is_legacy(blob) else part["rest"]
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
        #: per node, the sha256 of the files of its chain this job wrote or restored
        #: (from its newest base on: a job that runs for days keeps no more)
        self.known: dict[str, set[str]] = {}

    def compaction_due(self, node_id: str, state: dict[str, object], last: int) -> bool:
        """Whether the node's chain, going on from ``last``, has grown to ``compact_every`` links.

        The job asks every node before it takes their views: when one is
        due, every chain is compacted at that barrier (``view(compact=True)``),
        so no chain reaches back past the last compaction.  Chains compacted
        at different checkpoints would make retention keep checkpoints
        without end: each one kept for a node's chain holds another node's
        chain reaching further back.  A chain that starts over on its own (a
        new mapping, deltas outweighing the base) starts later than that
        point, which keeps the bound.
        """
        chain = self._chains.get(node_id)
        if chain is None or chain.parent != last:
            return False
        if chain.lineages != {a: ks.lineage for a, ks in keyed_attrs(state).items()}:
            return False
        return chain.deltas + 1 >= self.compact_every

    def view(
        self,
        node_id: str,
        state: dict[str, object],
        epoch: int,
        last: int,
        *,
        base: bool = False,
        compact: bool = False,
        defer: bool = False,
    ) -> KeyedView:
        """At the barrier of ``epoch`` (the last durable one is ``last``): the node's view.

        With ``base`` (a savepoint) the view is a base holding the whole
        content, copied from memory: it needs no older checkpoint.  With
        ``compact`` a chain that would go on with a delta is compacted into
        a base instead (see :meth:`compaction_due`).  With ``defer`` (the
        final checkpoint of a run, written with the sources held) a chain
        that follows goes on with a delta even when a compaction is due, up
        to twice ``compact_every`` links and deltas twice the base's bytes
        (so that a job run in many short runs still compacts): the next
        run's first checkpoint compacts it.
        """
        keyed = keyed_attrs(state)
        known = self.known.setdefault(node_id, set())
        rest = pickle.dumps({a: v for a, v in state.items() if a not in keyed})
        deltas = {a: ks.take_delta() for a, ks in keyed.items()}
        chain = self._chains.get(node_id)
        lineages = {a: d.lineage for a, d in deltas.items()}
        # a complete delta (the whole content: a mapping that dropped its record of
        # changes) cannot go on as a delta, it would not delete the keys deleted
        follows = (
            not base
            and chain is not None
            and chain.parent == last
            and chain.lineages == lineages
            and not any(d.complete for d in deltas.values())
        )
        if follows:
            assert chain is not None
            due = (
                compact
                or chain.deltas + 1 >= self.compact_every
                or (chain.delta_bytes > chain.base_bytes > 0)
            )
            if defer:  # a run's last checkpoint: the next run compacts, within bounds
                due = (
                    chain.deltas + 1 >= 2 * self.compact_every
                    or chain.delta_bytes > 2 * chain.base_bytes > 0
                )
            changes = {a: d.changes for a, d in deltas.items()}
            if not due:
                return KeyedView(node_id, rest, changes, last, chain.base, lineages, known=known)
            return KeyedView(
                node_id,
                rest,
                changes,
                None,
                epoch,
                lineages,
                compact_from=last,
                store=self.store,
                known=known,
            )
        # a new chain: the changes are the whole content, or the content is copied
        parts = {a: d.changes if d.complete else keyed[a].copy_all() for a, d in deltas.items()}
        return KeyedView(node_id, rest, parts, None, epoch, lineages, known=known)

    def link(self, view: KeyedView) -> dict[str, object]:
        """The manifest's ``chains`` entry of ``view``."""
        return {"parent": view.parent, "base": view.base}

    def written(self, view: KeyedView, epoch: int) -> None:
        """``view`` is durable as part of ``epoch``: the chain goes on from there."""
        if view.parent is None:
            # a view in flight keeps the set it was given: the old chain's digests
            self.known[view.node_id] = {view.digest}
            self._chains[view.node_id] = _Chain(epoch, epoch, view.lineages, base_bytes=view.size)
            return
        self.known.setdefault(view.node_id, set()).add(view.digest)
        chain = self._chains[view.node_id]
        chain.parent = epoch
        chain.deltas += 1
        chain.delta_bytes += view.size

    def restored(
        self,
        node_id: str,
        epoch: int,
        link: dict[str, Any],
        blobs: list[bytes],
        *,
        allow_pickle: bool = False,
        what: str = "the state",
        goes_on: bool = True,
    ) -> dict[str, Any]:
        """The node's state from its chain's ``blobs``; the chain goes on from ``epoch``.

        ``goes_on=False`` (state restored under another id than it was written
        with): the node's next checkpoint starts a new chain.
        """
        rest, content = materialise(blobs, allow_pickle=allow_pickle, what=what)
        self.known[node_id] = {sha256_of(b) for b in blobs}
        state: dict[str, Any] = dict(rest)
        for attr, data in content.items():
            state[attr] = KeyedState.restored(data)
        if not goes_on:
            return state
        self._chains[node_id] = _Chain(
            parent=epoch,
            base=link["base"],
            lineages={a: state[a].lineage for a in content},
            deltas=len(blobs) - 1,
            delta_bytes=sum(len(b) for b in blobs[1:]),
            base_bytes=len(blobs[0]),
        )
        return state
