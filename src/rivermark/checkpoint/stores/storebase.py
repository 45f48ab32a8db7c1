"""The :class:`Store` interface every checkpoint store implements, with the integrity checks.

A store implements the raw operations (list, write, read, delete, lock);
the checks that every store must make alike (a manifest that parses, is
signed as the keys require and names its own epoch; state files of the size
and digest their entries record) are written once here, in the base class.
The stores themselves: :class:`~rivermark.checkpoint.stores.store.LocalDirectoryStore`
(:mod:`rivermark.checkpoint.stores.store`, which also re-exports :class:`Store`) and
:class:`~rivermark.checkpoint.stores.objectstore.ObjectStore`.
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass, field
from pathlib import Path

from rivermark.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointSignatureError,
    ManifestError,
    ManifestFormatError,
)
from rivermark.checkpoint.stores.manifest import Manifest, sha256_of
from rivermark.checkpoint.stores.signing import Trust, key_id
from rivermark.errors import ConfigurationError, RivermarkError

logger = logging.getLogger(__name__)

__all__ = ["Store"]


class Store(abc.ABC):
    """Durable storage for checkpoints; see :class:`LocalDirectoryStore`.

    A store implements the raw operations (list, write, read the manifest,
    read a state blob, delete, lock).  The integrity checks are here, in the
    base class, so that every store gets them: :meth:`load_manifest` (the
    manifest parses, has its fields with their types, passes its own checksum,
    has a known format, and names the epoch of the place it sits in),
    :meth:`load_checkpoint` and :meth:`verify` (every state blob has the size
    and sha256 its entry records).  A store should not override these three.

    ``trust`` (set by the job or the inspecting command) holds the keys:
    with a key, every manifest is signed when written and its signature is
    checked when loaded (:meth:`load_manifest`).
    """

    trust: Trust = Trust()
    #: the local directory the store writes to (None: not a local directory);
    #: a job derives its id from it when the store has no :meth:`location`
    path: Path | None = None

    @abc.abstractmethod
    def list_epochs(self) -> list[int]:
        """Epochs that have a manifest, oldest first."""

    @abc.abstractmethod
    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        """Write state blobs and then, atomically, the manifest."""

    @abc.abstractmethod
    def read_manifest(self, epoch: int) -> Manifest:
        """Parse the manifest of ``epoch`` with :meth:`Manifest.from_json`.

        Raises if it is missing or damaged; :meth:`load_manifest` is the
        checked way in.
        """

    @abc.abstractmethod
    def read_state(self, epoch: int, node_id: str) -> bytes:
        """The state blob of ``node_id`` in ``epoch`` (unchecked; see :meth:`load_checkpoint`)."""

    def location(self) -> str | None:
        """A stable name of where the checkpoints live (a URL), or ``None``.

        A job derives its id (e.g. Kafka transactional ids) from it.
        """
        return None

    @abc.abstractmethod
    def delete(self, epoch: int) -> None:
        """Remove checkpoint ``epoch``."""

    @abc.abstractmethod
    def lock(self) -> None:
        """Take the exclusive lock; raise :class:`CheckpointLockedError` if held."""

    @abc.abstractmethod
    def unlock(self) -> None:
        """Release the lock."""

    def write_job_info(self, info: dict[str, object]) -> None:  # noqa: B027 - optional
        """Record a description of the job (optional)."""

    def read_job_info(self) -> dict[str, object] | None:
        """The description :meth:`write_job_info` recorded (None: none, or unreadable)."""
        return None

    def list_incomplete(self) -> list[Path]:
        """Checkpoint directories without a manifest (torn writes); optional."""
        return []

    def prune(self, keep: int) -> list[int]:
        """Delete all but the newest ``keep`` checkpoints (and those their chains need)."""
        doomed = self.prunable(self.list_epochs(), keep)
        for e in doomed:
            self.delete(e)
        self.prune_shared()
        return doomed

    # ------------------------------------------------------------------ what retention reads
    # Retention runs after every checkpoint and reads the manifests of the checkpoints
    # it keeps (their chains, whether one is a savepoint, the shared files they name):
    # on an object store two requests each, a few per checkpoint.  The manifests this
    # store wrote itself are remembered for it instead (a written manifest does not
    # change: a checkpoint is deleted whole, or its manifest replaced through this
    # store), and the shared files are not listed again while none exist and no
    # manifest written since names one (they are written only for such a manifest).
    def _retention(self) -> _Retention:
        # made on first use: a store written outside rivermark subclasses Store
        # without calling an __init__ of ours
        found = self.__dict__.get("_retention_memo")
        if found is None:
            found = self.__dict__["_retention_memo"] = _Retention()
        return found

    def wrote_manifest(self, manifest: Manifest) -> None:
        """Remember ``manifest``, just written durably by this store, for retention."""
        memo = self._retention()
        memo.written[manifest.epoch] = manifest
        if manifest.shared_files():
            memo.no_shared = False

    def forget_manifest(self, epoch: int) -> None:
        """``epoch``'s manifest was deleted or replaced: retention reads it again."""
        self._retention().written.pop(epoch, None)

    def retention_manifest(self, epoch: int) -> Manifest:
        """The manifest of ``epoch`` as retention sees it (remembered, else read)."""
        found = self._retention().written.get(epoch)
        return found if found is not None else self.read_manifest(epoch)

    # ------------------------------------------------------------------ shared files
    # The files of RocksDB state (rivermark.checkpoint.state.rocks) are stored once,
    # under their sha256, and named by every manifest that needs them.
    def write_shared(self, digest: str, data: bytes) -> None:
        """Store a shared file under its sha256 ``digest`` (durable before it returns)."""
        raise CheckpointError(
            f"{self!r} cannot hold the files of RocksDB state; keep the checkpoints in a "
            "directory or an object store (s3://, file://), or keep the state in memory"
        )

    def write_shared_file(self, digest: str, source: Path) -> None:
        """Store the local file ``source`` as shared file ``digest`` (durable before it returns).

        A store that can copies it a piece at a time (a RocksDB state file is
        up to 64 MiB: read whole, it would be that much more memory at each
        checkpoint that uploads one); this one reads it whole.
        """
        self.write_shared(digest, source.read_bytes())

    def read_shared(self, digest: str) -> bytes:
        """The bytes of shared file ``digest`` (unchecked: the caller checks the digest)."""
        raise CheckpointError(f"{self!r} holds no shared files (asked for {digest[:16]})")

    def list_shared(self) -> dict[str, int]:
        """Every shared file in the store: sha256 -> size."""
        return {}

    def delete_shared(self, digests: list[str]) -> None:  # noqa: B027 - none to delete
        """Remove the shared files ``digests``."""

    def shared_references(self) -> set[str] | None:
        """The shared files every checkpoint in the store names; None if one is unreadable."""
        needed: set[str] = set()
        for e in self.list_epochs():
            try:
                needed |= set(self.retention_manifest(e).shared_files())
            except Exception as err:  # keep every file while a manifest cannot be read
                logger.warning(
                    "%s: its manifest cannot be read (%s: %s); no shared file is deleted",
                    self.describe(e), type(err).__name__, err,
                )  # fmt: skip
                return None
        return needed

    def prune_shared(self) -> list[str]:
        """Delete the shared files that no checkpoint left in the store names.

        Runs after the checkpoints themselves were pruned: so retention keeps
        every file a kept checkpoint (or savepoint) needs, and only those.
        """
        memo = self._retention()
        if memo.no_shared:
            return []
        present = self.list_shared()
        if not present:
            memo.no_shared = True
            return []
        needed = self.shared_references()
        if needed is None:
            return []
        doomed = sorted(d for d in present if d not in needed)
        if doomed:
            self.delete_shared(doomed)
            logger.debug("%r: deleted %d shared files no checkpoint names", self, len(doomed))
        return doomed

    def check_shared(self, epoch: int, m: Manifest) -> None:
        """Every shared file ``m`` names is in the store with its size (not read here)."""
        wanted = m.shared_files()
        if not wanted:
            return
        present = self.list_shared()
        for nid, attrs in m.files.items():
            for attr, names in attrs.items():
                for name, info in names.items():
                    if info.get("inline"):
                        continue  # inside the state file, checked with it
                    size = present.get(info["sha256"])
                    if size != info["size"]:
                        what = "is missing" if size is None else f"has {size} bytes"
                        raise CheckpointCorruptError(
                            f"{self.describe(epoch)}: file {name!r} of the RocksDB state "
                            f"{attr!r} of {nid!r} (shared/{info['sha256']}) {what}, the "
                            f"manifest says {info['size']} bytes"
                        )

    def describe(self, epoch: int) -> str:
        """Where checkpoint ``epoch`` lives, for messages."""
        return f"checkpoint {epoch} in {self!r}"

    def read_state_entry(self, epoch: int, node_id: str, entry: dict[str, object]) -> bytes:
        """The blob that the manifest's state ``entry`` of ``node_id`` points to."""
        return self.read_state(epoch, node_id)

    def set_aside(self, epochs: list[int]) -> str:
        """Move checkpoints ``epochs`` out of the way (kept, not deleted); say where.

        Used by a job started with ``from_scratch=True``.  A store that cannot
        do it refuses, and the user moves them by hand.
        """
        raise CheckpointError(
            f"{self!r} cannot set checkpoints aside; move or remove checkpoints "
            f"{', '.join(map(str, epochs))} yourself, then start the job again"
        )

    def prunable(self, epochs: list[int], keep: int) -> list[int]:
        """The complete checkpoints among ``epochs`` that retention may delete.

        All but the newest ``keep``, except those whose state files a kept
        checkpoint's delta chain needs (its parents back to the base), and,
        in turn, what each checkpoint kept that way needs for its own chains
        (another node's base may be older): the closure, so every checkpoint
        left in the store verifies.  A manifest that cannot be read keeps
        everything older than it.  A savepoint (``Manifest.savepoint``) is
        never prunable, nor what it needs (nothing, as written: its keyed
        states are bases).
        """
        if keep <= 0 or len(epochs) <= keep:
            return []
        kept = set(epochs[-keep:]) | set(self.savepoints(epochs[:-keep]))
        todo = list(kept)
        while todo:
            e = todo.pop()
            try:
                m = self.retention_manifest(e)
            except Exception:
                needed = {x for x in epochs if x < e}  # nothing older than e goes
            else:
                needed = {x for link in m.chains.values() for x in epochs if link["base"] <= x < e}
            todo.extend(needed - kept)
            kept |= needed
        return [e for e in epochs if e not in kept]

    def savepoints(self, epochs: list[int]) -> list[int]:
        """The epochs among ``epochs`` whose manifest marks a savepoint.

        A manifest that cannot be read is not counted (it cannot be restored
        from either).
        """
        out = []
        for e in epochs:
            try:
                if self.retention_manifest(e).savepoint:
                    out.append(e)
            except Exception:  # damaged: not a savepoint anyone can restore
                continue
        return out

    # ------------------------------------------------------------------ integrity (all stores)
    def load_manifest(self, epoch: int) -> Manifest:
        """The manifest of ``epoch``, checked; raise :class:`CheckpointCorruptError` if damaged."""
        where = self.describe(epoch)
        try:
            m = self.read_manifest(epoch)
        except CheckpointCorruptError as e:
            raise _located(e, where) from e
        except RivermarkError:  # e.g. a lost connection: not damage, the caller decides
            raise
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise CheckpointCorruptError(
                f"{where}: manifest unreadable ({type(e).__name__}: {e})"
            ) from e
        if m.epoch != epoch:
            raise CheckpointCorruptError(
                f"{where}: the manifest says epoch {m.epoch!r}, the place it sits in is "
                f"epoch {epoch} (copied or moved from another checkpoint)"
            )
        self._check_signature(m, where)
        return m

    def replace_manifest(self, epoch: int, data: bytes) -> None:
        """Replace the manifest of ``epoch`` by ``data`` at once (re-signing; see ``resign``)."""
        raise ConfigurationError(f"{self!r} cannot replace a manifest (re-sign its checkpoints)")

    def refuse_signed_without_key(self, epochs: list[int]) -> None:
        """Refuse a job without a key on a store whose newest checkpoint is signed.

        A signed store whose job lost its key (an unset variable, a missing
        secret) would otherwise be resumed without any signature checked, and
        written to without signatures.  ``trust_store`` is the explicit
        choice to go on unsigned.  A damaged newest checkpoint is passed over
        for the next one, as recovery does.
        """
        if self.trust.keyring is not None or self.trust.trust_store:
            return
        for epoch in reversed(epochs):
            try:
                m = self.read_manifest(epoch)
            except (CheckpointCorruptError, OSError, KeyError, ValueError, TypeError):
                continue
            self.refuse_signed(m, self.describe(epoch))
            return

    def refuse_signed(self, m: Manifest, where: str) -> None:
        """One line if ``m`` is signed and this store has no key (and is not trusted)."""
        if m.signature is None or self.trust.keyring is not None or self.trust.trust_store:
            return
        key = m.signature.get("key") if isinstance(m.signature, dict) else None
        raise ConfigurationError(
            f"{where} is signed (key {key!r}), but this job has no checkpoint key: set "
            "RIVERMARK_CHECKPOINT_KEY or RIVERMARK_CHECKPOINT_KEY_FILE (Job(checkpoint_key=...)) "
            "to the key that signed it; or, to go on without signatures, run once with "
            "--trust-store (Job(trust_store=True)) (see docs/security.md)"
        )

    def _check_signature(self, m: Manifest, where: str) -> None:
        """Set ``m.signature_status``; with a key, refuse what did not verify."""
        keyring = self.trust.keyring
        if keyring is None:
            m.signature_status = "unsigned" if m.signature is None else "unchecked"
            return
        status = m.signature_status = keyring.check(m.canonical, m.signature)
        if status == "ok":
            return
        if status == "bad-signature":
            raise CheckpointSignatureError(
                f"{where}: bad signature: its contents changed after it was signed (edited or "
                "damaged); restore a good copy of the checkpoint store",
                status,
            )
        if self.trust.trust_store:
            logger.warning("%s is %s; loaded anyway (trust_store)", where, status)
            return
        if status == "unsigned":
            why = "not signed, and this job has a checkpoint key (written without it, or planted)"
        else:
            assert m.signature is not None
            why = (
                f"signed with key {m.signature.get('key')!r}, which is none of this job's keys "
                f"({', '.join(key_id(k) for k in keyring.keys)})"
            )
        raise CheckpointSignatureError(
            f"{where}: {why}; add the key that wrote it as an old key, or, if you trust "
            "whoever wrote the store, run once with --trust-store (Job(trust_store=True))",
            status,
        )

    def load_checkpoint(self, epoch: int) -> tuple[Manifest, dict[str, bytes]]:
        """The checked manifest of ``epoch`` and every state blob, each checked.

        A node whose state is a delta chain has its whole chain checked (see
        :meth:`load_chains`); its blob here is ``epoch``'s own delta.
        Raises :class:`CheckpointCorruptError` naming the first damage found.
        """
        m, chains = self.load_chains(epoch)
        return m, {nid: blobs[-1] for nid, blobs in chains.items()}

    def load_chains(self, epoch: int) -> tuple[Manifest, dict[str, list[bytes]]]:
        """The checked manifest of ``epoch`` and every node's state blobs, base first.

        A node with plain state has one blob.  A node whose state is a delta
        chain (the manifest's ``chains``) has its base and every delta up to
        ``epoch``'s: each parent checkpoint's manifest is checked as the
        newest one is, and each blob against its own manifest's entry.
        Raises :class:`CheckpointCorruptError` naming the first damage found.
        """
        m = self.load_manifest(epoch)
        own = self._checked_blobs(epoch, m)
        self.check_shared(epoch, m)
        out: dict[str, list[bytes]] = {nid: [blob] for nid, blob in own.items()}
        for nid, link in m.chains.items():
            parent = link["parent"]
            while parent is not None:
                try:
                    pm = self.load_manifest(parent)
                except CheckpointCorruptError as e:
                    raise CheckpointCorruptError(
                        f"{self.describe(epoch)}: the delta chain of {nid!r} needs checkpoint "
                        f"{parent}, which is damaged or missing ({e})"
                    ) from e
                plink = pm.chains.get(nid)
                if nid not in pm.state or plink is None or plink["base"] != link["base"]:
                    raise CheckpointCorruptError(
                        f"{self.describe(epoch)}: the delta chain of {nid!r} needs checkpoint "
                        f"{parent}, which holds no link of that chain (base {link['base']})"
                    )
                entry = {nid: pm.state[nid]}
                out[nid].insert(0, self._checked_blobs(parent, pm, entry)[nid])
                parent = plink["parent"]
        return m, out

    def _checked_blobs(
        self, epoch: int, m: Manifest, entries: dict[str, dict[str, object]] | None = None
    ) -> dict[str, bytes]:
        """The blobs of ``entries`` (default: every state entry of ``m``), each checked."""
        where = self.describe(epoch)
        blobs: dict[str, bytes] = {}
        for node_id, entry in (m.state if entries is None else entries).items():
            try:
                blob = self.read_state_entry(epoch, node_id, entry)
            except CheckpointCorruptError as e:
                raise _located(e, where) from e
            except RivermarkError:
                raise
            except (OSError, KeyError, ValueError) as e:
                raise CheckpointCorruptError(
                    f"{where}: state {entry['file']!r} of {node_id!r} missing or unreadable "
                    f"({type(e).__name__}: {e})"
                ) from e
            if len(blob) != entry["size"]:
                raise CheckpointCorruptError(
                    f"{where}: state {entry['file']!r} of {node_id!r} has {len(blob)} bytes, "
                    f"the manifest says {entry['size']}"
                )
            if sha256_of(blob) != entry["sha256"]:
                raise CheckpointCorruptError(
                    f"{where}: state {entry['file']!r} of {node_id!r} checksum mismatch"
                )
            blobs[node_id] = blob
        return blobs

    def verify(self, epoch: int) -> Manifest:
        """Check every part of ``epoch`` (delta chains back to their base).

        Raises :class:`CheckpointCorruptError` if damaged.
        """
        return self.load_chains(epoch)[0]


@dataclass
class _Retention:
    """What retention remembers of a store (see ``Store.retention_manifest``)."""

    #: the manifests this store wrote, by epoch
    written: dict[int, Manifest] = field(default_factory=dict)
    #: the shared area was found empty, and no manifest written since names a shared file
    no_shared: bool = False


def _located(e: CheckpointCorruptError, where: str) -> CheckpointCorruptError:
    """``e`` again (same kind), its message prefixed with where the checkpoint is."""
    for cls in (ManifestFormatError, ManifestError):
        if isinstance(e, cls):
            return cls(f"{where}: {e}")
    return CheckpointCorruptError(f"{where}: {e}")
