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


#: the worker's cluster and its client, started by the first test that needs them
_cluster: LocalCluster | None = None
_client: Client | None = None
#: what the cluster's life holds: the configuration below
_held = ExitStack()


def _start_cluster() -> LocalCluster:
    # Tests kill worker processes and the nannies restart them. A LocalCluster
    # also closes a worker's nanny for good when no worker of that name has
    # come back `lost-worker-timeout` after a loss; with two kills of one worker
    # within that time, the first loss's timer fires while the second restart
    # is under way and the cluster is left with one worker. The timer is read
    # when a worker is lost, so the setting holds for the cluster's life.
    _held.enter_context(dask.config.set({"distributed.deploy.lost-worker-timeout": "24h"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",
            scheduler_port=0,
        )


@pytest.fixture(scope="module")  # what module fixtures use; its life: below
def dask_cluster() -> LocalCluster:
    """One cluster for the tests of this folder, closed after the last of them.

    The tests of this folder run one after the other on one pytest worker
    (tests/conftest.py); an idle cluster's heartbeats take a tenth of a core,
    which the rest of the run needs, so it does not live on until the session
    ends.
    """
    global _cluster
    if _cluster is None:
        _cluster = _start_cluster()
    return _cluster


@pytest.fixture(scope="module")
def client(dask_cluster: LocalCluster) -> Any:
    global _client
    if _client is None:
        _client = Client(dask_cluster)
        _client.wait_for_workers(2)
    return _client


def _close() -> None:
    global _cluster, _client
    client, cluster, _client, _cluster = _client, _cluster, None, None
    if client is not None:
        client.close()
    if cluster is not None:
        cluster.close()
    _held.close()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or _HERE not in nextitem.path.parents:
        _close()  # the worker's last test of this folder


def pytest_sessionfinish() -> None:
    _close()  # a session cut short
