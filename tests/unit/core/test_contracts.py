"""The declared contracts a job reads from nodes it did not write (rivermark.core.contracts)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rivermark import Job, Stream
from rivermark.core.contracts import HoldsWork, JobAware, Positioned, Stateful
from rivermark.core.refs import Metadata
from rivermark.sources.iterable import FromIterable


class LaterNode(Stream):
    """Passes each record on a little later, from a timer, and counts it in ``in_flight``."""

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> None:
        self.in_flight += 1

        def release() -> None:
            self.in_flight -= 1
            self._emit(x)

        asyncio.get_running_loop().call_later(0.02, release)


class Tagged(FromIterable):
    """A source that names the job running it."""

    job_id: str | None = None


def test_a_node_of_our_own_that_counts_in_flight_work_is_waited_for(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    source = Stream.from_iterable(list(range(5)), name="numbers")
    later = LaterNode(source)
    later.map(str).sink_to_textfile(str(out))
    Job(source, checkpoint=tmp_path / "ckpt", every=None).run()
    # the job ended only once every record held in flight had been written
    assert out.read_text().split() == [str(i) for i in range(5)]
    assert later.in_flight == 0


def test_the_job_names_itself_to_a_job_aware_node(tmp_path: Path) -> None:
    source = Tagged([1, 2], name="numbers")
    got = source.sink_to_list()
    job = Job(source, checkpoint=tmp_path / "ckpt", every=None)
    job.run()
    assert got == [1, 2] and source.job_id == job.job_id and source.job_id
    assert isinstance(source, JobAware) and not isinstance(Stream(), JobAware)


def test_streams_and_sources_provide_the_contracts() -> None:
    node = Stream()
    source = Stream.from_iterable([1])
    assert isinstance(node, HoldsWork) and isinstance(node, Stateful)
    assert isinstance(source, Positioned) and not isinstance(node, Positioned)
