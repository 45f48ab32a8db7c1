"""Scale-out on a Dask cluster: ``Stream.scatter()``, ``DaskStream.gather()``.

Importing this package registers ``scatter`` on :class:`rivermark.Stream` and
the scattered operators on :class:`DaskStream` (see :mod:`rivermark.dask.core`).
:class:`DaskDatasetStore` keeps a Job's checkpoints as Dask datasets
(:mod:`rivermark.dask.store`); ``from_kafka_batched(..., dask=True)`` reads
Kafka batches on the workers (:mod:`rivermark.dask.kafka`).

The scattered streams' modules (each imports only ``errors`` and those before it):

* ``tasks``: what runs on the workers (the functions the nodes submit);
* ``client``: finding and checking the Dask client, fetching futures' values;
* ``stream``: ``DaskStream``, the base of every scattered node; ``map``, ``starmap``;
* ``batches``: a scattered ``accumulate``'s batch, and each record's handle to it;
* ``gather``: ``DaskGather``, futures back as local values, in order;
* ``core``: ``scatter``, ``accumulate``, the structural operators, and ``Remote``
  (a future in checkpointed state); it also names everything above.
"""

from __future__ import annotations

from rivermark import operators as _operators  # noqa: F401  (local operators reused below)
from rivermark.dask.core import SCATTERED_OPERATORS as SCATTERED_OPERATORS
from rivermark.dask.core import DaskAccumulate as DaskAccumulate
from rivermark.dask.core import DaskGather as DaskGather
from rivermark.dask.core import DaskMap as DaskMap
from rivermark.dask.core import DaskScatter as DaskScatter
from rivermark.dask.core import DaskStarmap as DaskStarmap
from rivermark.dask.core import DaskStream as DaskStream
from rivermark.dask.core import Remote as Remote
from rivermark.dask.core import _register_scattered
from rivermark.dask.core import scatter as scatter
from rivermark.dask.errors import DaskConnectionError as DaskConnectionError
from rivermark.dask.errors import DaskError as DaskError
from rivermark.dask.errors import DaskWorkerLostError as DaskWorkerLostError
from rivermark.dask.errors import KafkaRangeReadError as KafkaRangeReadError
from rivermark.dask.store import DaskDatasetStore as DaskDatasetStore

#: streamz name -> scattered class, for the local operators available at import
scattered_classes: dict[str, type] = _register_scattered()
