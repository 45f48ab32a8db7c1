"""State round trips: get_state -> pickle -> a new graph -> set_state -> continue.

The stable node ids of :mod:`rivermark.core.graph` key the state, as a
checkpointing job does; the continued run must equal an uninterrupted one.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pandas as pd
import pandas.testing as tm
import pytest

from rivermark import Stream
from rivermark.core.graph import fingerprint, node_ids, topological
from rivermark.dataframe import Aggregation, DataFrame, SchemaError
from rivermark.dataframe.partials import KeyedAcc

from .helpers import batches, example, timed_batches


class StreamzMean(Aggregation):
    """An aggregation written for streamz (``initial``/``on_new``/``on_old``)."""

    def initial(self, new: Any) -> Any:
        return new.iloc[:0].sum(), new.iloc[:0].count()

    def on_new(self, state: Any, new: Any) -> Any:
        total, count = state[0] + new.sum(), state[1] + new.count()
        return (total, count), total / count

    def on_old(self, state: Any, old: Any) -> Any:
        total, count = state[0] - old.sum(), state[1] - old.count()
        return (total, count), total / count


PIPELINES: dict[str, Callable[[DataFrame], Any]] = {
    "groupby_sum": lambda sdf: sdf.groupby("name").amount.sum(),
    "groupby_var": lambda sdf: sdf.groupby("name").x.var(),
    "sum": lambda sdf: sdf[["amount", "x"]].sum(),
    "mean": lambda sdf: sdf.x.mean(),
    "value_counts": lambda sdf: sdf.name.value_counts(),
    "cumsum": lambda sdf: sdf.amount.cumsum(),
    "window_n_groupby": lambda sdf: sdf.window(n=7).groupby("name").amount.sum(),
    "window_n_full": lambda sdf: sdf.window(n=9).full(),
    "window_n_std": lambda sdf: sdf.window(n=5).x.std(),
    "window_time_mean": lambda sdf: sdf.window(value="4s").x.mean(),
    "expanding_mean": lambda sdf: sdf.expanding().groupby("name").amount.mean(),
    "rolling_rows": lambda sdf: sdf.x.rolling(4).sum(),
    "rolling_time": lambda sdf: sdf.x.rolling("3s").mean(),
    "ewm": lambda sdf: sdf.x.ewm(span=3).mean(),
    "groupby_min": lambda sdf: sdf.groupby("name").x.min(),
    "groupby_max_frame": lambda sdf: sdf.groupby("name").max(),
    "max": lambda sdf: sdf[["amount", "x"]].max(),
    "min": lambda sdf: sdf.x.min(),
    "var_frame": lambda sdf: sdf[["amount", "x"]].var(),
    "window_n_groupby_var": lambda sdf: sdf.window(n=7).groupby("name").x.var(),
    "window_n_min": lambda sdf: sdf.window(n=4).x.min(),
    "window_n_value_counts": lambda sdf: sdf.window(n=6).name.value_counts(),
    "window_time_groupby_std": lambda sdf: sdf.window(value="4s").groupby("name").x.std(),
    "window_time_max": lambda sdf: sdf.window(value="3s").amount.max(),
    "cummin": lambda sdf: sdf.x.cummin(),
    "streamz_aggregation": lambda sdf: sdf[["amount", "x"]].aggregate(StreamzMean()),
    "streamz_aggregation_window_n": lambda sdf: (
        sdf[["amount", "x"]].window(n=6).aggregate(StreamzMean())
    ),
    "streamz_aggregation_window_time": lambda sdf: sdf.x.window(value="4s").aggregate(
        StreamzMean()
    ),
}


def build(name: str) -> tuple[Stream, list[Any]]:
    s = Stream()
    sdf = DataFrame(s, example=example())
    out = PIPELINES[name](sdf)
    return s, out.stream.sink_to_list()


def snapshot(root: Stream) -> bytes:
    ids = node_ids(root)
    return pickle.dumps({ids[id(n)]: n.get_state() for n in topological(root) if n.is_stateful})


def restore(root: Stream, blob: bytes) -> None:
    ids = node_ids(root)
    states = pickle.loads(blob)
    stateful = [n for n in topological(root) if n.is_stateful]
    assert stateful, "the pipeline has no stateful node"
    for n in stateful:
        n.set_state(states[ids[id(n)]])


def same(a: Any, b: Any) -> None:
    if isinstance(a, pd.DataFrame):
        tm.assert_frame_equal(a, b)
    elif isinstance(a, pd.Series):
        tm.assert_series_equal(a, b)
    else:
        assert a == pytest.approx(b)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_round_trip_equals_uninterrupted(name: str) -> None:
    data = timed_batches(16) if "time" in name else batches(16, seed=3)
    cut = 9
    s, full = build(name)
    for b in data:
        s.emit(b)

    s1, _ = build(name)
    for b in data[:cut]:
        s1.emit(b)
    blob = snapshot(s1)

    s2, resumed = build(name)
    assert fingerprint(s2) == fingerprint(s1)
    restore(s2, blob)
    for b in data[cut:]:
        s2.emit(b)
    # the list sink is stateful too: it comes back with the first ``cut`` results
    assert len(resumed) == len(full) == len(data)
    for a, b in zip(resumed, full):
        same(a, b)


def test_state_signature_names_the_configuration() -> None:
    s = Stream()
    sdf = DataFrame(s, example=example())
    a = sdf.window(n=7).groupby("name").amount.sum().stream
    b = sdf.window(n=8).groupby("name").amount.sum().stream
    assert "n=7" in a.state_signature()
    assert a.state_signature() != b.state_signature()
    assert a.is_stateful


def test_window_state_is_its_batches_and_restores_the_schema() -> None:
    s, _ = build("window_n_groupby_var")
    for b in batches(5, seed=4):
        s.emit(b)
    node = next(n for n in topological(s) if type(n).__name__ == "Aggregate")
    state = node.get_state()
    assert state["acc"] is None  # rebuilt from the kept batches on restore
    assert list(state["schema"].index) == ["name", "amount", "x"]
    s2, out = build("window_n_groupby_var")
    restore(s2, snapshot(s))
    bad = batches(1, seed=5)[0].assign(amount=0.5)
    with pytest.raises(SchemaError, match="column 'amount' changed dtype from 'int64'"):
        s2.emit(bad)


def test_checkpoints_of_the_sum_of_squares_layout_restore_as_moments() -> None:
    """States written before the moments layout ((sum, sum of squares, count)) still restore."""
    data = batches(6, seed=6)
    whole = pd.concat(data)
    s = Stream()
    sdf = DataFrame(s, example=example())
    var = sdf.x.var()
    gvar = sdf.groupby("name").x.var()
    L, G = var.stream.sink_to_list(), gvar.stream.sink_to_list()
    first = pd.concat(data[:3])
    x = first.x
    var.stream.set_state({"acc": (x.sum(), (x**2).sum(), x.count()), "parts": [], "rows": 0})
    g = first.groupby("name").x
    old = KeyedAcc.from_partial([g.sum(), (first.x**2).groupby(first.name).sum(), g.count()])
    del old.__dict__["layout"]  # as unpickled from the older layout
    gvar.stream.set_state({"acc": old, "parts": [], "rows": 0})
    for b in data[3:]:
        s.emit(b)
    assert L[-1] == pytest.approx(whole.x.var(), rel=1e-9)
    tm.assert_series_equal(G[-1], whole.groupby("name").x.var(), rtol=1e-9)
