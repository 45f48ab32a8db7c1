"""Upgrade rules: what a restore does when the job's graph changed since its checkpoint.

State is matched by node id (``name=``, else derived from the node's kind
and number in the graph, see :mod:`rivermark.core.graph`).  When the
graph's fingerprint differs from the checkpoint's, every node id gets one
decision, in this order of the rules:

1. ``rename={"old": "new"}``: the old node's state, position or sink handle
   goes to the new id (``renamed``); what the checkpoint holds under the new
   id itself, unless it is renamed too, is removed as in 2.  A rename whose
   old id the checkpoint does not hold is ``refused`` (a misspelt id would
   leave a node's state behind), unless the checkpoint records that very
   rename as done (the manifest's ``renamed``: the same command run again);
2. an id only in the checkpoint is ``dropped`` when ``allow_dropped_state``
   is ``True`` or names it, else ``refused`` with the size of its state; a
   removed source's position or sink's handle (no state) is dropped;
3. an id only in the graph starts empty (``added``) with
   ``allow_new_nodes``, else ``refused``;
4. an id in both whose signature differs is ``migrated`` by
   ``migrate[id](old_state)``, else ``refused`` naming both signatures; an
   unnamed node whose place (the pipeline in front of it, the end of its
   signature) changed is ``refused`` whatever the rules say, since the state
   stored under its derived id may be another node's; a source whose
   signature differs only by its inputs (a topic added to or removed from a
   Kafka subscription, a file glob that matches more or other files: a
   :class:`ChangingInputs`) keeps its position for the inputs it still reads
   (``inputs``): the source says which inputs are new (they start where the
   source starts an input it has no position for) and which it no longer
   reads;

the rest are ``kept``.  A rename, or a ``name=``, says which node is which:
the place is then not compared.  :func:`plan_upgrade` makes the decisions
without touching anything; :func:`renamed_manifest` applies the renames to
what a checkpoint holds.  :func:`plan_restore` first maps the ids of a
checkpoint written before readable ids (``accumulate-534cb309``) to the
graph's (:func:`_stored_legacy`).  See ``docs/upgrading.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.core import graph
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.sinks.base import CheckpointedSink

__all__ = [
    "ChangingInputs",
    "Decision",
    "UpgradePlan",
    "UpgradeRules",
    "job_fingerprint",
    "plan_restore",
    "plan_upgrade",
    "renamed_manifest",
]

#: the decisions, in the order the rules apply
ACTIONS = ("kept", "renamed", "dropped", "added", "migrated", "inputs", "refused")


@runtime_checkable
class ChangingInputs(Protocol):
    """A source whose inputs may change from one version of the app to the next.

    A Kafka source's topics, the files a ``filenames`` glob matches: the
    position a checkpoint holds for the inputs the source still reads stays
    valid when others are added or removed.
    """

    def inputs_change(self, stored: str, position: object) -> str | None:
        """What changed, when the checkpoint's signature ``stored`` differs from this
        source's only by its inputs: one line naming the inputs added (and where they
        start) and those no longer read (their positions are dropped at the
        restore); else ``None``.  ``position`` is the checkpoint's position."""

    def restore_inputs(self, stored: str) -> None:
        """At a restore whose decision for this source is ``inputs``, before ``seek``:
        the checkpoint's signature ``stored``, which tells the inputs the position is
        of from those added since."""


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

    def with_ids(self, in_graph: Mapping[str, str], stored: Mapping[str, str]) -> UpgradeRules:
        """The rules with earlier ids replaced: ``in_graph`` for the graph's, ``stored`` the checkpoint's.

        A rename's new id and a migration name nodes of the graph; a
        rename's old id and a dropped id name what the checkpoint holds.
        A rename that becomes ``x=x`` is left out.

        >>> rules = UpgradeRules.checked(rename={"a-1f": "s"}, migrate={"b-2e": len})
        >>> rules = rules.with_ids({"b-2e": "b-1"}, {"a-1f": "a-1"})
        >>> rules.rename, list(rules.migrate)
        ({'a-1': 's'}, ['b-1'])
        """
        rename = {stored.get(o, o): in_graph.get(n, n) for o, n in self.rename.items()}
        dropped = self.allow_dropped_state
        if not isinstance(dropped, bool):
            dropped = frozenset(stored.get(d, d) for d in dropped)
        return UpgradeRules(
            {o: n for o, n in rename.items() if o != n},
            dropped,
            self.allow_new_nodes,
            {in_graph.get(k, k): fn for k, fn in self.migrate.items()},
        )


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
    #: id in the checkpoint -> id in the graph, for a checkpoint written with the
    #: ids of rivermark before readable ids (applied before ``renames``)
    legacy: dict[str, str] = field(default_factory=dict)
    #: the migration of each id in ``migrated`` (a rule may name it by its legacy id)
    migrations: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)

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
    inputs: Callable[[str, str, str], str | None] = lambda nid, old_id, stored: None,
) -> UpgradePlan:
    """The decisions of restoring ``manifest`` into the graph of ``fingerprint``.

    ``describe(id)`` names a node of the graph (its repr); ``derived(id)``
    says whether its id comes from the graph's shape (no ``name=``);
    ``inputs(id, its id in the checkpoint, its stored signature)`` is a source's
    :meth:`ChangingInputs.inputs_change`.
    """
    new = dict(fingerprint)
    out: list[Decision] = []
    renames = _renames(manifest, new, rules, out)
    by = {n: o for o, n in renames.items()}
    # what the checkpoint holds under a rename's new id gives way to the renamed state
    out += [
        _displaced(manifest, k, by[k], rules) for k in manifest.fingerprint if _gives_way(k, by)
    ]
    was = {renames.get(k, k): k for k in manifest.fingerprint if not _gives_way(k, by)}
    old = {nid: manifest.fingerprint[k] for nid, k in was.items()}
    for nid in sorted(set(old) | set(new)):
        if nid not in new:
            out.append(_removed(manifest, nid, rules))
        elif nid not in old:
            out.append(_added(nid, describe(nid), rules))
        elif was[nid] == nid and derived(nid) and _place(old[nid]) != _place(new[nid]):
            there = [a for a, sig in new.items() if a != nid and sig == old[nid] and derived(a)]
            elsewhere = there[0] if len(there) == 1 else None
            out.append(_moved(nid, describe(nid), old[nid], new[nid], elsewhere))
        elif graph.base_signature(old[nid]) != graph.base_signature(new[nid]):
            was_sig, now_sig = graph.base_signature(old[nid]), graph.base_signature(new[nid])
            change = None if nid in rules.migrate else inputs(nid, was[nid], was_sig)
            if change is not None:
                out.append(Decision("inputs", nid, change))
            else:
                out.append(_changed(nid, describe(nid), was_sig, now_sig, rules))
        elif was[nid] != nid:
            out.append(Decision("renamed", nid, f"state of {was[nid]} goes to {nid}"))
        else:
            out.append(Decision("kept", nid, "restored"))
    migrated = frozenset(d.node for d in out if d.action == "migrated")
    hint = _hint(out, dict(manifest.fingerprint), new, derived)
    migrations = {nid: rules.migrate[nid] for nid in migrated}
    return UpgradePlan(manifest.epoch, out, renames, migrated, hint, migrations=migrations)


