"""Checkpoints published as Dask datasets, the way the SDF-checkpoint proposal did by hand.

The proposal that started rivermark published a streaming DataFrame's state
with ``client.publish_dataset`` after every batch, *before* the Kafka offsets
were committed, so the two drifted apart after a crash.  This store keeps
them in one piece: it stores a whole checkpoint (operator state *and* source
positions, serialised by the checkpoint protocol) under one id, and makes it
visible with a single manifest update:

1. publish the checkpoint's bytes as dataset ``{prefix}/data/{id}``;
2. publish the manifest ``{prefix}/manifest`` (the list of complete ids,
   oldest first) with ``override=True`` -- one scheduler operation, so a
   reader sees either the old manifest or the new one, never a partial one;
3. only then unpublish the data of ids that fell out of the last ``keep``.

A checkpoint whose data is missing is skipped with a warning (newest complete
one wins).  Datasets live in the scheduler's memory: they survive restarts of
the job and of workers, not of the scheduler.  Use a file store for
durability; this one is for sharing state through the cluster.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import ConfigurationError
from .errors import DaskConnectionError

logger = logging.getLogger(__name__)

__all__ = ["DaskDatasetStore"]

_MISSING: Any = object()


class DaskDatasetStore:
    """Store checkpoints (bytes) as Dask published datasets on the scheduler.

    >>> from distributed import Client
    >>> client = Client(processes=False, n_workers=1, dashboard_address=":0")
    >>> store = DaskDatasetStore(client, prefix="demo", keep=2)
    >>> for i in (1, 2, 3):
    ...     store.write(i, b"state-%d" % i)
    >>> store.ids(), store.latest()
    ([2, 3], (3, b'state-3'))
    >>> client.close()
    """

    def __init__(self, client: Any = None, prefix: str = "rivermark", keep: int = 3) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(
                f"DaskDatasetStore: prefix must be a non-empty string, got {prefix!r}; "
                f"pass e.g. prefix='my-job'"
            )
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigurationError(
                f"DaskDatasetStore: keep must be an integer >= 1, got {keep!r}; pass e.g. keep=3"
            )
        self._client = client
        self.prefix = prefix
        self.keep = keep

    @property
    def client(self) -> Any:
        """The client given, else ``distributed.default_client()``."""
        if self._client is not None:
            return self._client
        import distributed

        try:
            return distributed.default_client()
        except ValueError:
            raise ConfigurationError(
                "DaskDatasetStore: no Dask client found; pass client= or start a "
                "distributed.Client first"
            ) from None

    def _data_name(self, checkpoint_id: int) -> str:
        return f"{self.prefix}/data/{checkpoint_id}"

    @property
    def _manifest_name(self) -> str:
        return f"{self.prefix}/manifest"

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (OSError, TimeoutError) as e:
            raise DaskConnectionError(
                f"DaskDatasetStore({self.prefix!r}): lost the connection to the Dask scheduler "
                f"while trying to {what} ({type(e).__name__}: {e}); the previous checkpoint "
                f"is unchanged"
            ) from e

    def ids(self) -> list[int]:
        """Ids of the complete checkpoints, oldest first."""
        manifest = self._call(
            "read the manifest", self.client.get_dataset, self._manifest_name, default=_MISSING
        )
        if manifest is _MISSING:
            return []
        return list(manifest)

    def write(self, checkpoint_id: int, data: bytes) -> None:
        """Publish checkpoint ``checkpoint_id``; it is complete when this returns."""
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int):
            raise ConfigurationError(
                f"DaskDatasetStore.write: checkpoint_id must be an int, got {checkpoint_id!r}"
            )
        client = self.client
        previous = self.ids()
        if previous and checkpoint_id <= previous[-1]:
            raise ConfigurationError(
                f"DaskDatasetStore.write: checkpoint_id {checkpoint_id!r} is not newer than the "
                f"last complete one ({previous[-1]!r}); ids must increase"
            )
        self._call(
            "publish checkpoint data",
            client.publish_dataset,
            bytes(data),
            name=self._data_name(checkpoint_id),
            override=True,
        )
        kept = [*previous, checkpoint_id][-self.keep :]
        self._call(
            "publish the manifest",
            client.publish_dataset,
            kept,
            name=self._manifest_name,
            override=True,
        )
        logger.info("checkpoint %s published to Dask datasets %r", checkpoint_id, self.prefix)
        for old in previous:
            if old not in kept:
                try:
                    client.unpublish_dataset(self._data_name(old))
                except KeyError:
                    pass

    def read(self, checkpoint_id: int) -> bytes | None:
        """The bytes of checkpoint ``checkpoint_id``, or ``None`` if they are gone."""
        data = self._call(
            "read checkpoint data",
            self.client.get_dataset,
            self._data_name(checkpoint_id),
            default=_MISSING,
        )
        return None if data is _MISSING else bytes(data)

    def latest(self) -> tuple[int, bytes] | None:
        """The newest complete checkpoint as ``(id, bytes)``, or ``None`` before the first."""
        for checkpoint_id in reversed(self.ids()):
            data = self.read(checkpoint_id)
            if data is not None:
                return checkpoint_id, data
            logger.warning(
                "checkpoint %s is in the manifest of %r but its data is gone; trying an older one",
                checkpoint_id,
                self.prefix,
            )
        return None
