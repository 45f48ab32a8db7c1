"""The streamz "Dask" documentation example: ``scatter().map().buffer().gather()``.

Uses a small in-process Dask cluster (one worker, threads), started by the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dask.distributed import Client

from rivermark import Stream
from rivermark.testing import wait_for


def inc(x: int) -> int:
    return x + 1


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    c = Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None)
    try:
        yield c
    finally:
        c.close()


@pytest.mark.dask
def test_scatter_map_buffer_gather(client: Any) -> None:
    source = Stream()
    L = source.scatter().map(inc).buffer(4).gather().sink_to_list()
    for i in range(5):
        source.emit(i)
    wait_for(lambda: len(L) == 5, timeout=20)
    assert L == [1, 2, 3, 4, 5]


@pytest.mark.dask
def test_scatter_accumulate_gather(client: Any) -> None:
    source = Stream()
    L = source.scatter().accumulate(lambda acc, x: acc + x, start=0).gather().sink_to_list()
    for i in range(5):
        source.emit(i)
    wait_for(lambda: len(L) == 5, timeout=20)
    assert L == [0, 1, 3, 6, 10]