def _gives_way(nid: str, by: Mapping[str, str]) -> bool:
    """Whether the checkpoint's ``nid`` is a rename's new id (``by``: new -> old), not renamed itself."""
    return nid in by and by[nid] != nid and nid not in by.values()


def _place(signature: str) -> str:
    """The place an unnamed node's signature ends with (`` after 1f0c22ab``), else ``""``."""
    return signature[len(graph.base_signature(signature)) :]


def job_fingerprint(node: Stream) -> dict[str, str]:
    """Id -> signature of every stateful node, source and checkpointed sink of the graph."""
    ids = graph.node_ids(node)
    out = graph.fingerprint(node)
    # a sink's output (file, topic) is part of the graph's identity: a
    # checkpoint's handle is refused for another output
    sinks = graph.signatures(node, lambda n: isinstance(n, CheckpointedSink))
    for k, sig in sinks.items():
        out.setdefault(ids[k], sig)
    return out


def _stored_legacy(manifest: Manifest, node: Stream, current: Mapping[str, str]) -> dict[str, str]:
    """Id in ``manifest`` -> id in the graph of ``node``, when the checkpoint holds legacy ids.

    rivermark before readable ids derived ``<kind>-<8 hex>`` ids
    (:func:`rivermark.core.graph.legacy_node_ids`); a checkpoint that holds
    such an id of a node of this graph, and none of the ids the graph's
    unnamed nodes have now, was written with them.  Empty for any other.
    ``current`` is :func:`_legacy_to_current` of ``node``.
    """
    ids = graph.node_ids(node)
    derived = {ids[id(n)] for n in graph.topological(node) if n.name is None}
    if derived & set(manifest.fingerprint):
        return {}
    return {old: nid for old, nid in current.items() if old in manifest.fingerprint}


