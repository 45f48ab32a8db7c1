"""A table's bootstrap (``to_table(..., bootstrap=True)``): what is refused without a broker.

The bootstrap itself (a Kafka topic read to its end before the other
sources start, fresh and after a kill) is tested on a real broker in
``tests/integration/kafka/test_table_bootstrap.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.errors import ConfigurationError


def _join(changes: Stream, orders: Stream, bootstrap: object) -> Stream:
    table = changes.timestamps(lambda c: c[0]).to_table(
        key=1, value=lambda c: c[2], bootstrap=bootstrap, name="tiers"
    )
    return orders.timestamps(lambda o: o[0]).join_asof(table, key=1, mode="lookup")


def test_a_table_of_a_source_without_an_end_offset_is_refused_when_the_job_is_made(
    tmp_path: Path,
) -> None:
    changes = Stream.from_iterable([(0, "ann", "gold")], name="changes")
    orders = Stream.from_iterable([(5, "ann")], name="orders")
    out = _join(changes, orders, True).sink_to_list()
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            "Job: Table('tiers') has bootstrap=True, but its changes come from "
            "FromIterable('changes'), which cannot be read to the end its input has at start; read the changes from "
            "Kafka (from_kafka, from_kafka_batched), or leave bootstrap=False"
        ),
    ):
        Job(orders, checkpoint=str(tmp_path / "ck"), every=None)
    assert out == []


def test_a_table_of_emitted_changes_is_refused(tmp_path: Path) -> None:
    orders = Stream.from_iterable([(5, "ann")], name="orders")
    _join(Stream(), orders, True)
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            "Job: Table('tiers') has bootstrap=True, but its changes come from no source "
            "(they are emitted): read them from Kafka"
        ),
    ):
        Job(orders, checkpoint=str(tmp_path / "ck"), every=None)


def test_bootstrap_false_runs_as_before(tmp_path: Path) -> None:
    changes = Stream.from_iterable([(0, "ann", "gold")], name="changes")
    orders = Stream.from_iterable([(5, "ann")], name="orders")
    out = _join(changes, orders, False).sink_to_list()
    job = Job(orders, checkpoint=str(tmp_path / "ck"), every=None)
    assert not job.bootstrapping
    job.run()
    assert len(out) <= 1  # a lookup: whatever the table held when the order came


def test_bootstrap_must_be_a_bool() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("to_table: bootstrap must be True or False, got 'yes'")
    ):
        _join(Stream(), Stream(), "yes")


def test_outside_a_job_bootstrap_changes_nothing() -> None:
    changes, orders = Stream(), Stream()
    out = _join(changes, orders, True).sink_to_list()
    changes.emit((0, "ann", "gold"))
    orders.emit((5, "ann"))
    assert out == [((5, "ann"), "gold")]


APP = """
from rivermark import Stream
changes = Stream.from_iterable([(0, "ann", "gold")], name="changes")
orders = Stream.from_iterable([(5, "ann")], name="orders")
table = changes.timestamps(lambda c: c[0]).to_table(
    key=1, value=lambda c: c[2], bootstrap=True, name="tiers"
)
orders.join_asof(table, key=1, mode="lookup").sink(print)
"""


def test_rivermark_run_refuses_it_in_one_line(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    res = subprocess.run(
        [sys.executable, "-m", "rivermark.cli", "run", f"{app}:orders"]
        + ["--checkpoint", str(tmp_path / "ck")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res
    assert len(res.stderr.splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(
        "rivermark: Job: Table('tiers') has bootstrap=True, but its changes come from "
        "FromIterable('changes')"
    )
    assert res.stdout == ""
