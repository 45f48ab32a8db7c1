"""Every built-in operator's checkpointed state is data: no pickle in any state file.

A job without a key writes unsigned checkpoints, and restores refuse their
pickles; so a built-in node whose state needs one could not resume from its
own checkpoints.  This walks every stateful node class rivermark defines and
every DataFrame aggregation, runs each under a checkpointed :class:`Job`
(a checkpoint after every batch, so open windows and partial state are in
them), and reads every state file it wrote.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import rivermark
from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.state import codec
from rivermark.dataframe import DataFrame
from rivermark.dataframe import aggregations as frame_aggs
from rivermark.dataframe.aggregations import Aggregate
from rivermark.execution.node import walk_from

#: records: (event time in seconds, key, value)
RECORDS = [(float(i), i % 3, float(i) * 1.5) for i in range(24)]


def _frames(times: Any = None) -> list[pd.DataFrame]:
    out = []
    for b in range(6):
        rows = range(4 * b, 4 * b + 4)
        out.append(
            pd.DataFrame(
                {
                    "ts": [float(i) * 2.5 for i in rows],
                    "k": [f"k{i % 3}" for i in rows],
                    "v": [float(i) * 1.5 for i in rows],
                    "n": [int(i) for i in rows],
                    # kept whole by windows: a time zone's times, a categorical, a nullable
                    "when": pd.to_datetime([i * 250 for i in rows], unit="ms", utc=True).tz_convert(
                        "Europe/Paris"
                    ),
                    "tag": pd.Categorical([f"t{i % 2}" for i in rows], categories=["t0", "t1"]),
                    "maybe": pd.array([None if i % 5 == 0 else i for i in rows], dtype="Int64"),
                },
                index=pd.to_datetime([i * 1_000_000_000 for i in rows]),
            )
        )
    return out


def _frame_stream(src: Stream) -> DataFrame:
    return DataFrame(src, example=_frames()[0].iloc[:0])


class Total(frame_aggs.Aggregation):
    """An aggregation in streamz's protocol (its state a plain number)."""

    def initial(self, new: Any) -> Any:
        return 0.0

    def on_new(self, state: Any, new: Any) -> Any:
        total = state + float(new.sum())
        return total, total

    def on_old(self, state: Any, old: Any) -> Any:
        total = state - float(old.sum())
        return total, total


