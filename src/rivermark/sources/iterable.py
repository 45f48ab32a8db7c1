"""``Stream.from_iterable``: emit the items of an iterable."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Sized
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.errors import ConfigurationError
from rivermark.sources.base import TIME_SLICE, Source

logger = logging.getLogger(__name__)

__all__ = ["FromIterable"]

#: most items read ahead of the emit (the chunk grows up to this while items come fast)
_MAX_CHUNK = 1024
#: what an iterable that ended gives
_END = object()


@Stream.register_api(staticmethod, attribute_name="from_iterable")
class FromIterable(Source[int]):
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

    def __init__(self, iterable: Iterable[object], **kwargs: Unpack[NodeOptions]) -> None:
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
        #: items taken from a one-shot iterator but not emitted yet (a stop came first)
        self._pending: list[Any] = []
        #: the index the source stops before (:meth:`stop_at`; None: at the end)
        self._stop: int | None = None
        super().__init__(**kwargs)
        self._position = 0

    def seek(self, position: int) -> None:
        """Resume at item ``position`` (the number of items already emitted).

        A position past the end of an iterable with a length is refused
        (:meth:`check_position`); one past the end of another replayable
        iterable is refused when the source runs.
        """
        self._check_index(position, restoring=True)
        self._position = position

    def check_position(self, position: int) -> None:
        """Refuse a position that is not an index >= 0, or past the end of the iterable."""
        self._check_index(position, restoring=False)

    def _check_index(self, position: object, restoring: bool) -> None:
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ConfigurationError(
                f"from_iterable: position must be an integer >= 0, got {position!r}; "
                "pass a value that position() returned"
            )
        if self.replayable and isinstance(self._iterable, Sized):
            self._refuse_past_end(position, len(self._iterable), restoring)

    def _refuse_past_end(self, position: int, length: int, restoring: bool) -> None:
        if position <= length:
            return
        if restoring:
            raise ConfigurationError(
                f"{self.display_name()}: the position to resume at, item {position}, is past "
                f"the end of its iterable ({length} items): the source would emit nothing. "
                "Pass the items the checkpoint was taken on, or start over (--from-scratch, "
                "or a new checkpoint location)"
            )
        raise ConfigurationError(
            f"{self.display_name()}: position {position} is past the end of its iterable "
            f"({length} items): the source would emit nothing; give the index of the next "
            f"item to emit, from 0 to {length}"
        )

    def stop_at(self, position: int) -> None:
        """Emit the items before index ``position`` only (a replayable iterable)."""
        if not self.replayable:
            raise ConfigurationError(
                f"{self.display_name()} cannot stop at a position: it reads a one-shot "
                "iterator, which cannot be read again from a checkpoint"
            )
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ConfigurationError(
                f"from_iterable: stop_at needs an index >= 0 that position() returned, "
                f"got {position!r}"
            )
        self._stop = position

    def stop_at_input_end(self) -> None:
        """Nothing to do: the source finishes after the last item."""

    def _advance(self, k: int) -> None:
        self._position = (self._position or 0) + k

    async def run(self) -> None:
        index = self._position or 0
        if self.replayable:
            it: Iterator[Any] = iter(self._iterable)
            if index and next(itertools.islice(it, index - 1, None), _END) is _END:
                # fewer items than the position skips (an iterable without a length)
                length = len(list(itertools.islice(iter(self._iterable), index)))
                self._refuse_past_end(index, length, restoring=True)
            stop = None if self._stop is None else max(0, self._stop - index)
            it = itertools.islice(it, stop)
            chunk: list[Any] = []
        else:
            assert self._iterator is not None
            it = self._iterator
            chunk, self._pending = self._pending, []
        size = 16
        try:
            while not self.stopped:
                if not chunk:
                    # read ahead while items come fast; a slow iterator is read a few at a time
                    t0 = time.perf_counter()
                    chunk = list(itertools.islice(it, size))
                    if not chunk:
                        break
                    if time.perf_counter() - t0 < TIME_SLICE / 4:
                        size = min(size * 2, _MAX_CHUNK)
                    else:
                        size = max(size // 2, 1)
                before = self._position or 0
                try:
                    await self._emit_chunk(chunk, self._advance)
                finally:
                    # what the position passed is emitted (also when cancelled by a stop)
                    chunk = chunk[(self._position or 0) - before :]
        finally:
            if chunk and not self.replayable:
                self._pending = chunk  # a one-shot iterator: emitted by the next run

    def state_signature(self) -> str:
        return "FromIterable()"
