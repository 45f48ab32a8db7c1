"""Settings of the whole suite: a private temporary directory per process, the groups for -n.

Each pytest process (the only one, or each pytest-xdist worker) gets a
temporary directory of its own, ``TMPDIR`` for its subprocesses and
``tempfile.gettempdir()`` for itself, removed when it ends: what the code
keeps under the temporary directory by default (RocksDB's live state,
``<tmp>/rivermark-state/<job id>``; the Kafka instance slots) is never
shared between tests that run at the same time.

With ``-n N --dist loadscope`` (``scripts/test``), the tests against the
Kafka broker run on one worker, one after the other, against its one
broker, and so do the tests on the Dask cluster; each other integration
test file runs whole on one worker (its module fixtures, such as an
uncrashed reference run, are computed once); unit tests and doctests are
spread one by one (:func:`group_of`).  tests/README.md lists the tiers.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

_own_tmp: Path | None = None


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin is configured
def pytest_configure(config: pytest.Config) -> None:
    global _own_tmp
    # pytest's own temporary root (tmp_path, kept for the last runs) is chosen first
    config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)[:12]
    # the system's temporary directory, also in xdist's workers (which inherit the
    # TMPDIR set below in the controller): their directories are siblings, not
    # nested, so that paths under them stay short (a unix socket's path, such as
    # chromium's profile lock, has at most 107 bytes)
    root = os.environ.setdefault("RIVERMARK_TESTS_TMP_ROOT", tempfile.gettempdir())
    base = Path(root) / f"rivermark-tests-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    _own_tmp = base / f"{run}-{worker}"
    _own_tmp.mkdir(mode=0o700)
    os.environ["TMPDIR"] = str(_own_tmp)
    tempfile.tempdir = str(_own_tmp)
    # The test brokers' JVMs compile with the quick compiler only: a broker lives
    # for a few minutes of small requests, and the optimising compiler's work
    # would not pay for itself.  Measured on 24 Kafka tests: the broker's
    # processor time 31.5 s with both compilers, 18.2 s with this.
    os.environ.setdefault(
        "RIVERMARK_KAFKA_JVM_OPTS", "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if _own_tmp is not None:
        shutil.rmtree(_own_tmp, ignore_errors=True)


def _cpu_seconds() -> float:
    """Processor time of this process and of the subprocesses it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_cpu_at_setup = pytest.StashKey[float]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    item.stash[_cpu_at_setup] = _cpu_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    # the test's processor time (setup to teardown, with the job processes and
    # other subprocesses it ended), a property of its entry in the JUnit report:
    # scripts/test-times sums it per group.  The S3 server (kept for the
    # session) and the Kafka broker (started in the background by
    # scripts/kafka/broker) are not in it; the Dask cluster's time counts in
    # the test after which it stops (integration/conftest.py).
    try:
        return (yield)
    finally:
        start = item.stash.get(_cpu_at_setup, None)
        if start is not None:
            item.user_properties.append(("cpu_s", f"{_cpu_seconds() - start:.3f}"))


def pytest_itemcollected(item: pytest.Item) -> None:
    if "dask_cluster" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.dask)  # every test on the worker's LocalCluster


#: the Kafka test files of the second Kafka group (the rest are the first): two
#: halves of about equal time (``scripts/test-times``), each on one worker
#: with that worker's broker
KAFKA_SECOND_HALF = frozenset(
    {
        "test_outage.py",
        "test_seed0.py",
        "test_eventtime_eos.py",
        "test_faults_dup.py",
        "test_sink.py",
        "test_source.py",
        "test_table_bootstrap.py",
        "test_replay.py",
        "test_job.py",
        "test_eventtime.py",
        "test_start_over.py",
        "test_upgrade_inputs.py",
    }
)


def group_of(nodeid: str) -> str:
    """Which tests run on one worker, one after the other, under ``-n N --dist loadscope``.

    >>> group_of("tests/integration/kafka/test_group.py::test_x[a]")
    'kafka'
    >>> group_of("tests/integration/kafka/test_job.py::test_x[a]")
    'kafka-2'
    >>> group_of("tests/integration/test_replay.py::test_y")
    'tests/integration/test_replay.py'
    >>> group_of("tests/unit/test_steps.py::test_z")
    'tests/unit/test_steps.py::test_z'
    """
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/integration/kafka/"):  # a broker per worker that runs them
        return "kafka-2" if path.rsplit("/", 1)[-1] in KAFKA_SECOND_HALF else "kafka"
    if path.startswith("tests/integration/dask/"):  # one LocalCluster
        return "dask"
    if path.startswith("tests/integration/"):
        return path
    return nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with the scopes of :func:`group_of`."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return Groups(config, log)
