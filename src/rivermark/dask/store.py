"""A checkpoint store that publishes each checkpoint as Dask datasets.

The streamz pipeline that started rivermark (streamz issue "Publishing and
Retrieving SDFs for SDF Checkpointing") published its DataFrame state with
``client.publish_dataset`` after every batch, separately from the Kafka
offsets, so the two drifted apart after a crash.  :class:`DaskDatasetStore`
is a :class:`rivermark.checkpoint.Store`: a :class:`~rivermark.Job` writes
operator state *and* source positions through it with the ordinary
checkpoint protocol (``docs/checkpointing.md``), so they stay in step, and
any other client of the cluster can read the newest state.

Datasets, for ``prefix="sums"``::

    sums/job                                      job info (JSON text)
    sums/checkpoints/000000000042/state/<node-id> state file of one node (bytes)
    sums/checkpoints/000000000042/manifest        the manifest (JSON text)

Write order: every state dataset, then the manifest.  Publishing a dataset
is one scheduler operation, so the manifest appears whole or not at all, and
a checkpoint without one does not exist (its state datasets are removed at
the next prune).  The lock lives on the scheduler as well: one job per
prefix; the lock of a job whose client disconnected (the process died) is
free again.

Datasets live in the scheduler's memory: they survive restarts of the job
and of workers, not of the scheduler.  Use the default directory store
where the checkpoint must outlive the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from rivermark.checkpoint.errors import CheckpointCorruptError, CheckpointLockedError
from rivermark.checkpoint.faults import fault_point
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.stores.manifest import FORMAT_VERSION, Manifest, sha256_of
from rivermark.checkpoint.stores.store import Store
from rivermark.core import runtime
from rivermark.dask.errors import DaskConnectionError
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["DaskDatasetStore"]

if TYPE_CHECKING:
    import distributed

T = TypeVar("T")

_MISSING: object = object()


def _lock_functions() -> tuple[Callable[..., str | None], Callable[..., bool]]:
    """Functions run on the scheduler (defined here so they travel by value).

    The scheduler runs one at a time on its event loop, so checking and
    taking the lock is atomic.  A holder counts only while its client is
    connected: a job process that died releases its lock with its connection.
    """

    def take(name: str, client_id: str, info: str, dask_scheduler: Any = None) -> str | None:
        locks = dask_scheduler.__dict__.setdefault("rivermark_store_locks", {})
        held = locks.get(name)
        if held is not None and held[0] != client_id and held[0] in dask_scheduler.clients:
            return str(held[1])
        locks[name] = (client_id, info)
        return None

    def release(name: str, client_id: str, dask_scheduler: Any = None) -> bool:
        locks = dask_scheduler.__dict__.setdefault("rivermark_store_locks", {})
        held = locks.get(name)
        if held is not None and held[0] == client_id:
            del locks[name]
            return True
        return False

    return take, release


class DaskDatasetStore(Store):
    """Checkpoints as published Dask datasets (see the module docs).

    ``Job(graph, checkpoint=DaskDatasetStore(client, prefix="sums"))`` runs a
    job against it; :meth:`latest_states` reads the newest state from any
    client.  ``client`` must be a synchronous ``distributed.Client`` (the
    default); ``None`` uses ``distributed.default_client()``.  ``lock_wait``
    is how long :meth:`lock` waits for a lock held by another client.

    >>> from distributed import Client
    >>> client = Client(processes=False, n_workers=1, dashboard_address=":0")
    >>> store = DaskDatasetStore(client, prefix="demo")
    >>> store.write_checkpoint(Manifest(1, 0.0, {}), {"acc": codec.dumps({"state": 6})})
    >>> store.list_epochs(), store.latest_states()
    ([1], {'acc': {'state': 6}})
    >>> client.close()
    """

    def __init__(
        self,
        client: distributed.Client | None = None,
        prefix: str = "rivermark",
        lock_wait: float = 5.0,
    ) -> None:
        if not isinstance(prefix, str) or not prefix or prefix.endswith("/"):
            raise ConfigurationError(
                f"DaskDatasetStore: prefix must be a non-empty string without a trailing '/', "
                f"got {prefix!r}; pass e.g. prefix='sums'"
            )
        if client is not None and not hasattr(client, "publish_dataset"):
            raise ConfigurationError(
                f"DaskDatasetStore: client must be a distributed.Client, got {client!r}; "
                f"pass client=distributed.Client(...) or leave it out to use the default client"
            )
        if isinstance(lock_wait, bool) or not isinstance(lock_wait, (int, float)) or lock_wait < 0:
            raise ConfigurationError(
                f"DaskDatasetStore: lock_wait must be a number of seconds >= 0, got {lock_wait!r}"
            )
        self._client = client
        self.prefix = prefix
        self.lock_wait = float(lock_wait)
        self._locked = False
        self._epoch_re = re.compile(
            re.escape(prefix) + r"/checkpoints/(\d{12})/(manifest|state/.+)\Z"
        )

    def __repr__(self) -> str:
        return f"DaskDatasetStore(prefix={self.prefix!r}, scheduler={self._address()!r})"

    # ------------------------------------------------------------------ client
    @property
    def client(self) -> distributed.Client:
        """The client given, else ``distributed.default_client()``."""
        if self._client is not None:
            return self._client
        import distributed

        try:
            client: distributed.Client = distributed.default_client()
        except ValueError:
            raise ConfigurationError(
                f"DaskDatasetStore({self.prefix!r}): no Dask client found; pass client= or "
                f"start a distributed.Client first"
            ) from None
        return client

    def _address(self) -> str:
        try:
            return str(self.client.scheduler.address)  # type: ignore[union-attr]  # else: no client
        except Exception:
            return "<no client>"

    def _call(self, what: str, func: Callable[..., T], *args: object, **kwargs: object) -> T:
        client = self.client
        # optional: older distributed clients have no asyncio_loop
        loop = getattr(getattr(client, "loop", None), "asyncio_loop", None)
        if loop is not None and loop is runtime.current_loop():
            raise ConfigurationError(
                f"DaskDatasetStore({self.prefix!r}): the client runs on this thread's event loop "
                f"(an asynchronous client); the store needs a synchronous "
                f"distributed.Client(...)"
            )
        # optional: a user's client-like object may not report a status
        status = getattr(client, "status", "running")
        if status != "running":
            raise DaskConnectionError(
                f"DaskDatasetStore({self.prefix!r}): cannot {what}: the Dask client is "
                f"{status!r} (connection to the scheduler at {self._address()!r} lost or "
                f"closed); the checkpoints published so far are unchanged; restart the job "
                f"once the scheduler is reachable"
            )
        try:
            return func(*args, **kwargs)
        except (OSError, TimeoutError) as e:
            raise DaskConnectionError(
                f"DaskDatasetStore({self.prefix!r}): lost the connection to the Dask scheduler "
                f"at {self._address()!r} while trying to {what} ({type(e).__name__}: {e}); "
                f"the checkpoints published so far are unchanged; restart the job once the "
                f"scheduler is reachable"
            ) from e

    def _get(self, what: str, name: str) -> object:
        return self._call(what, self.client.get_dataset, name, default=_MISSING)

    def _publish(self, what: str, name: str, value: object) -> None:
        self._call(what, self.client.publish_dataset, value, name=name, override=True)

    def _unpublish(self, name: str) -> None:
        with contextlib.suppress(KeyError):
            self._call(f"delete dataset {name!r}", self.client.unpublish_dataset, name)

    # ------------------------------------------------------------------ names
    def _epoch_name(self, epoch: int) -> str:
        return f"{self.prefix}/checkpoints/{epoch:012d}"

    def manifest_name(self, epoch: int) -> str:
        """The dataset that holds the manifest of ``epoch``."""
        return f"{self._epoch_name(epoch)}/manifest"

    def state_name(self, epoch: int, node_id: str) -> str:
        """The dataset that holds ``node_id``'s state file in ``epoch``."""
        return f"{self._epoch_name(epoch)}/state/{node_id}"

    def _datasets_by_epoch(self) -> dict[int, list[str]]:
        names = self._call("list the published datasets", self.client.list_datasets)
        out: dict[int, list[str]] = {}
        for name in names:
            m = self._epoch_re.match(str(name))
            if m is not None:
                out.setdefault(int(m.group(1)), []).append(str(name))
        return out

    # ------------------------------------------------------------------ the Store contract
    def list_epochs(self) -> list[int]:
        return sorted(
            e for e, names in self._datasets_by_epoch().items() if self.manifest_name(e) in names
        )

    def list_incomplete(self) -> list[Path]:
        """Epochs with state datasets but no manifest (torn writes), as ``Path(epoch)``."""
        return [
            Path(f"{e:012d}")
            for e, names in sorted(self._datasets_by_epoch().items())
            if self.manifest_name(e) not in names
        ]

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        epoch = manifest.epoch
        for name in self._datasets_by_epoch().get(epoch, []):
            self._unpublish(name)  # leftovers of a torn write with this number
        for node_id, blob in states.items():
            self._publish(
                f"publish the state of {node_id!r}", self.state_name(epoch, node_id), blob
            )
            manifest.state[node_id] = {
                "file": self.state_name(epoch, node_id),
                "size": len(blob),
                "sha256": sha256_of(blob),
            }
        fault_point("after-state-files")
        self._publish(f"publish manifest {epoch}", self.manifest_name(epoch), manifest.to_json())
        logger.debug("checkpoint %d published under %r", epoch, self.prefix)

    def read_manifest(self, epoch: int) -> Manifest:
        text = self._get(f"read manifest {epoch}", self.manifest_name(epoch))
        if text is _MISSING:
            raise KeyError(f"{self!r} has no checkpoint {epoch!r}")
        return Manifest.from_json(cast("str", text))  # published by write_checkpoint

    def read_state(self, epoch: int, node_id: str) -> bytes:
        blob = self._get(f"read the state of {node_id!r}", self.state_name(epoch, node_id))
        if blob is _MISSING:
            raise KeyError(f"{self!r}: checkpoint {epoch!r} has no state for node {node_id!r}")
        return bytes(cast("bytes", blob))  # published by write_checkpoint

    def describe(self, epoch: int) -> str:
        return f"checkpoint {self.manifest_name(epoch)!r}"

    def set_aside(self, epochs: list[int]) -> str:
        """Republish the datasets of ``epochs`` under ``PREFIX/set-aside-<UTC time>/``."""
        dest = f"{self.prefix}/set-aside-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        by_epoch = self._datasets_by_epoch()
        for e in epochs:
            for name in by_epoch.get(e, []):
                value = self._get(f"read dataset {name!r}", name)
                if value is not _MISSING:
                    rest = name[len(self.prefix) + len("/checkpoints/") :]
                    self._publish(f"set {name!r} aside", f"{dest}/{rest}", value)
            self.delete(e)
        return dest

    def delete(self, epoch: int) -> None:
        names = self._datasets_by_epoch().get(epoch, [])
        manifest = self.manifest_name(epoch)
        # the manifest first: a half-deleted checkpoint must not look complete
        if manifest in names:
            self._unpublish(manifest)
        for name in names:
            if name != manifest:
                self._unpublish(name)

    def prune(self, keep: int) -> list[int]:
        """Delete all but the newest ``keep`` checkpoints and older torn leftovers."""
        by_epoch = self._datasets_by_epoch()
        complete = sorted(e for e, names in by_epoch.items() if self.manifest_name(e) in names)
        newest = complete[-1] if complete else -1
        for e in by_epoch:
            if e < newest and e not in complete:
                for name in by_epoch[e]:
                    self._unpublish(name)
        doomed = self.prunable(complete, keep)
        for e in doomed:
            self.delete(e)
        return doomed

    def write_job_info(self, info: Mapping[str, object]) -> None:
        import json

        text = json.dumps({"format": FORMAT_VERSION, **info}, indent=2, sort_keys=True)
        self._publish("publish the job info", f"{self.prefix}/job", text)

    # ------------------------------------------------------------------ lock
    def lock(self) -> None:
        """Take this prefix's lock on the scheduler (waits up to ``lock_wait`` seconds)."""
        take, _ = _lock_functions()
        client = self.client
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        info = f"pid={os.getpid()} host={socket.gethostname()} started={started} client={client.id}"
        deadline = time.monotonic() + self.lock_wait
        while True:
            holder = self._call(
                "take the store's lock", client.run_on_scheduler, take, self.prefix, client.id, info
            )
            if holder is None:
                self._locked = True
                return
            # a holder that has just died may not be noticed by the scheduler yet
            if time.monotonic() >= deadline:
                raise CheckpointLockedError(
                    f"{self!r} is in use by another job ({holder}); stop that job first, "
                    f"or use a different prefix"
                )
            time.sleep(0.05)

    def unlock(self) -> None:
        if not self._locked:
            return
        self._locked = False
        _, release = _lock_functions()
        client = self.client
        # optional: a user's client-like object may not report a status
        if getattr(client, "status", "running") != "running":
            return  # the scheduler forgets the lock with the connection
        try:
            client.run_on_scheduler(release, self.prefix, client.id)
        except (OSError, TimeoutError) as e:
            logger.warning("%r: could not release the lock (%s)", self, e)

    def holder(self) -> str | None:
        """Who holds this prefix's lock (``"pid=... host=..."``), or ``None``."""

        def who(name: str, dask_scheduler: Any = None) -> str | None:
            locks = dask_scheduler.__dict__.get("rivermark_store_locks", {})
            held = locks.get(name)
            if held is None or held[0] not in dask_scheduler.clients:
                return None
            return str(held[1])

        result = self._call("read the store's lock", self.client.run_on_scheduler, who, self.prefix)
        return None if result is None else str(result)

    # ------------------------------------------------------------------ readers
    def latest_states(self) -> dict[str, object]:
        """The state of every node in the newest checkpoint that verifies (``{}`` if none).

        This is what the streamz pipeline published by hand: another client
        of the cluster (a dashboard, a notebook) reads the state a job
        checkpointed, keyed by node id (``name=`` of the node, if given).
        """
        for epoch in reversed(self.list_epochs()):
            try:
                m = self.verify(epoch)
            except CheckpointCorruptError as e:
                logger.warning("%r: skipping checkpoint %d: %s", self, epoch, e)
                continue
            allow = self.trust.allow_pickle(m.signature_status)
            what = (
                f"checkpoint {epoch} in {self!r}: a node's state holds pickled objects and the "
                f"checkpoint is {m.signature_status}; give the store the job's checkpoint key "
                "(store.trust, see docs/security.md) or trust the store"
            )
            return {
                nid: codec.loads(self.read_state(epoch, nid), allow_pickle=allow, what=what)
                for nid in m.state
            }
        return {}
