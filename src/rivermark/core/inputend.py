"""What a node that holds results learns about its input: its partitions and its end.

An event-time node (:class:`rivermark.operators.eventtime.Timestamps`) holds
windows open until its watermark passes them.  A source that knows which
partitions it reads tells the nodes below it, so that each partition holds
the watermark back until its first record (:class:`ReadsPartitions`); at the
end of a bounded input nothing more will move the watermark, so the job tells
the node that the input is complete and the node emits what it holds
(:class:`EndsWithInput`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Hashable, Iterable
from typing import Any, Protocol, runtime_checkable

__all__ = ["EndsWithInput", "ReadsPartitions", "HoldsWatermark"]


@runtime_checkable
class ReadsPartitions(Protocol):
    """A node whose results depend on every partition of its input (a source tells it).

    ``expect_partitions(partitions)`` is called on the job's event loop by a
    source below which the node is, each time the source is assigned
    partitions that will deliver records; a partition is named as in the
    records' metadata (Kafka: ``(topic, partition)``).
    """

    def expect_partitions(self, partitions: Iterable[Hashable]) -> None: ...


@runtime_checkable
class EndsWithInput(Protocol):
    """A node that holds results until its input is complete (a :class:`~rivermark.Job` tells it).

    ``end_of_input()`` is called once, on the job's event loop, when every
    source is exhausted (not at a stop), before the final checkpoint; it
    returns what ``_emit`` returned for what it passed on.
    """

    def end_of_input(self) -> list[Awaitable[object]] | None: ...


@runtime_checkable
class HoldsWatermark(EndsWithInput, Protocol):
    """An event-time node whose watermark the end of the input moves (``+inf`` by default).

    ``end_watermark`` is where :meth:`end_of_input` moves it; a replay up to
    a checkpoint (``rivermark replay --until EPOCH``) sets it to the live
    run's watermark in that checkpoint, read from the node's state there
    (``state["watermarks"]["watermark"]``), so that the windows the live run
    still held open stay open.
    """

    end_watermark: float

    def get_state(self) -> Any: ...
