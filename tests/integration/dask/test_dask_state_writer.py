"""``read`` and ``write_savepoint`` round trip of scattered state, on a real LocalCluster.

A Dask ``accumulate`` keeps its state on the cluster (a future) and a
scattered ``partition`` holds futures of the records it waits with: a
checkpoint fetches their values, ``read`` gives them as Python objects, and a
savepoint written from them restores onto the cluster; the resumed output
equals an uninterrupted computation in plain Python.
"""

from __future__ import annotations

import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from distributed import Client

from rivermark import Job, Stream
from rivermark.checkpoint import LocalDirectoryStore, read, write_savepoint
from rivermark.checkpoint.state import codec

# the workers cannot import this test module: ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.dask

N = 60
#: the first run stops right after this record (the partition then holds one of a triple)
STOP = 37


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def build(client: Client, jobs: list[Job] | None = None) -> tuple[Stream, list[Any]]:
    source = Stream.from_iterable(range(N), name="numbers")
    sums = source.scatter(client=client).map(square).accumulate(add, start=0, name="running-sum")
    out = sums.partition(3, name="triples").gather().flatten().sink_to_list(name="out")
    # the same graph in every run: only what the stopper does differs
    source.sink(lambda x: jobs is not None and x == STOP and jobs[0].stop())
    return source, out


@pytest.mark.parametrize("as_pandas", [True, False], ids=["pandas", "python"])
def test_scattered_state_round_trips_through_read_and_write(
    client: Client, tmp_path: Path, as_pandas: bool
) -> None:
    jobs: list[Job] = []
    source, _ = build(client, jobs)
    jobs.append(Job(source, checkpoint=str(tmp_path / "first"), every=None))
    jobs[0].run()
    old = read(tmp_path / "first", as_pandas=as_pandas)
    pos = old.positions["numbers"]
    assert STOP < pos < N
    # the values, fetched from the cluster: the sum so far, the records of an open triple
    assert old.state["running-sum"] == {"state": sum(x * x for x in range(pos))}
    held = [r.value for _, items in old.state["triples"]["buffers"] for r in items]
    assert held and len(held) == pos % 3

    expected = list(accumulate(x * x for x in range(N)))
    for state, same in [(old.state, True), ({"out": old.state["out"]}, False)]:
        source, out = build(client)
        sp = tmp_path / f"sp-{same}"
        write_savepoint(sp, source, state=state, positions=old.positions)
        store = LocalDirectoryStore(sp)
        blobs = [store.read_state(1, n) for n in store.read_manifest(1).state]
        assert not any(map(codec.has_pickle, blobs))  # data: restored without a key
        Job(
            source, checkpoint=str(tmp_path / f"resumed-{same}"), every=None, from_savepoint=sp
        ).run()
        # without the scattered state (the sum, the open triple) the output differs
        assert (out == expected) is same, out
