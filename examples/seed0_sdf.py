"""Seed 0: a streaming DataFrame over JSON-lines batches, windowed with state, resumed.

The streamz version of this pipeline (streamz issue "Publishing and Retrieving
SDFs for SDF Checkpointing") had to publish the window's state by hand after
every batch, so the state and the Kafka offsets could drift apart.  In
rivermark the window is a stateful node: a checkpoint snapshots it (with the
source positions, in a Job) and a restart restores it.

This version runs in memory: the batches are lists of JSON lines (what
``from_kafka_batched`` delivers), the "crash" happens after batch ``CUT`` and
the state is carried over with ``get_state``/``set_state`` keyed by the stable
node ids, exactly what a checkpointing job stores.  Run it with::

    .venv/bin/python examples/seed0_sdf.py

The same pipeline on a real Kafka broker, run as a checkpointed Job and
killed repeatedly, is ``examples/seed0_kafka.py``.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import random
from typing import Any

import pandas as pd

from rivermark import Stream
from rivermark.core.graph import node_ids, topological
from rivermark.dataframe import DataFrame

logger = logging.getLogger(__name__)

NAMES = ["Alice", "Tom", "Linda", "Bob"]
CUT = 7


def make_batches(n: int = 15, seed: int = 0) -> list[list[bytes]]:
    rng = random.Random(seed)
    return [
        [
            json.dumps({"Name": rng.choice(NAMES), "Amount": rng.randrange(1, 500)}).encode()
            for _ in range(rng.randrange(1, 4))
        ]
        for _ in range(n)
    ]


def preprocess(messages: list[bytes]) -> pd.DataFrame:
    text = "\n".join(m.decode("utf-8") for m in messages)
    return pd.read_json(io.StringIO(text), lines=True)


def window_func(window_df: Any) -> tuple[Any, pd.DataFrame]:
    """As in the seed: receives ``(state, window)`` with ``with_state=True``."""
    state = None
    if isinstance(window_df, tuple):
        state, window_df = window_df
    aggs = window_df.groupby(["Name"]).agg({"Amount": "sum"}).reset_index()
    return state, aggs


def build() -> tuple[Stream, list[Any]]:
    source = Stream()
    example = pd.DataFrame(
        {"Name": pd.Series([], dtype=object), "Amount": pd.Series([], dtype="int64")}
    )
    sdf = DataFrame(source.map(preprocess), example=example)
    out = sdf.window(5, with_state=True).apply(window_func).stream
    return source, out.map(lambda pair: pair[1]).sink_to_list()


def snapshot(root: Stream) -> bytes:
    ids = node_ids(root)
    return pickle.dumps({ids[id(n)]: n.get_state() for n in topological(root) if n.is_stateful})


def restore(root: Stream, blob: bytes) -> None:
    ids = node_ids(root)
    states = pickle.loads(blob)
    for n in topological(root):
        if n.is_stateful:
            n.set_state(states[ids[id(n)]])


def main() -> tuple[pd.DataFrame, pd.DataFrame]:
    batches = make_batches()
    source, uninterrupted = build()
    for b in batches:
        source.emit(b)

    source1, _ = build()
    for b in batches[:CUT]:
        source1.emit(b)
    blob = snapshot(source1)  # what a checkpoint stores; the process then dies

    source2, resumed = build()
    restore(source2, blob)
    for b in batches[CUT:]:
        source2.emit(b)
    return uninterrupted[-1], resumed[-1]


if __name__ == "__main__":
    a, b = main()
    print(b)
    assert a.equals(b), "resumed run differs from the uninterrupted one"
    print("resumed run equals the uninterrupted run")
