"""Shared data for the dataframe tests: random batches and a runner."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rivermark import Stream
from rivermark.dataframe import DataFrame

NAMES = ["alice", "bob", "carol", "dave", "erin"]


def example() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": pd.Series([], dtype=object),
            "amount": pd.Series([], dtype="int64"),
            "x": pd.Series([], dtype="float64"),
        }
    )


def batches(n: int = 12, seed: int = 0, sizes: tuple[int, int] = (1, 9)) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    out = []
    start = 0
    for _ in range(n):
        k = int(rng.integers(sizes[0], sizes[1]))
        idx = pd.RangeIndex(start, start + k)
        start += k
        out.append(
            pd.DataFrame(
                {
                    "name": pd.Series(rng.choice(NAMES, k), dtype=object, index=idx),
                    "amount": pd.Series(rng.integers(0, 100, k), dtype="int64", index=idx),
                    "x": pd.Series(rng.standard_normal(k), index=idx),
                }
            )
        )
    return out


def timed_batches(n: int = 12, seed: int = 1) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    out = []
    t = pd.Timestamp("2024-01-01")
    for _ in range(n):
        k = int(rng.integers(1, 6))
        steps = rng.integers(1, 2000, k).cumsum()
        idx = pd.DatetimeIndex([t + pd.Timedelta(milliseconds=int(s)) for s in steps])
        t = idx[-1]
        out.append(
            pd.DataFrame(
                {
                    "name": pd.Series(rng.choice(NAMES, k), dtype=object, index=idx),
                    "amount": pd.Series(rng.integers(0, 100, k), dtype="int64", index=idx),
                    "x": pd.Series(rng.standard_normal(k), index=idx),
                }
            )
        )
    return out


def source_and_sdf(ex: pd.DataFrame | None = None) -> tuple[Stream, DataFrame]:
    s = Stream()
    return s, DataFrame(s, example=example() if ex is None else ex)


def run(s: Stream, out: Any, data: list[pd.DataFrame]) -> list[Any]:
    L = out.stream.sink_to_list()
    for b in data:
        s.emit(b)
    return L


def prefixes(data: list[pd.DataFrame]) -> list[pd.DataFrame]:
    return [pd.concat(data[: i + 1]) for i in range(len(data))]
