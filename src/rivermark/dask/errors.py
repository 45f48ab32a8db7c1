"""Failures of the Dask integration."""

from __future__ import annotations

from rivermark.errors import RivermarkError

__all__ = ["DaskError", "DaskConnectionError", "DaskWorkerLostError", "KafkaRangeReadError"]


class DaskError(RivermarkError):
    """Something went wrong on the Dask side of a scattered stream."""


class DaskConnectionError(DaskError):
    """The Dask client lost (or never had) its connection to the scheduler.

    The job stops; its last checkpoint is left as it was, so the job can be
    restarted from there once the scheduler is reachable again.
    """


class DaskWorkerLostError(DaskError):
    """A task was retried on new workers until Dask gave up (``KilledWorker``)."""


class KafkaRangeReadError(DaskError):
    """A worker could not read a Kafka offset range (``from_kafka_batched(..., dask=True)``).

    Not a user error: ``gather`` fails (the job stops, its last checkpoint
    intact) whatever the node's ``on_error`` policy, since dropping the range
    would lose its records.
    """
