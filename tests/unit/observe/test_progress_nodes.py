"""The terminal's node rows: a node with errors, late records or backpressure is always shown."""

from __future__ import annotations

from rich.console import Console

from rivermark.observe.metrics import NodeMetrics, Snapshot, SourceMetrics
from rivermark.observe.progress import _table, shown_nodes


def node(nid: str, **kw: object) -> NodeMetrics:
    figures: dict[str, object] = dict(
        id=nid,
        label=nid,
        kind="Map",
        records_in=100,
        records_out=100,
        errors_raised=0,
        errors_skipped=0,
        errors_handled=0,
        backlog=None,
        rate=0.0,
        upstreams=(),
    )
    figures.update(kw)
    return NodeMetrics(**figures)  # type: ignore[arg-type]


def snapshot(nodes: list[NodeMetrics], sources: tuple[SourceMetrics, ...] = ()) -> Snapshot:
    return Snapshot(0.0, 1.0, tuple(nodes), sources, 0, (), None, 0, True)


def test_the_failing_node_is_shown_among_idle_ones() -> None:
    # sorted by busy, then backpressure, then name, "parse" came sixth and was cut
    idle = [node(f"a{i}") for i in range(6)]
    failing = node("parse", errors_skipped=50)
    late = node("windows", late_records=3, open_windows=1)
    waiting = node("zz-source", backpressure=0.4)
    shown = [n.id for n in shown_nodes(snapshot([*idle, failing, late, waiting]))]
    assert shown[:3] == ["parse", "windows", "zz-source"]
    assert len(shown) == 5  # filled up with the busiest of the others


def test_many_flagged_nodes_are_all_shown_beyond_the_busiest_five() -> None:
    failing = [node(f"n{i}", errors_raised=i + 1) for i in range(8)]
    shown = [n.id for n in shown_nodes(snapshot([node("busy", busy=0.9), *failing]))]
    assert shown == [f"n{i}" for i in reversed(range(8))]


def render(snap: Snapshot, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(_table(snap, width))
    console.file.close()
    return console.export_text()


def test_a_narrow_terminal_gets_rows_with_the_position_and_watermark_uncut() -> None:
    src = SourceMetrics(
        "events-from-the-front-door",
        "events",
        123_456,
        2_964.0,
        {"topic-a:0": 1_234_567, "topic-a:1": 7_654_321},
        {"topic-a:0": 1_000, "topic-a:1": 2_000},
        "records",
        False,
        watermark=1_700_000_000.0,
        event_time_lag=200.0,
    )
    snap = snapshot([node("parse", errors_skipped=50), node("times", watermark=1.7e9)], (src,))
    text = render(snap, 80)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "events-from-the-front-door  123,456 records  2,964/s  lag 3,000 records" in text
    assert "watermark 2023-11-14 22:13:20 UTC (event-time lag 3 min)" in text
    assert "times: watermark 2023-11-14 22:13:20 UTC" in text
    # wide enough: the tables
    assert "┃ position" in render(snap, 200)
