"""A real dask.distributed cluster of worker processes, started by the test session."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import dask
import pytest
from distributed import Client, LocalCluster


@pytest.fixture(scope="session")
def dask_cluster() -> Iterator[LocalCluster]:
    # Tests kill worker processes and the nannies restart them. A LocalCluster
    # also closes a worker's nanny for good when no worker of that name has
    # come back `lost-worker-timeout` after a loss; with two kills of one worker
    # within that time, the first loss's timer fires while the second restart
    # is under way and the cluster is left with one worker. The timer is read
    # when a worker is lost, so the setting holds for the whole session.
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "24h"}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster = LocalCluster(
                n_workers=2,
                processes=True,
                threads_per_worker=1,
                dashboard_address=":0",
                scheduler_port=0,
            )
        try:
            yield cluster
        finally:
            cluster.close()


@pytest.fixture(scope="session")
def client(dask_cluster: LocalCluster) -> Iterator[Any]:
    c = Client(dask_cluster)
    c.wait_for_workers(2)
    try:
        yield c
    finally:
        c.close()
