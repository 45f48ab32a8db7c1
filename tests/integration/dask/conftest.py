"""A real dask.distributed cluster of worker processes, for the tests of this folder."""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import Client, LocalCluster

_HERE = Path(__file__).parent


def _start_cluster() -> tuple[LocalCluster, ExitStack]:
    # Tests kill worker processes and the nannies restart them. A LocalCluster
    # also closes a worker's nanny for good when no worker of that name has
    # come back `lost-worker-timeout` after a loss; with two kills of one worker
    # within that time, the first loss's timer fires while the second restart
    # is under way and the cluster is left with one worker. The timer is read
    # when a worker is lost, so the setting holds for the cluster's life.
    held = ExitStack()
    held.enter_context(dask.config.set({"distributed.deploy.lost-worker-timeout": "24h"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",
            scheduler_port=0,
        )
    return cluster, held


def _stop_cluster(started: tuple[LocalCluster, ExitStack]) -> None:
    cluster, held = started
    cluster.close()
    held.close()


def _start_client(cluster: LocalCluster) -> Client:
    client = Client(cluster)
    client.wait_for_workers(2)
    return client


@pytest.fixture(scope="module")  # what module fixtures use; its life: FolderServices
def dask_cluster(folder_services: Any) -> LocalCluster:  # tests/integration/conftest.py's
    """One cluster for the tests of this folder, closed after the last of them.

    The tests of this folder run one after the other on one pytest worker
    (tests/conftest.py).
    """
    cluster, _ = folder_services.get(_HERE, "dask-cluster", _start_cluster, _stop_cluster)
    return cluster


@pytest.fixture(scope="module")
def client(dask_cluster: LocalCluster, folder_services: Any) -> Client:
    return folder_services.get(
        _HERE, "dask-client", lambda: _start_client(dask_cluster), Client.close
    )
