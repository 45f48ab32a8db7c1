"""Kill -9 a job writing through ``to_parquet``; the dataset must equal an uncrashed run's.

The job (``apps/lake_app.py``) writes Hive-partitioned, rolled Parquet files
into a local directory and into a bucket of a real S3 server (moto): SIGKILL
at random, then once at every checkpoint fault point, restarted until it
finishes.  A reader polling the dataset (pyarrow, which skips ``_`` names)
through the whole kill loop must never see a row that the final dataset
does not hold, and the final dataset holds every record exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark.testing import wait_for
from rivermark.testing.crash import run_with_crashes
from rivermark.testing.faults import FAULT_POINTS
from rivermark.testing.s3_server import S3Server

from .lakeread import Poller, lake_cmd, lake_env, parquet_rows

pytestmark = pytest.mark.crash

APP = str(Path(__file__).parents[1] / "apps" / "lake_app.py")
N = 3000
EXPECTED = [(i, f"k{i % 37}", i, i % 3) for i in range(N)]


@pytest.fixture(params=["local", "s3"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[str, S3Server | None, dict[str, str]]:
    """(the dataset's URL, the S3 server or None, the job's environment)."""
    if request.param == "local":
        return str(tmp_path / "out"), None, {}
    server: S3Server = request.getfixturevalue("s3_server")
    return f"s3://{server.new_bucket()}/data/out", server, server.env()


def _check(url: str, s3: S3Server | None, poller: Poller, summary: str) -> None:
    final = parquet_rows(url, s3)
    assert final == EXPECTED, summary  # every record once: ids are unique
    assert poller.reads > 0
    assert poller.seen <= set(final), "a reader saw rows that later disappeared"


def test_random_kills_leave_the_dataset_of_an_uncrashed_run(
    target: tuple[str, S3Server | None, dict[str, str]], tmp_path: Path
) -> None:
    url, s3, base = target
    ckpt = tmp_path / "ckpt"
    read: Callable[[], list[tuple[Any, ...]]] = lambda: parquet_rows(url, s3)  # noqa: E731
    with Poller(read) as poller:
        report = run_with_crashes(
            lake_cmd(APP, str(ckpt)),
            env=lake_env("parquet", url, "append", N, work=1500, base=base or None,
                         paced_while_killed=True),
            kills=5, min_delay=0.3, max_delay=2.0, seed=11,
            ready=lambda pid: (ckpt / "LOCK").exists(),
        )  # fmt: skip
        wait_for(lambda: poller.reads > 0, timeout=30, what="a read of the dataset")
    assert report.completed and report.kills > 0, report.summary()
    _check(url, s3, poller, report.summary())


@pytest.mark.parametrize("point", [*(f"{p}:3" for p in FAULT_POINTS), "after-manifest:1"])
def test_kill_at_each_fault_point_leaves_the_dataset_of_an_uncrashed_run(
    target: tuple[str, S3Server | None, dict[str, str]], point: str, tmp_path: Path
) -> None:
    url, s3, base = target
    ckpt = tmp_path / "ckpt"
    with Poller(lambda: parquet_rows(url, s3)) as poller:
        report = run_with_crashes(
            [*lake_cmd(APP, str(ckpt)), "--every-batches", "500"],
            env=lake_env("parquet", url, "append", N, work=50, base=base or None),
            kills=0, fault_points=[point], timeout=120,
        )  # fmt: skip
        wait_for(lambda: poller.reads > 0, timeout=30, what="a read of the dataset")
    assert report.fault_kills == {point: 1}, report.summary()
    _check(url, s3, poller, report.summary())