def _record_pipelines() -> dict[str, Callable[[Stream], Any]]:
    def windows(s: Stream) -> Any:
        t = s.timestamps(lambda r: r[0], max_delay=2)
        for agg in ("count", "sum", "mean", "min", "max", "collect"):
            t.tumbling_window(5, key=lambda r: r[1], agg=agg, value=lambda r: r[2]).sink_to_list()
        t.hopping_window(6, 2, agg="mean", value=lambda r: r[2]).sink_to_list()
        t.tumbling_window(5, reduce=max, value=lambda r: r[2], emit="updates").sink_to_list()
        t.hopping_window(4, 2, fold=lambda a, r: a + r[2], start=0.0).sink_to_list()
        w = t.session_window(1.5, key=lambda r: r[1], agg="collect", grace=1)
        w.late.sink_to_list()
        return w.sink_to_list()

    def keyed_process(s: Stream) -> Any:
        def func(ctx: Any, r: Any) -> Any:
            ctx.state = (ctx.state or 0) + 1
            ctx.set_timer(r[0] + 3)
            return None

        def on_timer(ctx: Any, when: float) -> Any:
            return (ctx.key, when, ctx.state)

        t = s.timestamps(lambda r: r[0])
        return t.keyed_process(func, key=lambda r: r[1], on_timer=on_timer).sink_to_list()

    def joins(s: Stream) -> Any:
        a, b = s.map(lambda r: r[1]), s.map(lambda r: r[2])
        a.zip(b).sink_to_list()
        a.zip_latest(b).sink_to_list()
        a.combine_latest(b).sink_to_list()
        # by event time: a versioned table, the as-of, window and interval joins (the
        # same records on both sides, so that every buffer holds something)
        changes = s.timestamps(lambda r: r[0], max_delay=2)
        table = changes.to_table(key=1, value=lambda r: r[2])
        left = s.timestamps(lambda r: r[0] + 0.5, max_delay=2)
        left.join_asof(table, key=1, how="left").sink_to_list()
        right = s.timestamps(lambda r: r[0], max_delay=2)
        left.join_window(right, key=1, size=4, how="outer").sink_to_list()
        left.join_window(right, key=1, gap=2, how="outer").sink_to_list()
        return left.join_interval(right, key=1, lower=-3, upper=3, how="left").sink_to_list()

    return {
        "accumulate": lambda s: s.accumulate(lambda a, r: a + r[2], start=0.0).sink_to_list(),
        "accumulate-returns": lambda s: s.accumulate(
            lambda a, r: (a + 1, (a, r[1])), start=0, returns_state=True
        ).sink_to_list(),
        "scan": lambda s: s.scan(lambda a, r: a + r[1], start=0).sink_to_list(),
        "pairwise": lambda s: s.pairwise().sink_to_list(),
        "frequencies": lambda s: s.pluck(1).frequencies().sink_to_list(),
        "slice": lambda s: s.slice(1, None, 3).sink_to_list(),
        "unique": lambda s: s.pluck(1).unique().sink_to_list(),
        "unique-bounded": lambda s: s.pluck(1).unique(maxsize=2).sink_to_list(),
        "collect": lambda s: s.collect().sink_to_list(),
        "partition": lambda s: s.partition(5).sink_to_list(),
        "partition-keyed": lambda s: s.partition(2, key=1).sink_to_list(),
        "partition_unique": lambda s: s.partition_unique(2, key=lambda r: r[1]).sink_to_list(),
        "sliding_window": lambda s: s.sliding_window(3, return_partial=False).sink_to_list(),
        "joins": joins,
        "delay": lambda s: s.delay(0.001).sink_to_list(),
        "timed_window": lambda s: s.timed_window(0.05).sink_to_list(),
        "timed_window_unique": lambda s: s.timed_window_unique(0.05, key=1).sink_to_list(),
        "buffer": lambda s: s.buffer(4).sink_to_list(),
        "latest": lambda s: s.latest().sink_to_list(),
        "event-time windows": windows,
        "keyed_process": keyed_process,
    }


def _agg(frame: Any, how: str) -> Any:
    """``frame.how()``, or ``frame.how`` where that is a property (``size``)."""
    out = getattr(frame, how)
    return out if hasattr(out, "stream") else out()


