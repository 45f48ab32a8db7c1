"""Seed 0 over a real Kafka broker: a streaming DataFrame whose state is checkpointed.

The streamz version of this pipeline (streamz issue "Publishing and Retrieving
SDFs for SDF Checkpointing") reads JSON lines with ``from_kafka_batched``,
builds a streaming DataFrame, keeps ``window(5, with_state=True)`` and groups
it by ``Name``.  To survive a restart it published the window's state to Dask
by hand after every batch, and its author found the flaw himself:

    "the SDF checkpoint and the Kafka checkpoint are out-of-sync. The SDF
    publishing happens before the Kafka checkpointing, which is not how it
    should ideally be."

Here there is no hand-written publishing at all.  The window and the running
groupby sum are stateful nodes, the Kafka source has a position, and the
output file is a checkpointed sink; a :class:`~rivermark.checkpoint.Job`
snapshots all of them at one barrier into ONE manifest.  Killed at any moment
(``kill -9``), the next run restores the DataFrame state, seeks Kafka to the
offsets of the same snapshot and truncates the output file to the same point,
so the results come out exactly as if it had never been killed.

Run it as::

    python examples/seed0_kafka.py BOOTSTRAP TOPIC CHECKPOINT_DIR OUTPUT_FILE

(or with ``SEED0_BOOTSTRAP``, ``SEED0_TOPIC``, ``SEED0_CHECKPOINT``,
``SEED0_OUTPUT``; ``SEED0_GROUP`` names the consumer group).  Each batch adds
two JSON lines to OUTPUT_FILE: ``{"window": {name: sum}}`` (the last 5 rows)
and ``{"totals": {name: sum}}`` (everything read).  The producer ends the
input with the record ``{"Name": "__end__"}``; the app then stops gracefully
(final checkpoint).  ``SEED0_BATCH_SLEEP`` (seconds) throttles each batch, for
crash tests.

The end-of-input flag is itself checkpointed state (:class:`EndOfInput`):
a run killed after the final checkpoint restarts past the sentinel, sees the
flag in the restored state and stops at once instead of waiting for records
that never come.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
from typing import Any

import pandas as pd

import rivermark.kafka  # noqa: F401  (registers Stream.from_kafka_batched)
from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.core.refs import Metadata
from rivermark.dataframe import DataFrame

logger = logging.getLogger(__name__)

END = "__end__"


class EndOfInput(Stream):
    """Drop the end sentinel from raw Kafka batches and remember (as state) that it came.

    ``on_end`` is called when the sentinel arrives, and again when a
    checkpoint that has seen it is restored.

    >>> s = Stream()
    >>> ends = []
    >>> node = EndOfInput(s, on_end=lambda: ends.append(1))
    >>> out = node.sink_to_list()
    >>> s.emit([b'{"Name": "Bob", "Amount": 1}', b'{"Name": "__end__"}'])
    >>> out, node.ended, ends
    ([[b'{"Name": "Bob", "Amount": 1}']], True, [1])
    """

    _state_attrs = ("ended",)

    def __init__(self, upstream: Stream, on_end: Any = None, **kwargs: Any) -> None:
        self.on_end = on_end
        self.ended = False
        super().__init__(upstream, **kwargs)

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> Any:
        rest = [m for m in x if json.loads(m).get("Name") != END]
        if len(rest) < len(x):
            self.ended = True
            if self.on_end is not None:
                self.on_end()
        if not rest:
            return None
        return self._emit(rest, metadata)

    def set_state(self, state: Any) -> None:
        super().set_state(state)
        if self.ended and self.on_end is not None:
            self.on_end()


def preprocess(messages: list[bytes]) -> pd.DataFrame:
    """JSON lines (one Kafka batch) -> a pandas DataFrame, as in the seed.

    >>> preprocess([b'{"Name": "Tom", "Amount": 200}']).to_dict("list")
    {'Name': ['Tom'], 'Amount': [200]}
    """
    delay = float(os.environ.get("SEED0_BATCH_SLEEP", "0") or 0)
    if delay:
        time.sleep(delay)  # throttle, so that crash tests kill mid-run
    text = "\n".join(m.decode("utf-8") for m in messages)
    return pd.read_json(io.StringIO(text), lines=True)


def window_func(window_df: Any) -> tuple[Any, pd.DataFrame]:
    """The seed's window function; with ``with_state=True`` it gets ``(state, window)``.

    >>> w = pd.DataFrame({"Name": ["A", "B", "A"], "Amount": [1, 2, 3]})
    >>> state, aggs = window_func((None, w))
    >>> aggs.to_dict("list")
    {'Name': ['A', 'B'], 'Amount': [4, 2]}
    """
    state = None
    if isinstance(window_df, tuple):
        state, window_df = window_df
    aggs = window_df.groupby(["Name"]).agg({"Amount": "sum"}).reset_index()
    return state, aggs


def _line(kind: str, sums: dict[Any, Any]) -> str:
    return json.dumps({kind: {str(k): int(v) for k, v in sums.items()}}, sort_keys=True)


def window_line(pair: tuple[Any, pd.DataFrame]) -> str:
    """One output line for the window's per-name sums.

    >>> window_line((None, pd.DataFrame({"Name": ["B", "A"], "Amount": [2, 1]})))
    '{"window": {"A": 1, "B": 2}}'
    """
    aggs = pair[1]
    return _line("window", dict(zip(aggs["Name"], aggs["Amount"], strict=True)))


def totals_line(sums: pd.Series) -> str:
    """One output line for the running per-name sums.

    >>> totals_line(pd.Series({"Tom": 200.0, "Alice": 500.0}))
    '{"totals": {"Alice": 500, "Tom": 200}}'
    """
    return _line("totals", sums.to_dict())


def build(
    bootstrap: str, topic: str, group: str, output: str, poll_interval: float = 0.05
) -> tuple[Stream, EndOfInput]:
    """The seed pipeline; returns the Kafka source and the end-of-input node.

    >>> src, end = build("127.0.0.1:1", "t", "g", os.devnull)
    >>> type(src).__name__, end.ended
    ('KafkaBatchedSource', False)
    """
    source = Stream.from_kafka_batched(
        topic,
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"},
        poll_interval=poll_interval,
        max_batch_size=10,
    )
    end = EndOfInput(source)
    stream = end.map(preprocess)
    example = pd.DataFrame({"Name": [], "Amount": []})
    sdf = DataFrame(stream, example=example)
    # (a) the seed's windowed aggregation
    windowed = sdf.window(5, with_state=True).apply(window_func).stream.map(window_line)
    # (b) running totals over everything read
    totals = sdf.groupby("Name").Amount.sum().stream.map(totals_line)
    windowed.union(totals).sink_to_textfile(output, mode="w")
    return source, end


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args = list(sys.argv[1:] if argv is None else argv)
    env = ["SEED0_BOOTSTRAP", "SEED0_TOPIC", "SEED0_CHECKPOINT", "SEED0_OUTPUT"]
    bootstrap, topic, ckpt, output = (
        args[i] if i < len(args) else os.environ.get(name, "") for i, name in enumerate(env)
    )
    if not (bootstrap and topic and ckpt and output):
        sys.exit("usage: seed0_kafka.py BOOTSTRAP TOPIC CHECKPOINT_DIR OUTPUT_FILE")
    group = os.environ.get("SEED0_GROUP", f"seed0-{topic}")
    source, end = build(bootstrap, topic, group, output)
    job = Job(source, checkpoint=ckpt, every="0.5s")
    end.on_end = job.stop
    job.run()


if __name__ == "__main__":
    main()
