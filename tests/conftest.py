"""Settings of the whole suite: a private temporary directory per process, the groups for -n.

Each pytest process (the only one, or each pytest-xdist worker) gets a
temporary directory of its own, ``TMPDIR`` for its subprocesses and
``tempfile.gettempdir()`` for itself, removed when it ends: what the code
keeps under the temporary directory by default (RocksDB's live state,
``<tmp>/rivermark-state/<job id>``; the Kafka instance slots) is never
shared between tests that run at the same time.

With ``-n`` and ``--dist loadgroup`` (``scripts/test``), the tests against
the Kafka broker run on one worker, one after the other, against its one
broker; each other integration test file runs whole on one worker (its
module fixtures, such as an uncrashed reference run, are computed once);
unit tests and doctests are spread one by one.  tests/README.md lists the
tiers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
_INTEGRATION = _HERE / "integration"
_own_tmp: Path | None = None


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin is configured
def pytest_configure(config: pytest.Config) -> None:
    global _own_tmp
    # pytest's own temporary root (tmp_path, kept for the last runs) is chosen first
    config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)[:12]
    base = Path(tempfile.gettempdir()) / f"rivermark-tests-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    _own_tmp = base / f"{run}-{worker}"
    _own_tmp.mkdir(mode=0o700)
    os.environ["TMPDIR"] = str(_own_tmp)
    tempfile.tempdir = str(_own_tmp)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _own_tmp is not None:
        shutil.rmtree(_own_tmp, ignore_errors=True)


@pytest.hookimpl(trylast=True)  # after the kafka folder's conftest marked its tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if "dask_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.dask)  # every test on the session's LocalCluster
        if item.get_closest_marker("kafka") is not None:
            group = "kafka"
        elif _INTEGRATION in path.parents:
            group = str(path.relative_to(_HERE))
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
