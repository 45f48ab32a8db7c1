"""A scattered accumulate's batch: the records one task folds, and each record's handle to ``gather``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from rivermark.dask.client import _start_fetch
from rivermark.dask.stream import DaskStream

if TYPE_CHECKING:
    import distributed

    from rivermark.dask.tasks import _StepBatch


class _OpenBatch:
    """Records given to a scattered accumulate in one turn of the loop; one task folds them.

    ``future`` is that task's Dask future once submitted (at the end of the
    turn); ``fetch()`` gathers it once for all the records' ``_Part`` handles.
    """

    __slots__ = ("node", "records", "future", "error", "_waiters", "_fetch")

    def __init__(self, node: DaskStream) -> None:
        self.node = node
        self.records: list[object] = []
        self.future: distributed.Future[object] | None = None
        self.error: BaseException | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._fetch: asyncio.Future[tuple[bool, object]] | None = None

    def set_future(self, future: distributed.Future[object]) -> None:
        self.future = future
        self._wake()

    def set_failed(self, error: BaseException) -> None:
        self.error = error
        self._wake()

    def _wake(self) -> None:
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()

    async def fetch(self) -> tuple[bool, object]:
        if self.future is None and self.error is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        if self.error is not None:
            return False, self.error
        if self._fetch is None:
            future = cast("distributed.Future[object]", self.future)  # set: waited for above
            self._fetch = _start_fetch(future.client, future)
        return await asyncio.shield(self._fetch)


class _Part:
    """Record ``index`` of an accumulate batch, as a scattered record on its way to ``gather``."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: _OpenBatch, index: int) -> None:
        self.batch = batch
        self.index = index

    def __repr__(self) -> str:
        return f"{self.batch.records[self.index]!r} (record {self.index} of an accumulate batch)"

    async def value(self) -> tuple[bool, object]:
        ok, value = await self.batch.fetch()
        if not ok:
            return False, value
        out = cast("_StepBatch", value)  # what the batch task returns
        error = out.errors[self.index]
        if error is not None:
            return False, _PartError(error)
        return True, out.results[self.index]


class _PartError(Exception):
    """The user function raised on one record of a batch (the batch task itself succeeded)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