def _frame_pipelines() -> dict[str, Callable[[Stream], Any]]:
    def everything(how: str) -> Callable[[Stream], Any]:
        def build(s: Stream) -> Any:
            sdf = _frame_stream(s)[["v", "n"]]
            _agg(sdf, how).stream.sink_to_list()
            return _agg(sdf.v, how).stream.sink_to_list()

        return build

    def grouped(how: str) -> Callable[[Stream], Any]:
        def build(s: Stream) -> Any:
            sdf = _frame_stream(s)
            getattr(sdf.groupby("k")[["v", "n"]], how)().stream.sink_to_list()
            return getattr(sdf.groupby("k").v, how)().stream.sink_to_list()

        return build

    def windowed(how: str) -> Callable[[Stream], Any]:
        def build(s: Stream) -> Any:
            sdf = _frame_stream(s)
            getattr(sdf[["v", "n"]].window(n=5), how)().stream.sink_to_list()
            getattr(sdf.v.window(value="3s"), how)().stream.sink_to_list()
            getattr(sdf[["v", "n"]].expanding(), how)().stream.sink_to_list()
            if how in ("sum", "count", "mean", "var", "std", "min", "max"):
                getattr(sdf.window(n=6).groupby("k").v, how)().stream.sink_to_list()
            return getattr(sdf.v.rolling(3), how)().stream.sink_to_list()

        return build

    def event_windows(s: Stream) -> Any:
        zoned = _frame_stream(s)[["when", "k", "v"]].timestamps("when")
        zoned.session_window(1).groupby("k").v.max().stream.sink_to_list()
        timed = _frame_stream(s).timestamps("ts", max_delay=1)
        out = None
        for spec in (
            timed.tumbling_window(10),
            timed.hopping_window(10, 5, emit="updates"),
            timed.session_window(3, grace=2),
        ):
            for how in ("count", "size", "sum", "mean", "min", "max"):
                out = getattr(spec.groupby("k")[["v", "n"]], how)().stream.sink_to_list()
                getattr(spec[["v"]], how)().stream.sink_to_list()
            spread = spec.groupby("k").v.agg(lambda v: float(v.max() - v.min()))
            spread.stream.sink_to_list()
            spread.late.stream.sink_to_list()
        return out

    out: dict[str, Callable[[Stream], Any]] = {}
    for how in ("sum", "count", "mean", "var", "std", "min", "max", "size"):
        out[f"df.{how}"] = everything(how)
        out[f"df.groupby.{how}"] = grouped(how)
    for how in ("sum", "count", "mean", "var", "std", "min", "max"):
        out[f"df.windows.{how}"] = windowed(how)

    def misc(s: Stream) -> Any:
        sdf = _frame_stream(s)
        sdf.k.value_counts().stream.sink_to_list()
        sdf.k.window(n=5).value_counts().stream.sink_to_list()
        sdf.window(n=5).full().stream.sink_to_list()
        sdf.window(value="4s").full().stream.sink_to_list()
        sdf.when.max().stream.sink_to_list()
        sdf[["when"]].window(n=5).min().stream.sink_to_list()
        sdf.maybe.sum().stream.sink_to_list()
        sdf.tag.value_counts().stream.sink_to_list()
        _agg(sdf.window(value="4s"), "size").stream.sink_to_list()
        sdf.v.window(n=5).apply(lambda v: float(v.sum())).stream.sink_to_list()
        sdf[["v", "n"]].rolling("3s").mean().stream.sink_to_list()
        sdf.v.rolling(3).median().stream.sink_to_list()
        sdf.v.ewm(alpha=0.3).mean().stream.sink_to_list()
        for how in ("cumsum", "cumprod", "cummin", "cummax"):
            getattr(sdf[["v", "n"]], how)().stream.sink_to_list()
        sdf.v.aggregate(Total()).stream.sink_to_list()
        sdf.v.window(n=5).aggregate(Total()).stream.sink_to_list()
        return sdf[["k", "v", "n"]].groupby("k").mean(with_state=True).stream.sink_to_list()

    def joins(s: Stream) -> Any:
        left = _frame_stream(s)[["ts", "k", "v"]].timestamps("ts", max_delay=1)
        right = _frame_stream(s)[["ts", "k", "n"]].timestamps("ts", max_delay=1)
        left.merge_asof(right, by="k").stream.sink_to_list()
        pairs = left.join_interval(right, by="k", lower=-2, upper=2, how="left")
        return pairs.stream.sink_to_list()

    out["df.misc"] = misc
    out["df.joins"] = joins
    out["df.event windows"] = event_windows
    return out


PIPELINES: dict[str, tuple[Callable[[], list[Any]], Callable[[Stream], Any]]] = {
    **{name: (lambda: list(RECORDS), build) for name, build in _record_pipelines().items()},
    **{name: (_frames, build) for name, build in _frame_pipelines().items()},
}


def _nodes(src: Stream) -> Iterator[Stream]:
    return walk_from([src], lambda node: [d for d in node.downstreams if d is not None])


def _run(tmp_path: Path, items: list[Any], build: Callable[[Stream], Any]) -> list[Stream]:
    src = Stream.from_iterable(items)
    build(src)
    Job(src, checkpoint=tmp_path, every=None, every_batches=1).run()
    return list(_nodes(src))


