"""Joins' and tables' running figures: the metrics, GET /api/job, Prometheus, the page's JSON.

Each scenario runs a real job that stops with records held, checks every
figure where a user reads it, resumes from the final checkpoint (gauges from
the restored state, counters carried over), and runs on to the end, where
the counters equal those of one uninterrupted run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.core.figures import JoinFigures
from rivermark.observe.control import JobControl
from rivermark.observe.prometheus import collect_families
from rivermark.observe.ui import snapshot_json

Rec = tuple[Any, ...]


class _Families:
    def __init__(self, job: Job) -> None:
        self.job = job

    def collect(self) -> Iterator[Any]:
        return collect_families(self.job.metrics)


def prometheus(job: Job) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the job's Prometheus text, by name and labels."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(job))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def figures_everywhere(job: Job, node: str) -> JoinFigures:
    """``node``'s figures from the metrics, checked equal in GET /api/job and the page."""
    snap = job.metrics.read()
    figures = snap.node(node).join
    assert figures is not None
    assert JobControl(job).describe()["joins"][node] == figures.as_json()  # type: ignore[index]
    page = snapshot_json(snap, job)["nodes"]
    assert page[node]["join"] == figures.as_json()  # type: ignore[index]
    return figures


def run(
    recs: list[Rec], build: Callable[[Stream], None], store: Path, stop_after: int | None
) -> Job:
    """Run a job over ``recs``; stop it after record ``stop_after`` (0: before it reads)."""
    source = Stream.from_iterable(recs, name="src")
    build(source)
    job = Job(source, checkpoint=store, every=None)
    if stop_after == 0:
        job.stop()  # it restores, writes its final checkpoint and stops
    elif stop_after is not None:
        last = recs[stop_after - 1]
        source.sink(lambda r: job.stop() if r is last else None, name="stopper")
    job.run()
    return job


def asof_graph(source: Stream) -> None:
    changes = source.filter(lambda r: r[0] == "T", name="changes")
    lefts = source.filter(lambda r: r[0] == "L", name="lefts")
    table = changes.timestamps(lambda r: r[2], name="tts").to_table(
        key=1, value=lambda r: r[3], name="table"
    )
    joined = lefts.timestamps(lambda r: r[2], name="lts").join_asof(
        table, key=1, how="left", name="asof"
    )
    joined.sink_to_list(name="out")


ASOF = [
    ("T", "a", 0, "x"),
    ("T", "a", 5, "y"),
    ("L", "a", 3),  # the table's watermark (5) is past 3: joined on arrival
    ("L", "a", 7),  # waits
    ("L", "b", 8),  # waits
    ("T", "a", 1, "late"),  # late on the table
    ("L", "a", 2),  # late on the left (its watermark is 8)
    ("T", "a", 6, "z"),
    ("T", "a", 7, "w"),  # the table's watermark is 7: (a, 7) still waits
]
#: after the stop: a late left record, then the table moves past both waiting records
ASOF_REST = [("L", "a", 4), ("T", "b", 20, "v")]


def test_asof_join_and_table_figures_survive_a_restore(tmp_path: Path) -> None:
    job = run(ASOF, asof_graph, tmp_path / "c", stop_after=len(ASOF))
    join = figures_everywhere(job, "asof")
    assert join.buffered == {"left": 2} and join.waited == 2
    assert join.late == {"left": 1} and join.oldest_waiting == 7.0
    table = figures_everywhere(job, "table")
    # a's versions at 0, 5 and 6 are dropped: the oldest waiting record (7) needs the
    # one at 7 only
    assert (table.keys, table.versions_dropped) == (1, 3)
    snap = job.metrics.read()
    assert snap.node("asof").late_records == 1 and snap.node("table").late_records == 1
    samples = prometheus(job)
    assert samples[("rivermark_join_buffered_records", (("node", "asof"), ("side", "left")))] == 2
    assert samples[("rivermark_join_waited_records_total", (("node", "asof"),))] == 2
    assert samples[("rivermark_join_late_records_total", (("node", "asof"), ("side", "left")))] == 1
    assert samples[("rivermark_late_records_total", (("node", "table"),))] == 1
    oldest = ("rivermark_join_oldest_waiting_timestamp_seconds", (("node", "asof"),))
    assert samples[oldest] == 7.0
    assert samples[("rivermark_table_keys", (("node", "table"),))] == 1
    assert samples[("rivermark_table_versions_dropped_total", (("node", "table"),))] == 3
    # no side of another node, and no table figure on a join
    assert ("rivermark_join_buffered_records", (("node", "asof"), ("side", "right"))) not in samples
    assert ("rivermark_table_keys", (("node", "asof"),)) not in samples

    # restored: the gauges from the state, the counters carried over
    resumed = run(ASOF, asof_graph, tmp_path / "c", stop_after=0)
    assert resumed.restored_epoch == job.epoch
    assert figures_everywhere(resumed, "asof") == join
    assert figures_everywhere(resumed, "table") == table
    assert prometheus(resumed)[oldest] == 7.0

    # on to the end: what one uninterrupted run counts
    rest = run(ASOF + ASOF_REST, asof_graph, tmp_path / "c", stop_after=None)
    whole = run(ASOF + ASOF_REST, asof_graph, tmp_path / "whole", stop_after=None)
    for node in ("asof", "table"):
        assert figures_everywhere(rest, node) == figures_everywhere(whole, node)
    end = figures_everywhere(whole, "asof")
    assert end.buffered == {"left": 0} and end.oldest_waiting is None
    assert end.waited == 2 and end.late == {"left": 2}
    assert rest.metrics.read().node("asof").late_records == 2
    assert prometheus(rest)[("rivermark_join_waited_records_total", (("node", "asof"),))] == 2
    assert oldest not in prometheus(rest)