def _legacy_to_current(node: Stream) -> dict[str, str]:
    """Legacy id -> current id of every node of ``node``'s graph whose id changed."""
    ids = graph.node_ids(node)
    legacy = graph.legacy_node_ids(node)
    now = set(ids.values())
    return {old: ids[k] for k, old in legacy.items() if old != ids[k] and old not in now}


def plan_restore(manifest: Manifest, node: Stream, rules: UpgradeRules) -> UpgradePlan:
    """The decisions of restoring ``manifest`` into the graph of ``node`` (nothing is done).

    A checkpoint written with legacy ids is compared under the graph's ids
    (the plan's ``legacy``); rules may name nodes by either.
    """
    ids = graph.node_ids(node)
    by_id = {ids[id(n)]: n for n in graph.topological(node)}
    new = job_fingerprint(node)
    current = _legacy_to_current(node)
    legacy = _stored_legacy(manifest, node, current)
    rules = rules.with_ids(current, legacy)
    if legacy:
        manifest = _in_current_ids(manifest, legacy, new)
    sink_ids = {nid for nid, n in by_id.items() if isinstance(n, CheckpointedSink)}
    if not sink_ids & set(manifest.fingerprint):
        # written before sinks were part of the fingerprint: compare the rest
        new = {k: v for k, v in new.items() if k not in sink_ids}

    def inputs(nid: str, old_id: str, stored: str) -> str | None:
        source = by_id[nid]
        if not isinstance(source, ChangingInputs):
            return None
        return source.inputs_change(stored, manifest.positions.get(old_id))

    plan = plan_upgrade(
        manifest,
        new,
        rules,
        describe=lambda nid: repr(by_id[nid]),
        derived=lambda nid: by_id[nid].name is None,
        inputs=inputs,
    )
    return dataclasses.replace(plan, legacy=legacy)


def _in_current_ids(
    manifest: Manifest, legacy: Mapping[str, str], fingerprint: Mapping[str, str]
) -> Manifest:
    """``manifest`` under the graph's ids; a node's stored signature gets its place here.

    The legacy id already pins the pipeline in front of the node (it is a
    digest of it), so the place the graph gives the node is the stored one.
    """
    renamed, _ = renamed_manifest(manifest, {}, legacy)
    mapped = set(legacy.values())
    placed = {
        k: sig + _place(fingerprint.get(k, "")) if k in mapped else sig
        for k, sig in renamed.fingerprint.items()
    }
    return dataclasses.replace(renamed, fingerprint=placed)


def _renames(
    manifest: Manifest, new: Mapping[str, str], rules: UpgradeRules, out: list[Decision]
) -> dict[str, str]:
    """The renames that apply; a refusal in ``out`` for one whose new id is not in the graph."""
    renames: dict[str, str] = {}
    for old_id, new_id in rules.rename.items():
        if old_id not in manifest.fingerprint:
            if manifest.renamed.get(new_id) != old_id or new_id not in manifest.fingerprint:
                out.append(
                    Decision("refused", old_id, _no_old_id(manifest, old_id, new_id), "rename")
                )
            # else given again after the rename took effect: the checkpoint records it
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