#: what each pipeline ran: node classes, and the DataFrame aggregations of ``Aggregate``
COVERED: dict[str, set[type]] = {"nodes": set(), "aggs": set()}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_every_state_file_of_a_built_in_operator_holds_no_pickle(tmp_path: Path, name: str) -> None:
    items, build = PIPELINES[name]
    nodes = _run(tmp_path, items(), build)
    store = LocalDirectoryStore(tmp_path)
    epochs = store.list_epochs()
    assert len(epochs) > 3, "one checkpoint per batch"
    COVERED["nodes"].update(type(n) for n in nodes if n.is_stateful)
    COVERED["aggs"].update(type(n.agg) for n in nodes if isinstance(n, Aggregate))
    pickled = [
        (epoch, nid)
        for epoch in epochs
        for nid in store.read_manifest(epoch).state
        if codec.has_pickle(store.read_state(epoch, nid))
    ]
    assert pickled == []


def _stateful_classes() -> set[type]:
    for m in pkgutil.walk_packages(rivermark.__path__, "rivermark."):
        importlib.import_module(m.name)

    def below(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)

    return {
        c
        for c in below(Stream)
        if c.__module__.startswith("rivermark.")
        and not c.__name__.startswith("_")
        and (getattr(c, "_state_attrs", ()) or c.get_state is not Stream.get_state)
    }


#: stateful classes whose state files are checked where their service runs: Dask's
#: nodes in tests/integration/dask (test_dask_state_writer), the Kafka sink's (its
#: transaction's ids, strings and numbers) in tests/integration/kafka
ELSEWHERE = {"rivermark.dask.core", "rivermark.kafka.sink"}


def test_the_walk_covers_every_stateful_operator_and_frame_aggregation(tmp_path: Path) -> None:
    # the graphs the walk above runs (built here, in this process: the cases may run
    # in other processes of a parallel run)
    for items, build in PIPELINES.values():
        src = Stream.from_iterable(items())
        build(src)
        nodes = list(_nodes(src))
        COVERED["nodes"].update(type(n) for n in nodes if n.is_stateful)
        COVERED["aggs"].update(type(n.agg) for n in nodes if isinstance(n, Aggregate))
    wanted = {c for c in _stateful_classes() if c.__module__ not in ELSEWHERE}
    # an abstract base is covered by its subclasses
    wanted -= {c for c in wanted if any(issubclass(d, c) for d in COVERED["nodes"])}
    assert wanted == set()
    frame_aggregations = {
        v
        for v in vars(frame_aggs).values()
        if isinstance(v, type)
        and issubclass(v, frame_aggs.Aggregation)
        and v.__module__ == frame_aggs.__name__
        and not v.__name__.startswith("_")
        and v is not frame_aggs.Aggregation
    }
    from rivermark.dataframe.grouped import GroupbyAggregation

    frame_aggregations.add(GroupbyAggregation)
    assert frame_aggregations - COVERED["aggs"] == set()


def test_a_std_job_resumes_from_its_own_unsigned_checkpoints(tmp_path: Path) -> None:
    frames = _frames()

    def build(items: list[Any]) -> tuple[Stream, list[Any], list[Any]]:
        src = Stream.from_iterable(items)
        sdf = _frame_stream(src)
        std = sdf.v.std().stream.sink_to_list()
        by_key = sdf.groupby("k").v.var().stream.sink_to_list()
        return src, std, by_key

    # the first run stops after three batches (its source ends there)
    src, std, by_key = build(frames[:3])
    Job(src, checkpoint=tmp_path, every=None, every_batches=1, trust_store=False).run()
    store = LocalDirectoryStore(tmp_path)
    assert store.read_manifest(store.list_epochs()[-1]).signature is None
    # the restart (no key, no trust) restores and goes on with the rest
    src2, std2, by_key2 = build(frames)
    Job(src2, checkpoint=tmp_path, every=None, every_batches=1).run()
    whole = pd.concat(frames)
    assert std2[-1] == pytest.approx(float(whole.v.std()))
    pd.testing.assert_series_equal(by_key2[-1], whole.groupby("k").v.var(), check_names=False)
    assert np.isfinite(std[-1])
