"""``Stream.from_iterable``: emit the items of an iterable."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from ..core.node import Stream
from ..errors import ConfigurationError
from .base import Source

logger = logging.getLogger(__name__)

__all__ = ["FromIterable"]

#: yield to the event loop after this many records emitted without waiting
_YIELD_EVERY = 32


@Stream.register_api(staticmethod, attribute_name="from_iterable")
class FromIterable(Source):
    """Emit every item of ``iterable``, then finish.

    Position: the index of the *next* item to emit (``0`` before the first).
    The source is replayable when ``iterable`` can be iterated again (a list,
    a range, a tuple): ``seek(k)`` then skips the first ``k`` items.  A one-shot
    iterator (a generator) is not replayable; a restart continues it where it
    stopped.

    >>> from rivermark.testing import wait_for
    >>> source = Stream.from_iterable(range(3))
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: source.finished); L
    [0, 1, 2]
    >>> source.position()
    3
    """

    def __init__(self, iterable: Iterable[Any], **kwargs: Any) -> None:
        try:
            it = iter(iterable)
        except TypeError:
            raise ConfigurationError(
                f"from_iterable: iterable must be iterable, got {iterable!r} of type "
                f"{type(iterable).__name__}; pass e.g. a list or a generator"
            ) from None
        self._iterable = iterable
        self.replayable = it is not iterable  # type: ignore[misc]
        self._iterator: Iterator[Any] | None = None if self.replayable else it
        super().__init__(**kwargs)
        self._position = 0

    def seek(self, position: Any) -> None:
        """Resume at item ``position`` (the number of items already emitted)."""
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ConfigurationError(
                f"from_iterable: position must be an integer >= 0, got {position!r}; "
                "pass a value that position() returned"
            )
        self._position = position

    async def run(self) -> None:
        index = self._position or 0
        if self.replayable:
            it: Iterator[Any] = itertools.islice(iter(self._iterable), index, None)
        else:
            assert self._iterator is not None
            it = self._iterator
        unyielded = 0
        while not self.stopped:
            try:
                x = next(it)
            except StopIteration:
                break
            index += 1
            await self._emit_record(x, next_position=index)
            unyielded += 1
            if unyielded >= _YIELD_EVERY:
                unyielded = 0
                await asyncio.sleep(0)

    def state_signature(self) -> str:
        return "FromIterable()"
