"""A job's listeners hear its events in order; its options are one checked value."""

from __future__ import annotations

import errno
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointWriteError, Job, LocalDirectoryStore, Manifest
from rivermark.checkpoint.protocol.listeners import CheckpointFailure, CheckpointInfo, JobListener
from rivermark.checkpoint.protocol.options import JobOptions
from rivermark.checkpoint.protocol.runstate import RunState
from rivermark.errors import ConfigurationError
from rivermark.testing import wait_for

from .conftest import total


class Recorder(JobListener):
    """Writes down every event it hears, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    async def started(self, job: Job) -> None:
        self.events.append(("started", job.running, job.epoch))

    def checkpoint_begun(self, epoch: int, savepoint: bool) -> None:
        self.events.append(("begun", epoch, savepoint))

    def node_counts(self, epoch: int, counts: Mapping[str, Sequence[int]]) -> None:
        self.events.append(("counts", epoch, list(counts["sum"][:2])))

    def checkpoint_completed(self, info: CheckpointInfo) -> None:
        self.events.append(("completed", info.epoch, info.kind))

    def checkpoint_failed(self, failure: CheckpointFailure) -> None:
        self.events.append(("failed", failure.epoch))

    async def stopped(self, job: Job, state: RunState) -> None:
        self.events.append(("stopped", state.state, state.reason))


def test_a_listener_hears_start_each_checkpoint_and_the_stop_in_order(tmp_path: Path) -> None:
    root = Stream(name="manual")
    out = root.accumulate(total, start=0, name="sum").sink_to_list()
    job = Job(root, checkpoint=tmp_path, every=None)
    heard = Recorder()
    job.add_listener(heard)
    t = threading.Thread(target=job.run)
    t.start()
    wait_for(lambda: job.running)
    for x in range(3):
        root.emit(x)
    assert job.checkpoint() == 2
    root.emit(10)
    assert job.stop(timeout=20)
    t.join(20)
    assert out == [0, 1, 3, 13]
    assert heard.events == [
        ("started", False, 0),  # recovered, before the sources start
        ("begun", 1, False),  # the checkpoint of the fresh start
        ("counts", 1, [0, 0]),
        ("completed", 1, "full"),
        ("begun", 2, False),  # job.checkpoint()
        ("counts", 2, [3, 3]),
        ("completed", 2, "full"),
        ("begun", 3, False),  # the final checkpoint of the stop
        ("counts", 3, [4, 4]),
        ("completed", 3, "full"),
        ("stopped", "stopped", "Job.stop()"),
    ]
    assert [c.epoch for c in job.checkpoints] == [1, 2, 3]


class FullStore(LocalDirectoryStore):
    """A real directory store whose second checkpoint meets a full disk."""

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        if manifest.epoch == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write_checkpoint(manifest, states)


def test_a_failed_write_is_heard_before_the_failed_end(tmp_path: Path) -> None:
    source = Stream.from_iterable(range(5), name="numbers")
    source.accumulate(total, start=0, name="sum").sink_to_list()
    job = Job(source, checkpoint=FullStore(tmp_path), every=None)
    heard = Recorder()
    job.add_listener(heard)
    with pytest.raises(CheckpointWriteError, match=re.escape("checkpoint 2 could not be written")):
        job.run()
    assert heard.events == [
        ("started", False, 0),
        ("begun", 1, False),
        ("counts", 1, [0, 0]),
        ("completed", 1, "full"),
        ("begun", 2, False),  # the final checkpoint at the end of input
        ("counts", 2, [5, 5]),
        ("failed", 2),
        ("stopped", "failed", heard.events[-1][2]),
    ]
    assert "No space left on device" in str(heard.events[-1][2])
    assert (job.checkpoints_written, job.checkpoints_failed) == (1, 1)


def test_a_listener_that_raises_is_detached_and_the_job_runs_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(JobListener):
        calls = 0

        def checkpoint_completed(self, info: CheckpointInfo) -> None:
            Broken.calls += 1
            raise RuntimeError("listener bug")

    source = Stream.from_iterable(range(5), name="numbers")
    out = source.accumulate(total, start=0, name="sum").sink_to_list()
    job = Job(source, checkpoint=tmp_path, every=None)
    job.add_listener(Broken())
    with caplog.at_level(logging.WARNING):
        job.run()
    assert out[-1] == 10 and job.checkpoints_written == 2
    assert Broken.calls == 1  # detached after the first
    assert "raised in checkpoint_completed and is detached" in caplog.text


def test_the_observe_layer_attaches_what_the_options_ask_for(tmp_path: Path) -> None:
    # rivermark.checkpoint.Job is rivermark.Job: importing either attaches the observe layer
    from rivermark.observe.metrics import Metrics
    from rivermark.observe.prometheus import MetricsServer
    from rivermark.observe.ui import UiServer

    plain = Job(Stream.from_iterable([1]), checkpoint=tmp_path / "a")
    assert isinstance(plain.metrics, Metrics)
    assert (plain.listener("metrics_port"), plain.listener("ui")) == (None, None)
    assert (plain.metrics_url, plain.ui_url) == (None, None)
    watched = Job(Stream.from_iterable([1]), checkpoint=tmp_path / "b", metrics_port=0, ui=0)
    endpoint, page = watched.listener("metrics_port"), watched.listener("ui")
    assert isinstance(endpoint, MetricsServer) and endpoint.metrics is watched.metrics
    assert isinstance(page, UiServer) and page.job is watched
    assert watched.metrics_url == "http://127.0.0.1:0/metrics"


def test_only_a_job_listener_can_be_added(tmp_path: Path) -> None:
    job = Job(Stream.from_iterable([1]), checkpoint=tmp_path, every=None)
    with pytest.raises(ConfigurationError, match=re.escape("is not a JobListener; subclass")):
        job.add_listener(print)  # type: ignore[arg-type]


#: the keywords of Job (and the flags of ``rivermark run``) before they became JobOptions
JOB_KEYWORDS = (
    "checkpoint", "every", "every_batches", "keep", "exactly_once", "allow_new_nodes",
    "on_error", "from_scratch", "from_savepoint", "background", "compact_every",
    "metrics_port", "metrics_addr", "ui", "ui_addr", "checkpoint_key", "trust_store",
    "rename", "allow_dropped_state", "migrate", "state", "state_dir", "state_cache",
)  # fmt: skip


def test_the_options_are_the_keywords_job_always_took_with_their_defaults(
    tmp_path: Path,
) -> None:
    assert JobOptions.names() == JOB_KEYWORDS
    defaults = JobOptions()
    assert (defaults.checkpoint, defaults.every, defaults.keep, defaults.state) == (
        "ckpt/job1",
        "2s",
        10,
        "memory",
    )
    job = Job(Stream.from_iterable([1]), checkpoint=tmp_path, every="200ms", keep=3)
    assert job.options == JobOptions(checkpoint=tmp_path, every="200ms", keep=3)
    assert (job.interval, job.keep) == (0.2, 3)
    with pytest.raises(FrozenInstanceError):
        job.options.keep = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"keep": 0}, "Job: keep must be an integer >= 1, got 0; pass e.g. 10"),
        (
            {"metrics_port": -1},
            "metrics_port must be a TCP port number (0-65535), got -1; pass e.g. 9100",
        ),
        ({"ui": "x"}, "ui must be a TCP port number (0-65535), got 'x'; pass e.g. ui=8080"),
        (
            {"from_scratch": True, "from_savepoint": "sp"},
            "Job: from_scratch and from_savepoint exclude each other; pass one of them",
        ),
    ],
)
def test_a_bad_option_is_refused_in_one_line_by_the_job_and_the_options(
    tmp_path: Path, option: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"^{re.escape(message)}$"):
        Job(Stream.from_iterable([1]), checkpoint=tmp_path, **option)
    with pytest.raises(ConfigurationError, match=f"^{re.escape(message)}$"):
        JobOptions(**option)  # type: ignore[arg-type]


def test_a_misspelt_option_is_named_with_the_one_meant() -> None:
    source = Stream.from_iterable([1])
    with pytest.raises(
        TypeError, match=re.escape("Job: no option 'checkpont'; did you mean 'checkpoint'?")
    ):
        Job(source, checkpont="x")
