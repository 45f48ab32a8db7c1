"""A batch's groups by key and window, taken with numpy, are pandas' ``groupby`` groups; the
open-window store's bulk paths are its one-window-at-a-time paths."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.dataframe import DataFrame
from rivermark.dataframe.windowgroups import BatchGroups, KeyCodes, Partials, built_in_partials
from rivermark.operators.windowstore import BulkWindows, OpenWindows


def _strings(rng: np.random.Generator, n: int, dtype: str) -> pd.Series:
    words = np.array(["b", "a", "ab", "c", "B"], dtype=object)[rng.integers(0, 5, n)]
    words[rng.random(n) < 0.15] = None
    return pd.Series(words, dtype=dtype)


#: key columns of each kind for ``n`` rows (missing keys among them)
KEYS: dict[str, Callable[[np.random.Generator, int], list[pd.Series]]] = {
    "int": lambda rng, n: [pd.Series(rng.integers(-3, 7, n))],
    "float-nan": lambda rng, n: [
        pd.Series(np.where(rng.random(n) < 0.2, np.nan, rng.integers(0, 5, n) * 0.5))
    ],
    "object-none": lambda rng, n: [_strings(rng, n, "object")],
    "str": lambda rng, n: [_strings(rng, n, "str")],
    "bool": lambda rng, n: [pd.Series(rng.random(n) < 0.5)],
    "two": lambda rng, n: [pd.Series(rng.integers(0, 3, n)), _strings(rng, n, "object")],
    "none": lambda rng, n: [],
    # more codes than rows: the distinct codes found by sorting, not counted per code
    "wide": lambda rng, n: [pd.Series(rng.integers(0, 10**6, n))],
}


@pytest.mark.parametrize("how", ["size", "count", "sum", "mean", "min", "max"])
@pytest.mark.parametrize("kind", sorted(KEYS))
def test_a_batchs_groups_and_partials_are_those_of_pandas_groupby(kind: str, how: str) -> None:
    rng = np.random.default_rng(sorted(KEYS).index(kind))
    n = 300
    keys = KEYS[kind](rng, n)
    values = [
        pd.Series(np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n))),
        pd.Series(rng.integers(-50, 50, n)),
    ]
    # rows taken more than once (a hopping window's) and rows left out (late ones)
    rows = np.sort(rng.integers(0, n, 2 * n))
    spread = 1000 if kind == "wide" else 4
    window = rng.integers(0, spread, len(rows)) + 100
    # what the windows did before: a frame of the rows, grouped by the keys and the window
    names = [f"k{i}" for i in range(len(keys))]
    frame = pd.DataFrame(
        {
            **{m: k.to_numpy()[rows] for m, k in zip(names, keys)},
            "v0": values[0].to_numpy()[rows],
            "v1": values[1].to_numpy()[rows],
            "w": window,
        }
    )
    grouped = frame.groupby([*names, "w"], sort=True, observed=True, dropna=True)
    labels = grouped.size().index
    if not names:
        want_keys: list[Any] = [None] * len(labels)
    elif len(names) == 1:
        want_keys = labels.get_level_values(0).tolist()
    else:
        want_keys = list(zip(*(labels.get_level_values(i).tolist() for i in range(len(names)))))
    want = Partials(how, ["v0", "v1"]).of_groups(grouped, np.empty(0, np.int64), frame)

    groups = BatchGroups.of(KeyCodes.of([k.to_numpy() for k in keys]), window, rows)
    assert groups is not None
    assert groups.keys == want_keys
    assert groups.windows.tolist() == labels.get_level_values(-1).tolist()
    assert groups.sizes.tolist() == grouped.size().tolist()
    got = built_in_partials(how, groups, [v.to_numpy() for v in values], rows)
    assert repr(got) == repr(want)  # the same values and types, NaN included


def test_keys_whose_codes_pass_an_int64_are_left_to_pandas() -> None:
    big = [pd.Series(np.arange(70_000) * 7) for _ in range(4)]  # 70,000**4 > 2**62
    codes = KeyCodes.of([k.to_numpy() for k in big])
    assert BatchGroups.of(codes, np.zeros(70_000, dtype=np.int64), np.arange(70_000)) is None


class _Clock:
    due = math.inf


def test_fixed_windows_opened_merged_and_closed_in_bulk_are_those_one_at_a_time() -> None:
    rnd = random.Random(4)
    one, bulk = OpenWindows(_Clock(), grace=1.0), BulkWindows(_Clock(), grace=1.0)
    one.open.take_delta(), bulk.open.take_delta()  # from here on, both record their changes
    for step in range(60):
        ids = sorted({(rnd.choice("abcde"), rnd.randrange(step, step + 4) * 5.0) for _ in range(8)})
        parts = [rnd.randrange(1, 9) for _ in ids]
        for (k, start), part in zip(ids, parts):
            cur = one.open.get((k, start))
            one.put(k, start, start + 10.0, part if cur is None else cur[2] + part, cur)
        curs = bulk.lookup(ids)
        olds = [(i, c, p) for i, c, p in zip(ids, curs, parts) if c is not None]
        bulk.update_fixed(
            [o[0] for o in olds], [o[1] for o in olds], [o[1][2] + o[2] for o in olds]
        )
        news = [(i, p) for i, c, p in zip(ids, curs, parts) if c is None]
        bulk.open_fixed([i for i, _ in news], [i[1] + 10.0 for i, _ in news], [p for _, p in news])
        # a restored store's clock looks again at the next batch (due -inf)
        assert bulk.clock.due in (one.clock.due, -math.inf) and bulk.next_due() == one.next_due()
        watermark = step * 5.0 - rnd.choice([0.0, 3.0, 6.0])
        assert bulk.pop_due(watermark) == one.pop_due(watermark)
        assert dict(bulk.open) == dict(one.open)
        assert bulk.open.take_delta().changes == one.open.take_delta().changes
        if step % 20 == 19:  # restored from its state, it goes on the same
            restored = BulkWindows(_Clock(), grace=1.0)
            restored.set_state({"open": dict(bulk.open), "seq": bulk.seq})
            restored.open.take_delta()
            assert restored.buckets == bulk.buckets and sorted(restored.spans) == sorted(bulk.spans)
            bulk = restored
    assert len(one) > 5 and bulk.next_due() == one.next_due()


EXAMPLE = pd.DataFrame({"ts": pd.Series([], dtype=float), "k": pd.Series([], dtype="int64")})


def _run(batches: list[pd.DataFrame], tmp_path: Path, **job: Any) -> tuple[pd.DataFrame, str]:
    source = Stream.from_iterable(batches, name="src")
    timed = DataFrame(source, example=EXAMPLE).timestamps("ts", max_delay=2, name="times")
    counts = timed.hopping_window(10, 5).groupby("k").ts.count(name="w")
    out: list[pd.DataFrame] = []
    kept: list[str] = []

    def keep(frame: pd.DataFrame) -> None:
        kept.append(type(counts.window_node.store.open).__name__)
        out.append(frame)

    counts.stream.sink(keep)
    Job(source, checkpoint=tmp_path / "ckpt", every=None, **job).run()
    return pd.concat(out, ignore_index=True), kept[0]


def test_frame_windows_in_rocksdb_are_those_in_memory(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    ts = np.arange(6000) * 0.01 + rng.uniform(0, 2, 6000)
    keys = rng.integers(0, 40, 6000)
    batches = [
        pd.DataFrame({"ts": ts[i : i + 500], "k": keys[i : i + 500]}) for i in range(0, 6000, 500)
    ]
    memory, held = _run(batches, tmp_path / "memory")
    rocks, held_rocks = _run(batches, tmp_path / "rocks", state="rocksdb", state_dir=tmp_path / "s")
    assert (held, held_rocks) == ("KeyedState", "RocksKeyedState")
    pd.testing.assert_frame_equal(rocks, memory)
    assert memory.ts.sum() == 2 * 6000  # each row in two windows, none late
