"""Recovery at start: what a :class:`~rivermark.checkpoint.job.Job` restores before its sources run.

The newest checkpoint that verifies is loaded (damaged ones are skipped with
a WARNING) and checked against the graph (its fingerprint); then
``set_state`` on stateful nodes, ``restore(handle)`` on checkpointed sinks
(``None`` without a checkpoint), ``seek(position)`` on sources.  A store
whose checkpoints all fail verification is refused
(:class:`NoValidCheckpointError`), and so is sink output that no checkpoint
accounts for (:class:`UnaccountedOutputError`); ``from_scratch=True`` sets
the checkpoints aside and starts every checkpointed sink over.

:class:`RecoveryAtStart` is a part of ``Job`` (its base class): it reads the
job's graph, store and delta chains, and sets what the job resumed from.
"""

from __future__ import annotations

import logging
import pickle
import time
from typing import TYPE_CHECKING, Any

from ..core.node import Stream
from ..errors import ConfigurationError
from ..sinks.base import CheckpointedSink, StartOverSink
from ..sources.base import Source
from .errors import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    NoValidCheckpointError,
    UnaccountedOutputError,
)
from .keyed import Chains
from .manifest import Manifest
from .store import Store

# recovery's messages are the job's: they keep the job's logger name
logger = logging.getLogger("rivermark.checkpoint.job")

__all__ = ["RecoveryAtStart"]


class RecoveryAtStart:
    """The recovery at start of a :class:`~rivermark.checkpoint.job.Job` (its base class)."""

    # what the job sets in its __init__ (see Job)
    store: Store
    nodes: list[Stream]
    stateful: list[Stream]
    sinks: list[CheckpointedSink]
    sources: list[Source]
    fingerprint: dict[str, str]
    allow_new_nodes: bool
    from_scratch: bool
    epoch: int
    restored_epoch: int | None
    restored_time: float | None
    restored_positions: dict[str, Any]
    restore_seconds: float
    _keyed: Chains

    if TYPE_CHECKING:

        def id_of(self, node: Stream | CheckpointedSink) -> str: ...

    def _recover(self) -> None:
        started = time.perf_counter()
        try:
            self._recover_newest()
        finally:
            self.restore_seconds = time.perf_counter() - started

    def _recover_newest(self) -> None:
        epochs = self.store.list_epochs()
        incomplete = self.store.list_incomplete()
        taken = [*epochs, *(int(p.name) for p in incomplete if p.name.isdigit())]
        self.epoch = max(taken, default=0)
        if self.from_scratch:
            self._start_over(epochs)
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
            for k in self.sinks:
                k.restore(None)
            return
        manifest, blobs = loaded
        for e, why in damaged.items():
            logger.warning("skipping damaged checkpoint %d: %s", e, why)
        self._check_fingerprint(manifest)
        self._restore_from(manifest, blobs)

    def _restore_from(self, manifest: Manifest, blobs: dict[str, list[bytes]]) -> None:
        """Hand the nodes, sinks and sources what checkpoint ``manifest`` holds for them."""
        for n in self.stateful:
            nid = self.id_of(n)
            if nid in manifest.chains:
                link = manifest.chains[nid]
                n.set_state(self._keyed.restored(nid, manifest.epoch, link, blobs[nid]))
            elif nid in blobs:
                n.set_state(pickle.loads(blobs[nid][-1]))
        for k in self.sinks:
            k.restore(manifest.sinks.get(self.id_of(k)))
        for s in self.sources:
            sid = self.id_of(s)
            if sid in manifest.positions:
                s.seek(manifest.positions[sid])
        self.restored_epoch = manifest.epoch
        self.restored_time = manifest.time
        self.restored_positions = dict(manifest.positions)
        logger.info(
            "restored checkpoint %d from %r",
            manifest.epoch,
            self.store,
            extra={"epoch": manifest.epoch, "position": manifest.positions},
        )

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
            for k in self.sinks
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
        cannot = [k for k in self.sinks if not isinstance(k, StartOverSink)]
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
        for k in self.sinks:
            assert isinstance(k, StartOverSink)
            k.start_over()

    def _check_fingerprint(self, manifest: Manifest) -> None:
        old, new = manifest.fingerprint, self.fingerprint
        sink_ids = {self.id_of(k) for k in self.sinks}
        if not sink_ids & set(old):
            # written before sinks were part of the fingerprint: compare the rest
            new = {k: v for k, v in new.items() if k not in sink_ids}
        if old == new:
            return
        by_id = {self.id_of(n): n for n in self.nodes}
        added = sorted(set(new) - set(old))
        removed = sorted(set(old) - set(new))
        changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
        if not removed and not changed and self.allow_new_nodes:
            logger.warning("checkpoint %d: new nodes %s start empty", manifest.epoch, added)
            return
        lines = [
            f"the graph differs from the one that wrote checkpoint {manifest.epoch} "
            f"in {self.store!r}:"
        ]
        lines += [f"  added: {k} {by_id[k]!r}" for k in added]
        lines += [f"  removed: {k} (was {old[k]})" for k in removed]
        lines += [f"  changed: {k} {by_id[k]!r} (was {old[k]}, now {new[k]})" for k in changed]
        # a node without name= whose derived id moved (e.g. a map inserted
        # above it) shows up as removed + added with the same configuration
        moved = [
            (r, a) for r in removed for a in added if old[r] == new[a] and by_id[a].name is None
        ]
        lines += [
            f"  {r} and {a} look like the same node ({new[a]}): its id is derived from the "
            f"graph's shape, which changed; to restore its state from this checkpoint, "
            f"pass name={r!r} to {by_id[a]!r}"
            for r, a in moved
        ]
        hint = (
            "to start over, run with --from-scratch (Job(..., from_scratch=True)): it sets "
            "the checkpoints aside and starts the sinks' output over"
        )
        if moved or any(by_id[k].name is None for k in added):
            hint = (
                "give stateful nodes and sources explicit names (e.g. "
                ".accumulate(f, name='totals')) so that their state survives changes of "
                "the graph around them; " + hint
            )
        if added and not removed and not changed:
            hint = "pass Job(..., allow_new_nodes=True) to start the added nodes empty, or " + hint
        else:
            hint = "removed or changed nodes cannot be restored; " + hint
        raise CheckpointMismatchError("\n".join([*lines, hint]))

    def _warn_not_replayable(self) -> None:
        for n in self.nodes:
            if n.upstreams:
                continue
            if not getattr(n, "replayable", False):
                logger.warning(
                    "source %s %r is not replayable: its records are at-most-once across crashes",
                    self.id_of(n),
                    n,
                )