def _no_old_id(manifest: Manifest, old_id: str, new_id: str) -> str:
    """Why the rename ``old_id=new_id`` is refused: the checkpoint holds no ``old_id``."""
    if new_id in manifest.fingerprint:
        why = f"holds no {old_id!r} (and records no rename of {old_id!r} to {new_id!r})"
    else:
        why = f"holds neither {old_id!r} nor {new_id!r}"
    return (
        f"rename {old_id}={new_id}, but checkpoint {manifest.epoch} {why}; its ids are "
        f"{', '.join(sorted(manifest.fingerprint))}: name the old id as the checkpoint holds "
        "it, or leave the rename out"
    )


def _unrestored(
    manifest: Manifest, nid: str, rules: UpgradeRules, why: str, other: str, kind: str, by: str = ""
) -> Decision:
    """State the checkpoint holds under ``nid`` that no node takes: dropped if allowed, else refused.

    A source's position or a sink's handle is no state: it is dropped.  The
    refusal says ``why``, how to drop the state and, ``other``, how else to
    keep it; ``by`` is said of a drop.
    """
    if rules.may_drop(nid) or nid not in manifest.state:
        return Decision("dropped", nid, f"{_size(manifest, nid)} is dropped{by}")
    return Decision(
        "refused",
        nid,
        f"{why} (was {manifest.fingerprint[nid]}); to drop it, run with --allow-dropped-state "
        f"{nid} (Job(allow_dropped_state=[{nid!r}])); {other}",
        kind,
    )


