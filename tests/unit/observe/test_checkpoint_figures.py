"""One definition of a checkpoint's end-to-end, write and pause figures: the manifest's,
shown the same by the job's metrics, the page's readings, Prometheus and the history."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.tools.inspection import list_checkpoints
from rivermark.observe.prometheus import collect_families
from rivermark.observe.ui import snapshot_json


def slow(x: int) -> int:
    if x % 200 == 0:
        time.sleep(0.01)
    return x


def test_the_page_prometheus_and_the_list_show_the_manifests_figures(tmp_path: Path) -> None:
    source = Stream.from_iterable(range(3_000), name="numbers")
    source.map(slow, name="slow").accumulate(lambda a, x: a + x, start=0, name="sum").sink(
        lambda x: None, name="drop"
    )
    # background writes between the first and the final (blocking) checkpoint
    job = Job(source, checkpoint=tmp_path, every_batches=500)
    job.run()
    written = list(job.checkpoints)
    assert len(written) >= 4
    kept = {r["epoch"]: r for r in list_checkpoints(LocalDirectoryStore(tmp_path))}
    for c in written:
        row = kept[c.epoch]
        assert (c.duration, c.write, c.pause) == (row["duration"], row["write"], row["pause"])
        # each figure is part of the end-to-end one
        assert 0 < c.write <= c.duration and 0 <= c.pause <= c.duration, c
    page = snapshot_json(job.metrics.read(), job)["checkpoints"]
    assert [(r["duration"], r["write"], r["pause"]) for r in page] == [
        (c.duration, c.write, c.pause) for c in written
    ]
    families = {f.name: f for f in collect_families(job.metrics)}
    for figure in ("duration", "write", "pause"):
        fam = families[f"rivermark_checkpoint_{figure}_seconds"]
        total = next(s.value for s in fam.samples if s.name.endswith("_sum"))
        assert total == pytest.approx(sum(getattr(c, figure) for c in written))
