"""Running groupby aggregations checkpoint incrementally: deltas of the changed keys.

The per-key partials are a ``KeyedState`` (see ``rivermark.dataframe.keyed``):
a checkpoint after a batch that changed k of N keys writes those k keys;
restoring a delta chain (or a checkpoint written in the older whole form)
continues exactly as an uninterrupted run, which agrees with pandas.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as tm
import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.state import codec
from rivermark.core.graph import topological
from rivermark.dataframe import Aggregate, DataFrame

HOWS = ("sum", "count", "size", "mean", "var", "std", "min", "max")
N_KEYS = 400

#: the rows' key columns: strings, integers, a categorical, and a datetime index with a freq
CATS = pd.CategoricalDtype([f"c{i}" for i in range(30)][::-1])


def frame(rng: np.random.Generator, keys: np.ndarray, start: int) -> pd.DataFrame:
    n = len(keys)
    idx = pd.date_range("2024-01-01", periods=n, freq="s")[:] + pd.Timedelta(seconds=start)
    return pd.DataFrame(
        {
            "k": pd.Series([f"k{i:04d}" for i in keys], dtype=object),
            "c": pd.Categorical([f"c{i % 30}" for i in keys], dtype=CATS),
            "a": rng.integers(-50, 50, n).astype("int64"),
            "x": rng.standard_normal(n).round(3),
        },
    ).set_axis(pd.DatetimeIndex(idx, freq="s"))


def batches(n: int = 24, seed: int = 5) -> list[pd.DataFrame]:
    """A first batch with every key, then batches of 40 rows over a few keys each."""
    rng = np.random.default_rng(seed)
    out = [frame(rng, np.arange(N_KEYS), 0)]
    start = N_KEYS
    for _ in range(n - 1):
        hot = rng.choice(N_KEYS, 8, replace=False)
        out.append(frame(rng, rng.choice(hot, 40), start))
        start += 40
    return out


def example() -> pd.DataFrame:
    return frame(np.random.default_rng(0), np.arange(0), 0)


PIPELINES: dict[str, Callable[[DataFrame], Any]] = {
    "str_sum": lambda sdf: sdf.groupby("k").a.sum(),
    "int_mean": lambda sdf: sdf.groupby("a").x.mean(),
    "cat_var": lambda sdf: sdf.groupby("c").x.var(),
    "multi_std": lambda sdf: sdf.groupby(["c", "a"]).x.std(),
    "series_max": lambda sdf: sdf.groupby(sdf.a % 7).x.max(),
    "frame_min": lambda sdf: sdf.groupby("k")[["a", "x"]].min(),
    "frame_count": lambda sdf: sdf.groupby("k").count(),
    "size": lambda sdf: sdf.groupby("k").size(),
    "index_sum": lambda sdf: sdf.groupby(sdf.index).a.sum(),
}

#: what pandas says on all the rows seen
EXPECT: dict[str, Callable[[pd.DataFrame], Any]] = {
    "str_sum": lambda df: df.groupby("k").a.sum(),
    "int_mean": lambda df: df.groupby("a").x.mean(),
    "cat_var": lambda df: df.groupby("c", observed=True).x.var(),
    "multi_std": lambda df: df.groupby(["c", "a"], observed=True).x.std(),
    "series_max": lambda df: df.groupby(df.a % 7).x.max(),
    "frame_min": lambda df: df.groupby("k")[["a", "x"]].min(),
    "frame_count": lambda df: df.groupby("k").count(),
    "size": lambda df: df.groupby("k").size(),
    "index_sum": lambda df: df.groupby(df.index).a.sum(),
}


def build(name: str, data: list[pd.DataFrame]) -> tuple[Stream, Aggregate, list[Any]]:
    source = Stream.from_iterable(data)  # type: ignore[attr-defined]
    sdf = DataFrame(source, example=example())
    out = PIPELINES[name](sdf).stream
    node = next(n for n in topological(source) if isinstance(n, Aggregate))
    return source, node, out.sink_to_list()


def same(a: Any, b: Any, exact: bool = True) -> None:
    kw: dict[str, Any] = {} if exact else {"check_names": False, "rtol": 1e-9}
    if isinstance(a, pd.DataFrame):
        tm.assert_frame_equal(a, b, **kw)
    else:
        tm.assert_series_equal(a, b, **kw)


# ---------------------------------------------------------------- deltas of k of N keys
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("by", ["column", "series"])
def test_a_checkpoint_after_changing_k_of_n_keys_writes_those_k(how: str, by: str) -> None:
    s = Stream()
    sdf = DataFrame(s, example=example())
    g = sdf.groupby("a" if by == "column" else sdf.a * 1)
    node = getattr(g.x, how)().stream
    rng = np.random.default_rng(1)
    everything = frame(rng, np.arange(N_KEYS), 0).assign(a=np.arange(N_KEYS))
    s.emit(everything)
    first = node.get_state()["partials"]
    assert isinstance(first, KeyedState)
    delta = first.take_delta()  # the first checkpoint: a base of every key
    assert delta.complete and len(delta.changes) == N_KEYS
    changed = [3, 77, 150, 151, 399]
    s.emit(everything.iloc[changed].assign(x=[9.0, 1.0, 2.0, 3.0, 4.0]))
    state = node.get_state()
    assert state["partials"] is first  # the same container: the chain goes on
    assert first.pending_changes() == len(changed)
    changes = first.take_delta().changes
    assert set(changes) == set(changed)
    # each changed key's partial is its current one, as the next restore reads it
    (value,) = {k: v for k, v in changes.items() if k == 77}.values()
    assert value == first[77]
    # a batch of keys already written changes nothing more
    s.emit(everything.iloc[:0])
    assert node.get_state()["partials"].pending_changes() == 0


def test_a_job_writes_deltas_of_the_changed_keys(tmp_path: Path) -> None:
    data = batches()
    source, _, _ = build("str_sum", data)
    Job(source, checkpoint=tmp_path / "c", every_batches=1, compact_every=100, keep=100).run()
    store = LocalDirectoryStore(tmp_path / "c")
    epochs = store.list_epochs()
    (nid,) = store.read_manifest(epochs[-1]).chains
    links = [store.read_manifest(e).chains[nid] for e in epochs]
    written = [codec.loads(store.read_state(e, nid))["keyed"]["partials"] for e in epochs]
    # the start checkpoint (no key yet), then the first batch's 400 keys
    assert [len(w) for w in written[:2]] == [0, N_KEYS]
    later = list(zip(written[2:], links[2:]))
    deltas = [len(w) for w, link in later if link["parent"] is not None]
    bases = [len(w) for w, link in later if link["parent"] is None]
    assert len(deltas) >= len(data) // 2
    # a batch touches at most 8 of the 400 keys: its delta holds those keys only
    assert 0 < max(deltas) <= 8
    assert all(n == N_KEYS for n in bases)  # a compaction writes every key


def test_the_noted_keys_stay_bounded_by_the_keys() -> None:
    s = Stream()
    sdf = DataFrame(s, example=example())
    node = sdf.groupby("k").a.sum().stream
    assert isinstance(node, Aggregate)
    one = frame(np.random.default_rng(2), np.array([1, 2]), 0)
    for _ in range(3000):
        s.emit(one)
    book = node._book  # noqa: SLF001
    assert book is not None
    # 6,000 keys noted in 3,000 batches: merged into the 2 distinct ones on the way
    assert book._noted_len <= 1024 + len(one)  # noqa: SLF001
    partials = node.get_state()["partials"]
    assert dict(partials) == {"k0001": 3000 * one.a.iloc[0], "k0002": 3000 * one.a.iloc[1]}


# ---------------------------------------------------------------- restore
@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("compact_every", [100, 3])
def test_a_delta_chain_restores_exactly(tmp_path: Path, name: str, compact_every: int) -> None:
    data = batches()
    ref_source, _, full = build(name, data)
    for b in data:
        ref_source.emit(b)

    cut = 15
    ckpt = tmp_path / "c"
    source, _, _ = build(name, data[:cut])
    Job(source, checkpoint=ckpt, every_batches=1, compact_every=compact_every).run()
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    (nid,) = store.read_manifest(epochs[-1]).chains
    assert any(store.read_manifest(e).chains[nid]["parent"] is not None for e in epochs)

    source, node, resumed = build(name, data)
    job = Job(source, checkpoint=ckpt, every_batches=1, compact_every=compact_every)
    job.run()
    assert job.restored_epoch is not None
    assert len(resumed) == len(full) == len(data)
    for a, b in zip(resumed, full):
        same(a, b)
    same(resumed[-1], EXPECT[name](pd.concat(data)), exact=False)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_checkpoint_of_the_older_whole_form_restores(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written before the keyed form (the whole accumulator) still restores."""
    data = batches()
    cut = 11
    ckpt = tmp_path / "c"
    with monkeypatch.context() as m:
        # the state as the older version wrote it: the accumulator pickled whole
        m.setattr(Aggregate, "get_state", Aggregate._plain_state)  # noqa: SLF001
        source, _, _ = build(name, data[:cut])
        Job(source, checkpoint=ckpt, every_batches=4).run()
    store = LocalDirectoryStore(ckpt)
    old = store.read_manifest(store.list_epochs()[-1])
    assert not old.chains  # the older form: no delta chain

    source, _, resumed = build(name, data[: cut + 5])
    Job(source, checkpoint=ckpt, every_batches=1).run()
    same(resumed[-1], EXPECT[name](pd.concat(data[: cut + 5])), exact=False)
    # the keyed chain started with a base of every key, then went on with deltas
    links = [store.read_manifest(e).chains for e in store.list_epochs()]
    chained = [next(iter(c.values())) for c in links if c]
    assert chained[0]["parent"] is None
    assert any(link["parent"] is not None for link in chained)

    source, _, resumed = build(name, data)
    Job(source, checkpoint=ckpt, every_batches=1).run()
    ref_source, _, full = build(name, data)
    for b in data:
        ref_source.emit(b)
    for a, b in zip(resumed, full):
        same(a, b)
    same(resumed[-1], EXPECT[name](pd.concat(data)), exact=False)


def test_with_state_emits_a_copy_that_start_takes() -> None:
    data = batches(6)
    s = Stream()
    sdf = DataFrame(s, example=example())
    node = sdf.groupby("k").a.mean(with_state=True).stream
    out = node.sink_to_list()
    for b in data[:3]:
        s.emit(b)
    state, _ = out[-1]
    assert not isinstance(state.get("partials"), KeyedState)  # a copy, not the live container
    s2 = Stream()
    sdf2 = DataFrame(s2, example=example())
    resumed = sdf2.groupby("k").a.mean(start=pickle.loads(pickle.dumps(state))).stream
    R = resumed.sink_to_list()
    for b in data[3:]:
        s.emit(b)
        s2.emit(b)
    same(R[-1], out[-1][1])
