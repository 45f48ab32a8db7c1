"""Upgrade rules: what a restore does when the job's graph changed since its checkpoint.

State is matched by node id (``name=``, else derived from the graph's
shape).  When the graph's fingerprint differs from the checkpoint's, every
node id gets one decision, in this order of the rules:

1. ``rename={"old": "new"}``: the old node's state, position or sink handle
   goes to the new id (``renamed``);
2. an id only in the checkpoint is ``dropped`` when ``allow_dropped_state``
   is ``True`` or names it, else ``refused`` with the size of its state; a
   removed source's position or sink's handle (no state) is dropped;
3. an id only in the graph starts empty (``added``) with
   ``allow_new_nodes``, else ``refused``;
4. an id in both whose signature differs is ``migrated`` by
   ``migrate[id](old_state)``, else ``refused`` naming both signatures;

the rest are ``kept``.  :func:`plan_upgrade` makes the decisions without
touching anything; :func:`renamed_manifest` applies the renames to what a
checkpoint holds.  See ``docs/upgrading.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import graph
from ..core.node import Stream
from ..errors import ConfigurationError
from ..sinks.base import CheckpointedSink
from .manifest import Manifest

__all__ = [
    "Decision",
    "UpgradePlan",
    "UpgradeRules",
    "job_fingerprint",
    "plan_restore",
    "plan_upgrade",
    "renamed_manifest",
]

#: the decisions, in the order the rules apply
ACTIONS = ("kept", "renamed", "dropped", "added", "migrated", "refused")


@dataclass(frozen=True)
class UpgradeRules:
    """The rules a job restores a changed graph with (its ``rename=`` ... arguments)."""

    rename: Mapping[str, str] = field(default_factory=dict)
    #: ``True``: any removed node's state may be dropped; else the ids that may
    allow_dropped_state: bool | frozenset[str] = False
    allow_new_nodes: bool = False
    migrate: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)

    @classmethod
    def checked(
        cls,
        rename: Mapping[str, str] | None = None,
        allow_dropped_state: bool | Iterable[str] = False,
        allow_new_nodes: bool = False,
        migrate: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> UpgradeRules:
        """The rules from a job's arguments; ``ConfigurationError`` naming a bad one.

        >>> UpgradeRules.checked(rename={"a": "b"}, allow_dropped_state=["x"]).allow_dropped_state
        frozenset({'x'})
        >>> UpgradeRules.checked(rename={"a": "c", "b": "c"})
        Traceback (most recent call last):
        ...
        rivermark.errors.ConfigurationError: Job(rename=...): 'a' and 'b' are both renamed to 'c'; a node's state can come from one old node only
        """
        ren = dict(rename or {})
        targets: dict[str, str] = {}
        for old, new in ren.items():
            if not isinstance(old, str) or not isinstance(new, str) or not old or not new:
                raise ConfigurationError(
                    f"Job(rename=...): {old!r}: {new!r} is not a pair of node ids; "
                    "pass rename={'old-id': 'new-id'}"
                )
            if new in targets:
                raise ConfigurationError(
                    f"Job(rename=...): {targets[new]!r} and {old!r} are both renamed to {new!r}; "
                    "a node's state can come from one old node only"
                )
            targets[new] = old
        dropped: bool | frozenset[str]
        if isinstance(allow_dropped_state, bool):
            dropped = allow_dropped_state
        elif isinstance(allow_dropped_state, str):
            dropped = frozenset([allow_dropped_state])
        else:
            dropped = frozenset(allow_dropped_state)
            bad = [d for d in dropped if not isinstance(d, str)]
            if bad:
                raise ConfigurationError(
                    f"Job(allow_dropped_state=...): {bad[0]!r} is not a node id; pass True "
                    "or a list of the ids of removed nodes"
                )
        mig = dict(migrate or {})
        for nid, fn in mig.items():
            if not callable(fn):
                raise ConfigurationError(
                    f"Job(migrate=...): the migration of {nid!r} is {fn!r}, not a function; "
                    "pass migrate={'node-id': function(old_state) -> new_state}"
                )
        return cls(ren, dropped, bool(allow_new_nodes), mig)

    def may_drop(self, nid: str) -> bool:
        d = self.allow_dropped_state
        return d if isinstance(d, bool) else nid in d


@dataclass(frozen=True)
class Decision:
    """What a restore does with one node id."""

    action: str
    #: the id in the graph (the checkpoint's id for ``dropped`` and removed nodes)
    node: str
    detail: str
    #: for a refusal: what changed (``removed``, ``added``, ``changed``, ``rename``)
    change: str = ""

    def line(self) -> str:
        return f"{self.change or self.action}: {self.node}: {self.detail}"

    def as_dict(self) -> dict[str, str]:
        return {"action": self.action, "node": self.node, "detail": self.detail}


@dataclass(frozen=True)
class UpgradePlan:
    """Every decision of a restore of checkpoint ``epoch`` into a graph."""

    epoch: int
    decisions: list[Decision]
    #: old id -> new id, for the renames that apply
    renames: dict[str, str]
    #: ids in the graph whose state goes through ``migrate``
    migrated: frozenset[str]
    #: what to do when refused
    hint: str = ""

    @property
    def changes(self) -> bool:
        """Whether anything is not simply kept."""
        return any(d.action != "kept" for d in self.decisions)

    @property
    def refused(self) -> list[Decision]:
        return [d for d in self.decisions if d.action == "refused"]

    def message(self, where: str) -> str:
        """The refusal: which nodes, why, and the remedies."""
        lines = [f"the graph differs from the one that wrote checkpoint {self.epoch} in {where}:"]
        lines += [f"  {d.line()}" for d in self.refused]
        return "\n".join([*lines, self.hint])


def _size(manifest: Manifest, nid: str) -> str:
    entry = manifest.state.get(nid)
    if entry is not None:
        return f"{int(entry['size']):,} bytes of state in the checkpoint"
    if nid in manifest.positions:
        return "a source's position (no state) in the checkpoint"
    if nid in manifest.sinks:
        return "a sink's handle (no state) in the checkpoint"
    return "no state in the checkpoint"


def plan_upgrade(
    manifest: Manifest,
    fingerprint: Mapping[str, str],
    rules: UpgradeRules,
    describe: Callable[[str], str],
    derived: Callable[[str], bool],
) -> UpgradePlan:
    """The decisions of restoring ``manifest`` into the graph of ``fingerprint``.

    ``describe(id)`` names a node of the graph (its repr); ``derived(id)``
    says whether its id comes from the graph's shape (no ``name=``).
    """
    new = dict(fingerprint)
    out: list[Decision] = []
    renames = _renames(manifest, new, rules, out)
    old = {renames.get(k, k): v for k, v in manifest.fingerprint.items()}
    was = {renames.get(k, k): k for k in manifest.fingerprint}
    for nid in sorted(set(old) | set(new)):
        if nid not in new:
            out.append(_removed(manifest, nid, rules))
        elif nid not in old:
            out.append(_added(nid, describe(nid), rules))
        elif old[nid] != new[nid]:
            out.append(_changed(nid, describe(nid), old[nid], new[nid], rules))
        elif was[nid] != nid:
            out.append(Decision("renamed", nid, f"state of {was[nid]} goes to {nid}"))
        else:
            out.append(Decision("kept", nid, "restored"))
    migrated = frozenset(d.node for d in out if d.action == "migrated")
    return UpgradePlan(manifest.epoch, out, renames, migrated, _hint(out, old, new, derived))


def job_fingerprint(node: Stream) -> dict[str, str]:
    """Id -> signature of every stateful node, source and checkpointed sink of the graph."""
    ids = graph.node_ids(node)
    out = graph.fingerprint(node)
    for n in graph.topological(node):
        if isinstance(n, CheckpointedSink):
            # a sink's output (file, topic) is part of the graph's identity: a
            # checkpoint's handle is refused for another output
            out.setdefault(ids[id(n)], n.state_signature())
    return out


def plan_restore(manifest: Manifest, node: Stream, rules: UpgradeRules) -> UpgradePlan:
    """The decisions of restoring ``manifest`` into the graph of ``node`` (nothing is done)."""
    ids = graph.node_ids(node)
    by_id = {ids[id(n)]: n for n in graph.topological(node)}
    new = job_fingerprint(node)
    sink_ids = {nid for nid, n in by_id.items() if isinstance(n, CheckpointedSink)}
    if not sink_ids & set(manifest.fingerprint):
        # written before sinks were part of the fingerprint: compare the rest
        new = {k: v for k, v in new.items() if k not in sink_ids}
    return plan_upgrade(
        manifest,
        new,
        rules,
        describe=lambda nid: repr(by_id[nid]),
        derived=lambda nid: by_id[nid].name is None,
    )


def _renames(
    manifest: Manifest, new: Mapping[str, str], rules: UpgradeRules, out: list[Decision]
) -> dict[str, str]:
    """The renames that apply; a refusal in ``out`` for one whose new id is not in the graph."""
    renames: dict[str, str] = {}
    for old_id, new_id in rules.rename.items():
        if old_id not in manifest.fingerprint:
            if new_id not in manifest.fingerprint:
                detail = (
                    f"rename {old_id}={new_id}, but checkpoint {manifest.epoch} holds neither "
                    f"{old_id!r} nor {new_id!r}; its ids are "
                    f"{', '.join(sorted(manifest.fingerprint))}"
                )
                out.append(Decision("refused", old_id, detail, "rename"))
            # else given again after the rename took effect: the checkpoint holds the new id
            continue
        if new_id not in new:
            detail = (
                f"rename {old_id}={new_id}, but the graph has no node {new_id!r}; "
                f"its stateful nodes, sources and sinks are {', '.join(sorted(new))}"
            )
            out.append(Decision("refused", old_id, detail, "rename"))
            continue
        renames[old_id] = new_id
    return renames


def _removed(manifest: Manifest, nid: str, rules: UpgradeRules) -> Decision:
    # a removed source's position or sink's handle is no state: it goes
    if rules.may_drop(nid) or nid not in manifest.state:
        return Decision("dropped", nid, f"{_size(manifest, nid)} is dropped")
    return Decision(
        "refused",
        nid,
        f"removed from the graph, with {_size(manifest, nid)} "
        f"(was {manifest.fingerprint[nid]}); to drop it, run with --allow-dropped-state {nid} "
        f"(Job(allow_dropped_state=[{nid!r}])); if it was renamed, "
        f"--rename {nid}=NEW-ID (Job(rename={{{nid!r}: 'NEW-ID'}}))",
        "removed",
    )


def _added(nid: str, what: str, rules: UpgradeRules) -> Decision:
    if rules.allow_new_nodes:
        return Decision("added", nid, f"{what} starts empty")
    return Decision(
        "refused",
        nid,
        f"{what} is new; to start it empty, run with --allow-new-nodes (Job(allow_new_nodes=True))",
        "added",
    )


def _changed(nid: str, what: str, was: str, now: str, rules: UpgradeRules) -> Decision:
    if nid in rules.migrate:
        return Decision("migrated", nid, f"state migrated from {was} to {now}")
    return Decision(
        "refused",
        nid,
        f"{what} changed shape (was {was}, now {now}); pass "
        f"Job(migrate={{{nid!r}: function(old_state) -> new_state}}), or restore the code "
        "that wrote the checkpoint",
        "changed",
    )


def _hint(
    decisions: list[Decision],
    old: Mapping[str, str],
    new: Mapping[str, str],
    derived: Callable[[str], bool],
) -> str:
    refused = [d for d in decisions if d.action == "refused"]
    removed = sorted(d.node for d in refused if d.change == "removed")
    added = sorted(d.node for d in refused if d.change == "added")
    # a node without name= whose derived id moved (e.g. a map inserted above
    # it) shows up as removed + added with the same configuration
    moved = [(r, a) for r in removed for a in added if old[r] == new[a] and derived(a)]
    lines = [
        f"  {r} and {a} look like the same node ({new[a]}): its id is derived from the "
        f"graph's shape, which changed; to restore its state from this checkpoint, pass "
        f"name={r!r} to it, or run with --rename {r}={a}"
        for r, a in moved
    ]
    tail = (
        "or start over: run with --from-scratch (Job(..., from_scratch=True)): it sets the "
        "checkpoints aside and starts the sinks' output over; see docs/upgrading.md"
    )
    if moved or any(derived(a) for a in added):
        tail = (
            "give stateful nodes and sources explicit names (e.g. "
            ".accumulate(f, name='totals')) so that their state survives changes of the "
            "graph around them; " + tail
        )
    return "\n".join([*lines, "apply one of the remedies above, " + tail])


def renamed_manifest(
    manifest: Manifest, blobs: dict[str, list[bytes]], renames: Mapping[str, str]
) -> tuple[Manifest, dict[str, list[bytes]]]:
    """``manifest`` and its state ``blobs`` with the old ids of ``renames`` replaced."""
    if not renames:
        return manifest, blobs

    def ren(d: Mapping[str, Any]) -> dict[str, Any]:
        return {renames.get(k, k): v for k, v in d.items()}

    m = dataclasses.replace(
        manifest,
        fingerprint=ren(manifest.fingerprint),
        positions=ren(manifest.positions),
        sinks=ren(manifest.sinks),
        state=ren(manifest.state),
        chains=ren(manifest.chains),
        counts=None if manifest.counts is None else ren(manifest.counts),
    )
    return m, ren(blobs)
