"""A checkpointed rivermark Job with its heavy work on a Dask cluster; run as a process.

usage: python dask_job_app.py SCHEDULER_ADDRESS CHECKPOINT OUTPUT N [DATASET_PREFIX]

The graph: ``from_iterable(range(N))`` -> ``scatter`` -> ``map(square_slowly)``
-> ``accumulate(add)`` (its state a future on the cluster) -> ``partition(3)``
(holds futures between records) -> ``gather`` -> ``flatten`` ->
``sink_to_textfile(OUTPUT)``, checkpointed every 0.1 s into the directory
CHECKPOINT, or, with DATASET_PREFIX, into Dask datasets under that prefix.
The crash tests SIGKILL this process at random and at the protocol's fault
points and compare OUTPUT with an uncrashed run.
"""

from __future__ import annotations

import sys
import time

from distributed import Client

from rivermark import Job, Stream
from rivermark.dask.store import DaskDatasetStore


def square_slowly(x: int) -> int:
    time.sleep(0.004)
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def main() -> None:
    address, checkpoint, output, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = Client(address, set_as_default=False)
    source = Stream.from_iterable(range(n), name="numbers")
    (
        source.scatter(client=client)
        .map(square_slowly)
        .accumulate(add, start=0, name="running-sum")
        .partition(3, name="triples")
        .gather(max_inflight=8)
        .flatten()
        .map(str)
        .sink_to_textfile(output, name="out")
    )
    store = DaskDatasetStore(client, prefix=sys.argv[5]) if len(sys.argv) > 5 else checkpoint
    Job(source, checkpoint=store, every="0.1s", keep=3).run()
    client.close()


if __name__ == "__main__":
    main()
