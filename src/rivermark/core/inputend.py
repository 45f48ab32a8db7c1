"""The end of a job's input, for nodes that hold results until it is complete.

An event-time node (:class:`rivermark.operators.eventtime.Timestamps`) holds
windows open until its watermark passes them; at the end of a bounded input
nothing more will move the watermark, so the job tells the node that the
input is complete and the node emits what it holds.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol, runtime_checkable

__all__ = ["EndsWithInput"]


@runtime_checkable
class EndsWithInput(Protocol):
    """A node that holds results until its input is complete (a :class:`~rivermark.Job` tells it).

    ``end_of_input()`` is called once, on the job's event loop, when every
    source is exhausted (not at a stop), before the final checkpoint; it
    returns what ``_emit`` returned for what it passed on.
    """

    def end_of_input(self) -> list[Awaitable[Any]] | None: ...