def stream_joins_graph(source: Stream) -> None:
    lefts = source.filter(lambda r: r[0] == "L", name="lefts")
    rights = source.filter(lambda r: r[0] == "R", name="rights")
    lt = lefts.timestamps(lambda r: r[2], name="lt")
    rt = rights.timestamps(lambda r: r[2], name="rt")
    lt.join_interval(rt, key=1, lower=0, upper=3, name="pairs").sink_to_list(name="out")
    lt.join_window(rt, key=1, size=10, how="outer", name="cogroup").sink_to_list(name="out2")


STREAMS = [
    ("L", "a", 0),
    ("L", "a", 1),
    ("R", "a", 2),  # pairs with both
    ("R", "b", 10),  # right watermark 10: the left records at 0 and 1 are dropped
    ("L", "a", 9),  # left watermark 9: the right record at 2 is dropped
    ("R", "a", 1),  # late on the right (both joins: its window closed on the right side)
    ("L", "a", 5),  # late on the left for the interval join; its window is still open
]
STREAMS_REST = [("L", "c", 30), ("R", "c", 31), ("L", "a", 8)]


def test_interval_and_window_join_figures_per_side_survive_a_restore(tmp_path: Path) -> None:
    job = run(STREAMS, stream_joins_graph, tmp_path / "c", stop_after=len(STREAMS))
    pairs = figures_everywhere(job, "pairs")
    # held: (a, 9) until the right watermark passes 12, (b, 10) until the left's passes 10
    assert pairs.buffered == {"left": 1, "right": 1}
    assert pairs.late == {"left": 1, "right": 1}
    assert pairs.waited is None and pairs.keys is None
    cogroup = figures_everywhere(job, "cogroup")
    # window [0, 10) of a: lefts 0, 1, 9, 5 and right 2; window [10, 20) of b: right 10
    assert cogroup.buffered == {"left": 4, "right": 2}
    assert cogroup.late == {"left": 0, "right": 1}
    snap = job.metrics.read()
    assert snap.node("pairs").late_records == 2 and snap.node("cogroup").late_records == 1
    samples = prometheus(job)
    for node, side, held, late in [
        ("pairs", "left", 1, 1),
        ("pairs", "right", 1, 1),
        ("cogroup", "left", 4, 0),
        ("cogroup", "right", 2, 1),
    ]:
        labels = (("node", node), ("side", side))
        assert samples[("rivermark_join_buffered_records", labels)] == held
        assert samples[("rivermark_join_late_records_total", labels)] == late
    assert ("rivermark_join_waited_records_total", (("node", "pairs"),)) not in samples

    resumed = run(STREAMS, stream_joins_graph, tmp_path / "c", stop_after=0)
    assert figures_everywhere(resumed, "pairs") == pairs
    assert figures_everywhere(resumed, "cogroup") == cogroup

    rest = run(STREAMS + STREAMS_REST, stream_joins_graph, tmp_path / "c", stop_after=None)
    whole = run(STREAMS + STREAMS_REST, stream_joins_graph, tmp_path / "whole", stop_after=None)
    for node in ("pairs", "cogroup"):
        assert figures_everywhere(rest, node) == figures_everywhere(whole, node)
        assert (
            rest.metrics.read().node(node).late_records
            == whole.metrics.read().node(node).late_records
        )
    end = figures_everywhere(whole, "pairs")
    assert end.buffered == {"left": 0, "right": 0} and end.late == {"left": 2, "right": 1}


def test_other_nodes_have_no_join_figures(tmp_path: Path) -> None:
    job = run([1, 2, 3], lambda s: s.map(str, name="text").sink_to_list(), tmp_path, None)
    snap = job.metrics.read()
    assert snap.node("text").join is None and snap.node("text").late_records is None
    assert snapshot_json(snap, job)["nodes"]["text"]["join"] is None  # type: ignore[index]
    assert JobControl(job).describe()["joins"] == {}


