"""Recovery at start: what a :class:`~rivermark.checkpoint.protocol.job.Job` restores before its sources run.

The newest checkpoint that verifies is loaded (damaged ones are skipped with
a WARNING) and checked against the graph (its fingerprint); then
``set_state`` on stateful nodes, ``restore(handle)`` on checkpointed sinks
(``None`` without a checkpoint), ``seek(position)`` on sources.  A store
whose checkpoints all fail verification is refused
(:class:`NoValidCheckpointError`), and so is sink output that no checkpoint
accounts for (:class:`UnaccountedOutputError`); ``from_scratch=True`` sets
the checkpoints aside and starts every checkpointed sink over.

``from_savepoint="DIR"`` (its newest savepoint) or ``"DIR@EPOCH"`` restores
a savepoint instead (:meth:`Recovery._restore_savepoint`): verified
like any checkpoint; in the job's own location the newer checkpoints are set
aside; an empty location gets a verified copy of it as its first checkpoint;
any other location is refused.

A job holds one :class:`Recovery`, made from what it needs (the store, the
graph's roles, the upgrade rules, the delta chains, the start options), and
calls :meth:`Recovery.recover` at every run; the :class:`Restored` it returns
says what the job resumes from.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rivermark.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    NoValidCheckpointError,
    UnaccountedOutputError,
)
from rivermark.checkpoint.protocol.roles import JobGraph
from rivermark.checkpoint.protocol.upgrade import (
    ChangingInputs,
    UpgradePlan,
    UpgradeRules,
    plan_restore,
    renamed_manifest,
)
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.keyed import Chains
from rivermark.checkpoint.state.rocks.backend import StateBackend, copy_shared
from rivermark.checkpoint.stores.manifest import DATA_FORMAT, Manifest
from rivermark.checkpoint.stores.store import LocalDirectoryStore, Store, open_store
from rivermark.core import graph
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.sinks.base import CheckpointedSink, StartOverSink
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["Recovery", "Restored", "parse_savepoint_spec"]


def parse_savepoint_spec(spec: str | os.PathLike[str]) -> tuple[str, int | None]:
    """The location and epoch (``None``: its newest savepoint) named by ``spec``.

    ``DIR`` or ``URL`` names the newest savepoint there, ``DIR@EPOCH`` one
    epoch; a savepoint's own directory (``DIR/checkpoints/000000000042``)
    names that one.

    >>> parse_savepoint_spec("ckpt/job1@42"), parse_savepoint_spec("s3://b/p")
    (('ckpt/job1', 42), ('s3://b/p', None))
    >>> parse_savepoint_spec("ckpt/job1/checkpoints/000000000007")
    ('ckpt/job1', 7)
    """
    text = os.fspath(spec)
    where, at, epoch = text.rpartition("@")
    if at and epoch.isdigit() and where:
        return where, int(epoch)
    if at and where and "/" not in epoch:
        raise ConfigurationError(
            f"from_savepoint {text!r}: the part after '@' must be an epoch number "
            "(DIR@42), or leave it out for the newest savepoint in DIR"
        )
    path = Path(text)
    if "://" not in text and path.name.isdigit() and path.parent.name == "checkpoints":
        return str(path.parent.parent), int(path.name)
    return text, None


def _place(store: Store) -> str:
    """What makes two stores the same location (a URL, or a resolved directory)."""
    if isinstance(store, LocalDirectoryStore):
        return str(store.path.resolve())
    return store.location() or repr(store)


@dataclass(frozen=True)
class Restored:
    """What a job resumes from: the outcome of :meth:`Recovery.recover`."""

    #: the newest epoch the store has used (complete or not): the next checkpoint's is one more
    epoch: int
    #: the checkpoint restored (``None``: a fresh start, or a start over)
    manifest: Manifest | None = None


class Recovery:
    """The recovery at start of a :class:`~rivermark.checkpoint.protocol.job.Job` (see module docs).

    ``keyed`` is the job's delta chains: a restore continues them, so that
    the job's next checkpoint writes only what changed since.
    """

    def __init__(
        self,
        store: Store,
        roles: JobGraph,
        upgrade: UpgradeRules,
        keyed: Chains,
        state_backend: StateBackend,
        from_scratch: bool = False,
        from_savepoint: str | None = None,
    ) -> None:
        self.store = store
        self.roles = roles
        self.upgrade = upgrade
        self.keyed = keyed
        #: where the stateful nodes' keyed state lives (memory, or RocksDB)
        self.state_backend = state_backend
        self.from_scratch = from_scratch
        self.from_savepoint = from_savepoint
        #: the newest epoch the store has used (see :class:`Restored`)
        self._epoch = 0
        #: the checkpoint restored by the current recovery
        self._manifest: Manifest | None = None
        #: ids whose state came from another id (their delta chains start anew)
        self._renamed: set[str] = set()
        #: id -> the migration its stored state goes through before ``set_state``
        self._migrating: dict[str, Callable[[Any], Any]] = {}

    def recover(self) -> Restored:
        """Restore the newest checkpoint that verifies (or start fresh, or over)."""
        self._epoch, self._manifest = 0, None
        self._renamed, self._migrating = set(), {}
        self._recover_newest()
        return Restored(self._epoch, self._manifest)

    def id_of(self, node: Stream | CheckpointedSink) -> str:
        return self.roles.id_of(node)

    def _recover_newest(self) -> None:
        epochs = self.store.list_epochs()
        incomplete = self.store.list_incomplete()
        taken = [*epochs, *(int(p.name) for p in incomplete if p.name.isdigit())]
        self._epoch = max(taken, default=0)
        # a job that lost its key neither resumes a signed store nor writes to it
        self.store.refuse_signed_without_key(epochs)
        if self.from_scratch:
            self._start_over(epochs)
            return
        if self.from_savepoint is not None and self._restore_savepoint(self.from_savepoint, epochs):
            return
        damaged: dict[int, str] = {}
        loaded: tuple[Manifest, dict[str, list[bytes]]] | None = None
        for e in reversed(epochs):
            try:
                loaded = self.store.load_chains(e)
                break
            except CheckpointCorruptError as err:
                damaged[e] = str(err)
        if loaded is None:
            if damaged:
                raise NoValidCheckpointError(self._no_valid_message(damaged), damaged)
            self._refuse_unaccounted_output()
            for k in self.roles.sinks:
                k.restore(None)
            return
        manifest, blobs = loaded
        self.store.refuse_signed(manifest, self.store.describe(manifest.epoch))
        for e, why in damaged.items():
            logger.warning("skipping damaged checkpoint %d: %s", e, why)
        self._restore_upgraded(manifest, blobs, self._check_fingerprint(manifest))

    def _restore_upgraded(
        self, manifest: Manifest, blobs: dict[str, list[bytes]], plan: UpgradePlan | None
    ) -> None:
        """Restore ``manifest`` with the renames and migrations of ``plan`` (None: unchanged).

        The ids of a checkpoint written before readable ids (``plan.legacy``)
        are replaced first; like renamed nodes, their delta chains start anew.
        """
        if plan is not None:
            manifest, blobs = renamed_manifest(manifest, blobs, plan.legacy)
            done = {new: old for old, new in plan.renames.items()}
            manifest, blobs = renamed_manifest(manifest, blobs, plan.renames)
            # the job's checkpoints record the renames (the same command again is no mistake)
            manifest = dataclasses.replace(manifest, renamed={**manifest.renamed, **done})
            self._renamed = set(plan.legacy.values()) | set(plan.renames.values())
            self._migrating = dict(plan.migrations)
            changed = {d.node for d in plan.decisions if d.action == "inputs"}
            for s in self.roles.sources:
                sid = self.id_of(s)
                if sid in changed and isinstance(s, ChangingInputs):
                    # before seek: which inputs the position is of, which are new
                    s.restore_inputs(graph.base_signature(manifest.fingerprint[sid]))
        self._restore_from(manifest, blobs)

    def _restore_savepoint(self, spec: str, epochs: list[int]) -> bool:
        """Restore the savepoint ``spec`` names (see :func:`parse_savepoint_spec`); True if done.

        False when this location already starts with a copy of that savepoint
        (an earlier run of the same command made it): the job then resumes
        from its newest checkpoint, as any restart does.

        In the job's own location the checkpoints newer than the savepoint
        are set aside; an empty location gets a copy of the savepoint (its
        state files and manifest, through the store) as its first checkpoint,
        which is verified before it is restored; a different location that
        holds checkpoints is refused.
        """
        where, wanted = parse_savepoint_spec(spec)
        what = f"from_savepoint {spec!r}"
        source = open_store(where, create=False)
        same = _place(source) == _place(self.store)
        if same:
            source = self.store
        else:
            source.trust = self.store.trust
        saved = source.list_epochs()
        if wanted is None:
            points = source.savepoints(saved)
            if not points:
                raise ConfigurationError(
                    f"{what}: {source!r} holds no savepoint; take one with Job.savepoint() "
                    "or 'rivermark run --savepoint-on-stop', or name a checkpoint as DIR@EPOCH"
                )
            wanted = points[-1]
        elif wanted not in saved:
            raise ConfigurationError(
                f"{what}: {source!r} holds no checkpoint {wanted} (it holds "
                f"{', '.join(map(str, saved)) or 'none'}); see 'rivermark checkpoints list'"
            )
        manifest, blobs = source.load_chains(wanted)  # verified, signature included
        source.refuse_signed(manifest, f"{what}: {source.describe(wanted)}")
        if not manifest.savepoint:
            raise ConfigurationError(
                f"{what}: checkpoint {wanted} in {source!r} is not a savepoint (it may need "
                "other checkpoints); name a savepoint (see 'rivermark checkpoints list')"
            )
        plan = self._check_fingerprint(manifest)
        if same:
            newer = [e for e in epochs if e > wanted]
            if newer:
                aside = self.store.set_aside(newer)
                logger.info(
                    "starting from savepoint %d: newer checkpoints %s of %r set aside in %s",
                    wanted,
                    ", ".join(map(str, newer)),
                    self.store,
                    aside,
                )
        else:
            if self._copied_here(wanted, manifest, epochs):
                # the same command run again (a restart): go on from the newest checkpoint
                logger.info(
                    "savepoint %d of %r was copied to %r by an earlier run; resuming from the "
                    "newest checkpoint there",
                    wanted,
                    source,
                    self.store,
                )
                return False
            if epochs or self.store.list_incomplete():
                raise ConfigurationError(
                    f"{what}: the checkpoint location {self.store!r} already holds checkpoints; "
                    "start from a savepoint into an empty location, or into the savepoint's own "
                    "location (newer checkpoints there are set aside)"
                )
            copy = Manifest(
                epoch=manifest.epoch,
                time=manifest.time,
                fingerprint=dict(manifest.fingerprint),
                positions=dict(manifest.positions),
                sinks=dict(manifest.sinks),
                chains={nid: dict(link) for nid, link in manifest.chains.items()},
                savepoint=True,
                run=manifest.run,
                timing=manifest.timing,
                counts=manifest.counts,
                files=manifest.files,
                renamed=manifest.renamed,
            )
            copy_shared(source, self.store, manifest)
            self.store.write_checkpoint(copy, {nid: b[-1] for nid, b in blobs.items()})
            manifest, blobs = self.store.load_chains(wanted)
            logger.info(
                "savepoint %d of %r copied as the first checkpoint of %r",
                wanted,
                source,
                self.store,
            )
            self._epoch = max(self._epoch, wanted)
        self._restore_upgraded(manifest, blobs, plan)
        return True

    def _copied_here(self, wanted: int, manifest: Manifest, epochs: list[int]) -> bool:
        """Whether this location starts with a copy of savepoint ``manifest`` (epoch ``wanted``).

        A copy is the oldest checkpoint, of the same epoch, marked a savepoint,
        with the same positions and state files (by digest).
        """
        if not epochs or epochs[0] != wanted:
            return False
        try:
            mine = self.store.load_manifest(wanted)
        except CheckpointCorruptError:
            return False
        digests = {n: e["sha256"] for n, e in mine.state.items()}
        return (
            mine.savepoint
            and mine.positions == manifest.positions
            and digests == {n: e["sha256"] for n, e in manifest.state.items()}
        )

    def _restore_from(self, manifest: Manifest, blobs: dict[str, list[bytes]]) -> None:
        """Hand the nodes, sinks and sources what checkpoint ``manifest`` holds for them."""
        allow = self.store.trust.allow_pickle(manifest.signature_status)
        if allow and manifest.format < DATA_FORMAT and manifest.signature_status != "ok":
            logger.warning(
                "checkpoint %d was written by an older rivermark (its state is pickled) and is "
                "not signed: loaded because the store is trusted (trust_store); the next "
                "checkpoints are written as data",
                manifest.epoch,
            )
        for n in self.roles.stateful:
            nid = self.id_of(n)
            if nid in blobs:
                self._restore_node(n, nid, manifest, blobs[nid], allow)
        for k in self.roles.sinks:
            k.restore(manifest.sinks.get(self.id_of(k)))
        for s in self.roles.sources:
            sid = self.id_of(s)
            if sid in manifest.positions:
                s.seek(manifest.positions[sid])
        self._manifest = manifest
        logger.info(
            "restored checkpoint %d from %r",
            manifest.epoch,
            self.store,
            extra={"epoch": manifest.epoch, "position": manifest.positions},
        )

    def _restore_node(
        self, n: Stream, nid: str, manifest: Manifest, blobs: list[bytes], allow: bool
    ) -> None:
        """``set_state`` of node ``n`` from its state files; one line if they do not fit it."""
        where = f"checkpoint {manifest.epoch} in {self.store!r}"
        try:
            state = self._decoded_state(n, nid, manifest, blobs, allow, where)
        except (ImportError, AttributeError) as e:  # unpickling: a class this code lacks
            raise CheckpointMismatchError(
                f"{where}: the state of node {nid} {n!r} holds objects of a class this code "
                f"does not have ({type(e).__name__}: {e}); run the code that wrote the "
                "checkpoint, or start the node empty under a new name= "
                "(Job(..., allow_new_nodes=True)), or start over with --from-scratch"
            ) from e
        if nid in self._migrating:
            state = self._migrated(n, nid, state, where)
        try:
            n.set_state(state)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise CheckpointMismatchError(
                f"{where}: the state stored for node {nid} {n!r} does not fit it "
                f"({type(e).__name__}: {e}); the node's code or options changed since the "
                "checkpoint was written: restore the code that wrote it, turn the old state into "
                f"the new with Job(migrate={{{nid!r}: ...}}) (docs/upgrading.md), give the "
                "changed node a new name= (Job(..., allow_new_nodes=True)) so that it starts "
                "empty, or start "
                "over with --from-scratch"
            ) from e

    def _decoded_state(
        self, n: Stream, nid: str, manifest: Manifest, blobs: list[bytes], allow: bool, where: str
    ) -> Any:
        """The state of node ``n`` that its state files hold (decoded, not yet set)."""
        untrusted = (
            f"{where}: the state of node {nid} {n!r} holds pickled objects (written by an "
            "older rivermark, or objects of the app's own classes) and unpickling runs code, "
            f"but the checkpoint is {manifest.signature_status}; set a checkpoint key "
            "(RIVERMARK_CHECKPOINT_KEY, see docs/security.md) so that checkpoints are signed, "
            "or, if you trust whoever can write the store, run with --trust-store "
            "(Job(trust_store=True))"
        )
        if nid in manifest.files:  # RocksDB state: its files, local or fetched, verified
            state = self.state_backend.restored(n, nid, manifest, blobs[-1], allow, untrusted)
        elif nid in manifest.chains:
            link = manifest.chains[nid]
            try:
                state = self.keyed.restored(
                    nid,
                    manifest.epoch,
                    link,
                    blobs,
                    allow_pickle=allow,
                    what=untrusted,
                    goes_on=nid not in self._renamed,
                )
            except ValueError as e:
                raise CheckpointCorruptError(codec.undecodable(where, nid, e)) from e
        else:
            try:
                state = codec.loads(blobs[-1], allow_pickle=allow, what=untrusted)
            except ValueError as e:
                raise CheckpointCorruptError(codec.undecodable(where, nid, e)) from e
        return state

    def _migrated(self, n: Stream, nid: str, state: Any, where: str) -> Any:
        fn = self._migrating[nid]
        try:
            return fn(state)
        except Exception as e:
            raise CheckpointMismatchError(
                f"{where}: the migration {fn!r} of node {nid} {n!r} failed on the stored "
                f"state ({type(e).__name__}: {e}); fix it (Job(migrate={{{nid!r}: ...}}))"
            ) from e

    def _no_valid_message(self, damaged: dict[int, str]) -> str:
        lines = [
            f"no checkpoint in {self.store!r} verifies; the job refuses to start, since "
            "starting from the sources' beginning would write their output again:",
            *(f"  {why}" for why in damaged.values()),
            "restore a good copy of the checkpoint store (see 'rivermark checkpoints verify'), "
            "or start over explicitly with 'rivermark run --from-scratch' "
            "(Job(..., from_scratch=True)): it sets these checkpoints aside and starts every "
            "checkpointed sink over",
        ]
        return "\n".join(lines)

    def _refuse_unaccounted_output(self) -> None:
        found = [
            line
            for k in self.roles.sinks
            if isinstance(k, StartOverSink) and (line := k.unaccounted_output()) is not None
        ]
        if found:
            raise UnaccountedOutputError(
                f"{self.store!r} holds no checkpoint, but output that no checkpoint accounts for "
                f"exists ({'; '.join(found)}); running would append to it. Start over explicitly "
                "with 'rivermark run --from-scratch' (Job(..., from_scratch=True)), which empties "
                "it, or move it away, or point the job at the checkpoint store that wrote it"
            )

    def _start_over(self, epochs: list[int]) -> None:
        cannot = [k for k in self.roles.sinks if not isinstance(k, StartOverSink)]
        if cannot:
            raise ConfigurationError(
                "Job(from_scratch=True): "
                + ", ".join(f"{self.id_of(k)} {k!r}" for k in cannot)
                + " cannot start its output over (it implements no start_over()); "
                "reset its output by hand and use a new checkpoint store instead"
            )
        if epochs:
            where = self.store.set_aside(epochs)
            logger.warning(
                "starting from scratch: checkpoints %s of %r set aside in %s",
                ", ".join(map(str, epochs)),
                self.store,
                where,
            )
        for k in self.roles.sinks:
            assert isinstance(k, StartOverSink)
            k.start_over()

    def _check_fingerprint(self, manifest: Manifest) -> UpgradePlan | None:
        """The upgrade rules' decisions when the graph (or the ids) changed; a refusal raises."""
        plan = plan_restore(manifest, self.roles.nodes[0], self.upgrade)
        if plan.legacy:
            logger.info(
                "checkpoint %d holds the node ids of rivermark before readable ids; restoring "
                "them under the current ids: %s",
                manifest.epoch,
                ", ".join(f"{old} -> {new}" for old, new in sorted(plan.legacy.items())),
            )
        if not plan.changes:
            return plan if plan.legacy else None
        if plan.refused:
            raise CheckpointMismatchError(plan.message(repr(self.store)))
        for d in plan.decisions:
            logger.info("checkpoint %d: %s", manifest.epoch, d.line())
        return plan

    def warn_not_replayable(self) -> None:
        """A WARNING for every root that cannot replay its records after a crash."""
        for n in self.roles.nodes:
            if n.upstreams:
                continue
            if not (isinstance(n, Source) and n.replayable):
                logger.warning(
                    "source %s %r is not replayable: its records are at-most-once across crashes",
                    self.id_of(n),
                    n,
                )
