"""The seed's DataFrame pipeline writing its running sums to PostgreSQL and to a Delta table.

argv: bootstrap topic checkpoint_dir postgresql_url delta_url

Kafka batches of JSON lines -> ``examples/seed0_kafka.py``'s end-of-input
node and ``preprocess`` -> a streaming DataFrame, its seed window
(``window(5, with_state=True)``) and its running ``groupby("Name").Amount.sum()``;
the sums go, as ``{"Name", "total"}`` rows, into a PostgreSQL table in upsert
mode and a Delta table in merge mode (both by ``Name``).  The window's
output goes to a third sink, a Delta table in append mode, one row per batch
and name.  Loaded by path (``examples/`` is not a package).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pandas as pd

import rivermark.kafka  # noqa: F401  (registers Stream.from_kafka_batched)
from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.dataframe import DataFrame

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "seed0_kafka.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("seed0_kafka", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sums_frame(sums: pd.Series) -> pd.DataFrame:
    """The running sums as rows ``{"Name", "total"}``."""
    return pd.DataFrame(
        {"Name": [str(k) for k in sums.index], "total": sums.to_numpy().astype("int64")}
    )


def main() -> None:
    bootstrap, topic, ckpt, pg_url, delta_url = sys.argv[1:6]
    seed = _example()
    source = Stream.from_kafka_batched(
        topic,
        {"bootstrap.servers": bootstrap, "group.id": f"tables-{topic}",
         "auto.offset.reset": "earliest"},
        poll_interval=0.05, max_batch_size=10,
    )  # fmt: skip
    end = seed.EndOfInput(source)
    sdf = DataFrame(end.map(seed.preprocess), example=pd.DataFrame({"Name": [], "Amount": []}))
    sums = sdf.groupby("Name").Amount.sum().stream.map(sums_frame)
    sums.to_sql(pg_url, "totals", mode="upsert", key=["Name"],
                columns={"Name": "TEXT", "total": "BIGINT"}, create=True, name="pg_totals")  # fmt: skip
    sums.to_delta(f"{delta_url}/totals", mode="merge", key=["Name"],
                  example={"Name": "x", "total": 0}, name="delta_totals")  # fmt: skip
    window = sdf.window(5, with_state=True).apply(seed.window_func).stream.map(lambda p: p[1])
    window.to_delta(f"{delta_url}/windows", example={"Name": "x", "Amount": 0}, name="windows")
    job = Job(source, checkpoint=ckpt, every="0.5s")
    end.on_end = job.stop
    job.run()


if __name__ == "__main__":
    main()
