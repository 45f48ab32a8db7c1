"""Kill -9 a job writing through ``to_delta``; the table must equal an uncrashed run's.

The job (``apps/lake_app.py``) writes a Delta table, local and in a bucket of
a real S3 server (moto), in append mode (every record a row, partitioned)
and merge mode (a running total per key, deleted by tombstones): SIGKILL at
random, then once at every checkpoint fault point, restarted until it
finishes.  A reader (DuckDB over deltalake's view of the latest version)
polling through the whole kill loop must never see a row that the final
table does not hold (append), nor a key's row go back to an older record's,
nor a total that no prefix of the input gives (merge).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rivermark.testing import wait_for
from rivermark.testing.crash import run_uncrashed, run_with_crashes
from rivermark.testing.faults import FAULT_POINTS
from rivermark.testing.s3_server import S3Server

from .lakeread import Poller, delta_rows, lake_cmd, lake_env, valid_totals

pytestmark = pytest.mark.crash

APP = str(Path(__file__).parents[1] / "apps" / "lake_app.py")
N = 3000
KEYS = 37
EXPECTED = [(i, f"k{i % KEYS}", i, i % 3) for i in range(N)]


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """(the table's URL, the job's environment) in a new directory or bucket."""
    if request.param == "local":
        return str(tmp_path / "table"), {}
    server: S3Server = request.getfixturevalue("s3_server")
    request.getfixturevalue("s3_env")  # this process reads the table too
    mp: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    mp.setenv("AWS_ALLOW_HTTP", "true")  # deltalake: moto's server speaks http
    env = server.env()
    env["AWS_ALLOW_HTTP"] = "true"
    return f"s3://{server.new_bucket()}/table", env


def _final_totals() -> list[tuple[Any, ...]]:
    sums: dict[str, tuple[int, int]] = {}
    for i in range(N):
        k = f"k{i % KEYS}"
        if (i // KEYS) % 13 == 12:
            sums.pop(k, None)
            continue
        sums[k] = (sums.get(k, (0, 0))[0] + i, i)
    return sorted((k, t, last) for k, (t, last) in sums.items())


class MergePoller(Poller):
    """A poller that also records every time a key's row went back to an older record."""

    def __init__(self, url: str) -> None:
        self.newest: dict[str, int] = {}
        self.went_back: list[tuple[str, int, int]] = []
        super().__init__(lambda: self._watch(delta_rows(url, "merge")))

    def _watch(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        for k, _total, last in rows:
            if last < self.newest.get(k, -1):
                self.went_back.append((k, self.newest[k], last))
            self.newest[k] = max(last, self.newest.get(k, -1))
        return rows


def _check(url: str, mode: str, poller: Poller, summary: str) -> None:
    final = delta_rows(url, mode)
    assert poller.reads > 0
    if mode == "append":
        assert final == EXPECTED, summary  # every record once: ids are unique
        assert poller.seen <= set(final), "a reader saw rows that later disappeared"
        return
    assert final == _final_totals(), summary
    valid = valid_totals(N, KEYS)
    bad = [(k, t) for k, t, _ in poller.seen if t not in valid[k]]
    assert not bad, f"a reader saw totals that no prefix of the input gives: {bad[:5]}"
    assert isinstance(poller, MergePoller) and not poller.went_back, (
        f"a reader saw rows that later disappeared: {poller.went_back[:5]}"  # type: ignore[attr-defined]
    )


def _poller(url: str, mode: str) -> Poller:
    return Poller(lambda: delta_rows(url, mode)) if mode == "append" else MergePoller(url)


def test_an_uncrashed_run_writes_the_expected_table(tmp_path: Path) -> None:
    url = str(tmp_path / "table")
    run_uncrashed(lake_cmd(APP, str(tmp_path / "ckpt")), env=lake_env("delta", url, "merge", N))
    assert delta_rows(url, "merge") == _final_totals()


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_random_kills_leave_the_table_of_an_uncrashed_run(
    target: tuple[str, dict[str, str]], mode: str, tmp_path: Path
) -> None:
    url, base = target
    ckpt = tmp_path / "ckpt"
    with _poller(url, mode) as poller:
        report = run_with_crashes(
            lake_cmd(APP, str(ckpt)),
            env=lake_env("delta", url, mode, N, work=1500, base=base or None,
                         paced_while_killed=True),
            kills=5, min_delay=0.3, max_delay=2.0, seed=13,
            ready=lambda pid: (ckpt / "LOCK").exists(),
        )  # fmt: skip
        wait_for(lambda: poller.reads > 0, timeout=30, what="a read of the table")
    assert report.completed and report.kills > 0, report.summary()
    _check(url, mode, poller, report.summary())


@pytest.mark.parametrize("point", [*(f"{p}:3" for p in FAULT_POINTS), "after-manifest:1"])
@pytest.mark.parametrize("mode", ["append", "merge"])
def test_kill_at_each_fault_point_leaves_the_table_of_an_uncrashed_run(
    target: tuple[str, dict[str, str]], mode: str, point: str, tmp_path: Path
) -> None:
    url, base = target
    ckpt = tmp_path / "ckpt"
    with _poller(url, mode) as poller:
        report = run_with_crashes(
            [*lake_cmd(APP, str(ckpt)), "--every-batches", "500"],
            env=lake_env("delta", url, mode, N, work=50, base=base or None),
            kills=0, fault_points=[point], timeout=180,
        )  # fmt: skip
        wait_for(lambda: poller.reads > 0, timeout=30, what="a read of the table")
    assert report.fault_kills == {point: 1}, report.summary()
    _check(url, mode, poller, report.summary())