def _removed(manifest: Manifest, nid: str, rules: UpgradeRules) -> Decision:
    return _unrestored(
        manifest,
        nid,
        rules,
        f"removed from the graph, with {_size(manifest, nid)}",
        f"if it was renamed, --rename {nid}=NEW-ID (Job(rename={{{nid!r}: 'NEW-ID'}}))",
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


def _displaced(manifest: Manifest, nid: str, by: str, rules: UpgradeRules) -> Decision:
    """What the checkpoint holds under ``nid`` when the rename ``by=nid`` gives ``nid`` other state."""
    return _unrestored(
        manifest,
        nid,
        rules,
        f"the rename {by}={nid} gives {nid} the state of {by}, but the checkpoint holds "
        f"{_size(manifest, nid)} under {nid} itself",
        f"to keep it, rename it too: --rename {nid}=NEW-ID",
        "displaced",
        by=f" (rename {by}={nid})",
    )


def _moved(nid: str, what: str, was: str, now: str, elsewhere: str | None) -> Decision:
    """The refusal of an unnamed node whose place changed: its stored state may be another's.

    ``elsewhere`` is the one other unnamed node of the graph whose signature,
    place included, is the stored one.
    """
    then = _place(was).removeprefix(" after ") or "none, it had a name="
    here = _place(now).removeprefix(" after ")
    head = (
        f"the pipeline in front of node {nid} ({what}) changed since the checkpoint (its "
        f"place was {then}, now {here}): its id is derived from its kind and its number in "
        f"the graph, so the state stored under {nid} may be another node's"
    )
    if elsewhere is not None:
        return Decision(
            "refused",
            nid,
            f"{head}. It matches {elsewhere} here (the same configuration and place): a node "
            f"of its kind was added or removed before it, which renumbered it; to restore "
            f"its state there, run with --rename {nid}={elsewhere} "
            f"(Job(rename={{{nid!r}: {elsewhere!r}}}))",
            "moved",
        )
    also = ""
    if graph.base_signature(was) != graph.base_signature(now):
        also = (
            f"; its configuration changed too (was {graph.base_signature(was)}, now "
            f"{graph.base_signature(now)}): then also pass Job(migrate={{{nid!r}: ...}}) "
            f"(rivermark run --migrate {nid}=FUNCTION)"
        )
    return Decision(
        "refused",
        nid,
        f"{head}. If it is the same node, pass name={nid!r} to it: its state is then "
        f"restored, and its id no longer depends on the graph around it{also}; else "
        "restore the code that wrote the checkpoint",
        "moved",
    )


def _changed(nid: str, what: str, was: str, now: str, rules: UpgradeRules) -> Decision:
    if nid in rules.migrate:
        return Decision("migrated", nid, f"state migrated from {was} to {now}")
    return Decision(
        "refused",
        nid,
        f"{what} changed shape (was {was}, now {now}); pass "
        f"Job(migrate={{{nid!r}: function(old_state) -> new_state}}) (rivermark run "
        f"--migrate {nid}=FUNCTION, a function of the app), or restore the code that wrote "
        "the checkpoint",
        "changed",
    )


def _hint(
    decisions: list[Decision],
    stored: Mapping[str, str],
    new: Mapping[str, str],
    derived: Callable[[str], bool],
) -> str:
    refused = [d for d in decisions if d.action == "refused"]
    removed = sorted(d.node for d in refused if d.change == "removed")
    # derived ids without state of their own here: new, or holding another node's place
    takers = sorted(
        d.node
        for d in decisions
        if (d.action == "added" or d.change in ("added", "moved")) and derived(d.node)
    )
    # a node without name= whose derived id moved (renumbered, or the pipeline in
    # front of it changed) shows up as removed + added with the same configuration
    pairs = [
        (r, a)
        for r in removed
        for a in takers
        if graph.base_signature(stored[r]) == graph.base_signature(new[a])
    ]
    lines = [_pair_line(r, a, stored[r], new[a]) for r, a in pairs]
    paired = {r for r, _ in pairs}
    lines += [
        f"  {r} was an unnamed node: unnamed nodes of a kind are numbered in the graph's "
        "order, so adding or removing one renumbers those after it; see which node's state "
        f"{r} holds ('rivermark checkpoints show DIR --state {r}') before dropping it"
        for r in removed
        if r not in paired and _place(stored[r])
    ]
    tail = (
        "or start over: run with --from-scratch (Job(..., from_scratch=True)): it sets the "
        "checkpoints aside and starts the sinks' output over; see docs/upgrading.md"
    )
    if pairs or any(d.change in ("added", "moved") and derived(d.node) for d in refused):
        tail = (
            "give stateful nodes and sources explicit names (e.g. "
            ".accumulate(f, name='totals')) so that their state survives changes of the "
            "graph around them; " + tail
        )
    return "\n".join([*lines, "apply one of the remedies above, " + tail])


def _pair_line(old: str, new: str, was: str, now: str) -> str:
    """The hint for a checkpoint's ``old`` that looks like the graph's ``new``."""
    where = (
        "in the same place: unnamed nodes are numbered in the graph's order, and the "
        "numbering changed"
        if was == now
        else "its id is derived from its kind and its place in the graph, which changed"
    )
    return (
        f"  {old} and {new} look like the same node ({graph.base_signature(now)}), {where}; "
        f"to restore its state from this checkpoint, run with --rename {old}={new} "
        f"(Job(rename={{{old!r}: {new!r}}}))"
    )


def renamed_manifest(
    manifest: Manifest, blobs: dict[str, list[bytes]], renames: Mapping[str, str]
) -> tuple[Manifest, dict[str, list[bytes]]]:
    """``manifest`` and its state ``blobs`` with the old ids of ``renames`` replaced."""
    if not renames:
        return manifest, blobs
    by = {n: o for o, n in renames.items()}

    def ren(d: Mapping[str, Any]) -> dict[str, Any]:
        # what a rename's new id held itself gives way (see plan_upgrade)
        return {renames.get(k, k): v for k, v in d.items() if not _gives_way(k, by)}

    m = dataclasses.replace(
        manifest,
        fingerprint=ren(manifest.fingerprint),
        positions=ren(manifest.positions),
        sinks=ren(manifest.sinks),
        state=ren(manifest.state),
        chains=ren(manifest.chains),
        files=ren(manifest.files),
        counts=None if manifest.counts is None else ren(manifest.counts),
    )
    return m, ren(blobs)