def test_dataframe_joins_report_rows_per_side_and_carry_their_counters_in_state() -> None:
    import pandas as pd

    from rivermark.dataframe import DataFrame

    example = pd.DataFrame({"ts": [0.0], "k": [0]}).iloc[:0]

    def graph() -> tuple[Stream, Stream, list[Stream]]:
        ls, rs = Stream(), Stream()
        left = DataFrame(ls, example=example).timestamps("ts", max_delay=0)
        right = DataFrame(rs, example=example).timestamps("ts", max_delay=0)
        asof = left.merge_asof(right, by="k").stream
        pairs = left.join_interval(right, by="k", lower=0, upper=3).stream
        return ls, rs, [left.stream, right.stream, asof, pairs]

    def rows(*pairs: tuple[float, int]) -> pd.DataFrame:
        return pd.DataFrame({"ts": [float(t) for t, _ in pairs], "k": [k for _, k in pairs]})

    ls, rs, nodes = graph()
    rs.emit(rows((0, 0), (5, 0)))  # the right watermark is 5
    ls.emit(rows((3, 0), (7, 0), (8, 1)))  # 3 is joined at once; 7 and 8 wait
    rs.emit(rows((1, 0)))  # late on the right
    ls.emit(rows((2, 0)))  # late on the left
    asof, pairs = nodes[2].join_figures(), nodes[3].join_figures()
    assert asof is not None and pairs is not None
    assert asof.buffered == {"left": 2, "right": 2} and asof.waited == 2
    assert asof.oldest_waiting == 7.0 and asof.late == {"left": 1, "right": 1}
    # the left rows wait for right partners up to 3 s later; the right rows were dropped
    # once the left watermark (8) passed them
    assert pairs.buffered == {"left": 3, "right": 0} and pairs.late == {"left": 1, "right": 1}
    assert nodes[2].late_count == 2
    _, _, restored = graph()
    for node, again in zip(nodes, restored, strict=True):
        again.set_state(node.get_state())
    assert restored[2].join_figures() == asof and restored[3].join_figures() == pairs


def test_the_terminal_and_the_notebook_show_the_pages_join_figures(tmp_path: Path) -> None:
    """The same columns as the live page, and the same figures the metrics carry."""
    from rich.console import Console

    from rivermark.observe.notebook import _job_html
    from rivermark.observe.progress import JOIN_COLUMNS, _table

    job = run(ASOF, asof_graph, tmp_path / "c", stop_after=len(ASOF))
    snap = job.metrics.read()
    page = (Path(__file__).parents[3] / "src/rivermark/observe/page.html").read_text()
    assert "".join(f"<th>{c}</th>" for c in JOIN_COLUMNS) in page

    def render(width: int) -> str:
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(_table(snap, width))
        console.file.close()
        return console.export_text()

    wide = render(400).split("joins and tables")[1]  # the table after its title
    rows = {
        cells[0]: cells
        for line in wide.splitlines()
        if line.startswith("│ ") and (cells := [c.strip() for c in line.strip("│ ").split("│")])
    }
    # asof: 2 left records held and waited, 1 late; the oldest waiting at t=7
    head = next(line for line in wide.splitlines() if line.startswith("┃ node"))
    assert [c.strip() for c in head.strip("┃ ").split("┃")] == list(JOIN_COLUMNS)
    assert rows["asof"] == ["asof", "2", "–", "1", "–", "2", "1970-01-01 00:00:07 UTC", "–", "–", "–", "–", "–"]  # fmt: skip
    assert rows["table"][-5:] == ["1", "3", "–", "–", "–"]
    narrow = render(80)
    assert "asof: held left 2, late left 1, waited 2, oldest waiting 1970-01-01 00:00:07" in narrow
    assert "table: keys 1, versions dropped 3" in narrow

    notebook = _job_html(job)
    assert "".join(f"<th>{c}</th>" for c in JOIN_COLUMNS) in notebook
    assert "<td>asof</td><td>2</td><td>–</td><td>1</td><td>–</td><td>2</td>" in notebook
    assert "<td>table</td>" in notebook


def test_a_lookup_joins_cache_figures_are_everywhere(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "t.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [("a", 1), ("b", 2), ("c", 3)])
    c.close()
    recs = [{"k": k} for k in "abacabcd"]

    def graph(source: Stream) -> None:
        source.lookup_sql(f"sqlite:///{db}", "t", key="k", cache=2, name="lk").sink_to_list()

    job = run(recs, graph, tmp_path / "c", stop_after=None)
    # a b a(hit) c(evicts b) a(hit) b(evicts c) c(evicts a) d(no row; evicts b)
    f = figures_everywhere(job, "lk")
    assert (f.cache_hits, f.cache_misses, f.cache_size) == (2, 6, 2)
    assert f.buffered == {} and f.keys is None
    samples = prometheus(job)
    assert samples[("rivermark_lookup_cache_hits_total", (("node", "lk"),))] == 2
    assert samples[("rivermark_lookup_cache_misses_total", (("node", "lk"),))] == 6
    assert samples[("rivermark_lookup_cache_keys", (("node", "lk"),))] == 2
    # the cache is not state: the node has none in the checkpoint, and a restored
    # job starts with an empty cache
    assert not job.metrics.read().node("lk").state_size
    resumed = run(recs, graph, tmp_path / "c", stop_after=0)
    f = figures_everywhere(resumed, "lk")
    assert (f.cache_hits, f.cache_misses, f.cache_size) == (0, 0, 0)
