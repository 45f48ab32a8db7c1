"""PartitionedJob refuses, with one line, what cannot be split by input partition."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import rivermark.kafka  # noqa: F401
from rivermark import Stream
from rivermark.errors import ConfigurationError
from rivermark.kafka import PartitionedJob, PartitionSource

PARAMS = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


def _make(build: Any, tmp_path: Path, **kwargs: Any) -> PartitionedJob:
    return PartitionedJob("events", PARAMS, build, checkpoint=tmp_path, **kwargs)


def test_a_second_input_is_refused(tmp_path: Path) -> None:
    def build(source: Stream) -> Stream:
        return source.zip(Stream()).sink(print)

    with pytest.raises(
        ConfigurationError,
        match=re.escape("the graph of build test_a_second_input_is_refused.<locals>.build has "),
    ) as info:
        _make(build, tmp_path)
    assert "another input besides the partition's source" in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_a_second_source_is_refused(tmp_path: Path) -> None:
    other = Stream.from_iterable([1, 2])

    def build(source: Stream) -> Stream:
        return source.combine_latest(other).sink(print)

    with pytest.raises(ConfigurationError, match="another input besides the partition's source"):
        _make(build, tmp_path)


def test_a_graph_not_built_on_the_source_is_refused(tmp_path: Path) -> None:
    elsewhere = Stream.from_iterable([1])

    with pytest.raises(ConfigurationError, match="which is not connected to the source"):
        _make(lambda source: elsewhere.sink(print), tmp_path)
    with pytest.raises(ConfigurationError, match="must return a node of the graph"):
        _make(lambda source: None, tmp_path)


def test_a_shared_transactional_id_is_refused(tmp_path: Path) -> None:
    def build(source: Stream) -> Stream:
        return source.to_kafka("out", PARAMS, exactly_once=True, transactional_id="tx")

    with pytest.raises(ConfigurationError, match=re.escape("transactional_id='tx'")):
        _make(build, tmp_path)


def test_options_a_partitioned_job_decides_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("stop_at_end=True is not supported")):
        _make(lambda s: s.sink(print), tmp_path, source_options={"stop_at_end": True})
    with pytest.raises(ConfigurationError, match=re.escape("unknown option 'ui'")):
        _make(lambda s: s.sink(print), tmp_path, ui=0)
    with pytest.raises(ConfigurationError, match="'group.id' every process shares"):
        PartitionedJob("events", {"bootstrap.servers": "x"}, lambda s: s, checkpoint=tmp_path)


def test_each_task_has_its_own_store_and_reads_one_partition(tmp_path: Path) -> None:
    job = _make(lambda s: s.sink(print), tmp_path)
    assert job.task_location("events", 5) == str(tmp_path / "tasks" / "events-5")
    url = PartitionedJob("e", PARAMS, lambda s: s, checkpoint="s3://b/app/")
    assert url.task_location("e", 0) == "s3://b/app/tasks/e-0"
    src = PartitionSource("events", 5, PARAMS)
    # a task's checkpoint is refused for another partition's task
    assert src.state_signature() != PartitionSource("events", 4, PARAMS).state_signature()


def test_each_task_keeps_its_rocksdb_state_in_a_directory_of_its_own(tmp_path: Path) -> None:
    job = _make(
        lambda s: s.sink(print), tmp_path, state="rocksdb", state_dir=tmp_path / "state",
        state_cache="64MiB",
    )  # fmt: skip
    options = job._task_options(("events", 3))  # noqa: SLF001 - what each task's Job gets
    assert options["state"] == "rocksdb" and options["state_cache"] == "64MiB"
    assert Path(options["state_dir"]) == tmp_path / "state" / "events-3"
    assert "state_dir" not in _make(lambda s: s.sink(print), tmp_path)._task_options(("e", 0))  # noqa: SLF001


def test_the_control_api_words_a_group_s_state_as_a_job_s(tmp_path: Path) -> None:
    import json
    import urllib.request

    from rivermark.testing import run_in_thread, wait_for

    job = _make(lambda source: source.sink(print), tmp_path, control_port=0)
    thread, raised = run_in_thread(job)
    try:
        wait_for(lambda: job.control_url is not None, what="the control API's address")
        assert job.control_url is not None
        with urllib.request.urlopen(job.control_url + "api/job", timeout=30) as r:
            answer = json.load(r)
        assert (answer["status"], answer["reason"]) == ("running", "")
    finally:
        job.stop(reason="rivermark stop (POST /api/stop)")
        thread.join(60)
    assert not thread.is_alive() and raised == []
    # the end, in the words of rivermark.observe.endstate (it said "ended")
    assert job.control is not None
    answer = job.control.describe()
    assert (answer["status"], answer["reason"]) == ("stopped", "rivermark stop (POST /api/stop)")
    assert job.control.status() == "stopped"


def _asof_build(how_other: str, topic: str = "tiers") -> Any:
    def build(source: PartitionSource) -> Stream:
        other = getattr(source, how_other)(topic)  # co_partitioned or global_topic
        table = other.flatten().timestamps(lambda r: r[0]).to_table(key=1, value=lambda r: r[2])
        return source.flatten().timestamps(lambda r: r[0]).join_asof(table, key=1).sink(print)

    return build


def test_a_join_with_a_co_partitioned_topic_is_accepted_and_checked_at_start(
    tmp_path: Path,
) -> None:
    job = _make(_asof_build("co_partitioned"), tmp_path)
    assert job.co_partitioned == ["tiers"]


def test_a_join_with_a_global_topic_needs_no_co_partitioning(tmp_path: Path) -> None:
    job = _make(_asof_build("global_topic"), tmp_path)
    assert job.co_partitioned == []


def test_the_partners_read_the_tasks_partition_and_commit_nothing_to_the_group() -> None:
    source = PartitionSource("orders", 2, PARAMS)
    co, glob = source.co_partitioned("tiers"), source.global_topic("prices")
    assert source.partners == [co, glob]
    assert co.partitions.only == {("tiers", 2)} and glob.partitions.only is None
    assert co.group_takeover and glob.group_takeover  # read only: the group is the job's


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"orders": 3, "tiers": 3}, None),
        (
            {"orders": 3, "tiers": 2},
            "PartitionedJob: topics 'orders' (3 partitions) and 'tiers' (2 partitions) are "
            "joined in each task but are not co-partitioned",
        ),
        ({"orders": 3, "tiers": 0}, "PartitionedJob: topic 'tiers' does not exist"),
    ],
)
def test_co_partitioning_is_the_same_partition_count(
    counts: dict[str, int], message: str | None
) -> None:
    from rivermark.kafka.copartition import co_partitioning_problem

    problem = co_partitioning_problem(counts, ["orders"], ["tiers"])
    if message is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(message)
        assert len(problem.splitlines()) == 1
