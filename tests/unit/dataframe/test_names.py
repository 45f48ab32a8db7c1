"""Every stateful DataFrame aggregation takes ``name=``: its state keeps that name when
another aggregation is added in front of it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.dataframe import DataFrame
from rivermark.dataframe.aggregations import Size

EXAMPLE = pd.DataFrame({"k": ["a"], "x": [1.0]}).iloc[:0]

#: every stateful aggregation of a streaming DataFrame, built with name="agg"
AGGREGATIONS: dict[str, Callable[[Any], Any]] = {
    "sum": lambda sdf: sdf.x.sum(name="agg"),
    "count": lambda sdf: sdf.count(name="agg"),
    "mean": lambda sdf: sdf.x.mean(name="agg"),
    "var": lambda sdf: sdf.x.var(name="agg"),
    "std": lambda sdf: sdf.x.std(name="agg"),
    "min": lambda sdf: sdf.x.min(name="agg"),
    "max": lambda sdf: sdf.x.max(name="agg"),
    "value_counts": lambda sdf: sdf.k.value_counts(name="agg"),
    "cumsum": lambda sdf: sdf.x.cumsum(name="agg"),
    "cummax": lambda sdf: sdf.x.cummax(name="agg"),
    "groupby.sum": lambda sdf: sdf.groupby("k").x.sum(name="agg"),
    "groupby.mean": lambda sdf: sdf.groupby("k").x.mean(name="agg"),
    "groupby.size": lambda sdf: sdf.groupby("k").size(name="agg"),
    "groupby.std": lambda sdf: sdf.groupby("k").x.std(name="agg"),
    "window.sum": lambda sdf: sdf.window(2).x.sum(name="agg"),
    "window.full": lambda sdf: sdf.window(2).full(name="agg"),
    "window.groupby.max": lambda sdf: sdf.window(2).groupby("k").x.max(name="agg"),
    "rolling.mean": lambda sdf: sdf.x.rolling(2).mean(name="agg"),
    "rolling.quantile": lambda sdf: sdf.x.rolling(2).quantile(0.5, name="agg"),
    "expanding.sum": lambda sdf: sdf.expanding().x.sum(name="agg"),
    "ewm.mean": lambda sdf: sdf.x.ewm(alpha=0.5).mean(name="agg"),
    "aggregate(Size())": lambda sdf: sdf.aggregate(Size(), name="agg"),
    "window.aggregate(Size())": lambda sdf: sdf.window(3).aggregate(Size(), name="agg"),
}


@pytest.mark.parametrize("how", sorted(AGGREGATIONS))
def test_a_stateful_aggregation_takes_a_name(how: str) -> None:
    source = Stream()
    result = AGGREGATIONS[how](DataFrame(source, example=EXAMPLE))
    assert result.stream.name == "agg" or any(n.name == "agg" for n in _ancestors(result.stream)), (
        how
    )


def _ancestors(node: Any) -> list[Any]:
    seen, todo = [], list(node.upstreams)
    while todo:
        n = todo.pop()
        seen.append(n)
        todo.extend(n.upstreams)
    return seen


def _frames(n: int) -> list[pd.DataFrame]:
    return [pd.DataFrame({"k": ["a", "b"], "x": [float(i), 1.0]}) for i in range(n)]


def test_a_named_groupby_keeps_its_state_when_an_aggregation_is_added_before_it(
    tmp_path: Path,
) -> None:
    def build(extra: bool, frames: int) -> tuple[Stream, list[Any]]:
        source = Stream.from_iterable(_frames(frames), name="frames")
        sdf = DataFrame(source, example=EXAMPLE)
        if extra:  # a new aggregation in front: unnamed ids would renumber
            sdf.x.max(name="largest").stream.sink(lambda _: None, name="largest_out")
        out = sdf.groupby("k").x.sum(name="sums").stream.sink_to_list(name="sums_out")
        return source, out

    source, first = build(extra=False, frames=4)
    job = Job(source, checkpoint=tmp_path, every=None)
    assert "sums" in [job.id_of(n) for n in job.stateful]
    job.run()
    assert first[-1].to_dict() == {"a": 6.0, "b": 4.0}
    # two more frames, read from where it stopped: the sums go on from the restored state
    source, second = build(extra=True, frames=6)
    job = Job(source, checkpoint=tmp_path, every=None, allow_new_nodes=True)
    job.run()
    assert job.restored_epoch is not None
    assert second[-1].to_dict() == {"a": 15.0, "b": 6.0}
    assert job.metrics.read().node("sums").records_in == 6  # 4 carried over, 2 read now
