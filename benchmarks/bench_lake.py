"""``to_parquet`` and ``to_delta`` under a Job against a plain batched writer loop, same run.

Run:  .venv/bin/python benchmarks/bench_lake.py              # 300,000 rows, local directory
      .venv/bin/python benchmarks/bench_lake.py --frames     # DataFrame batches of 10,000 rows
      .venv/bin/python benchmarks/bench_lake.py --quick      # smoke run

Append mode, one dict record per row ``{"id", "k", "v"}`` from
``Stream.from_iterable``.  The job: ``to_parquet(dir)`` / ``to_delta(dir)``
with a checkpoint every second.  The baseline: the same rows converted
(``pyarrow.Table.from_pylist``) and written by a plain loop in batches of
``--batch`` rows, without checkpoints: one ``pyarrow.parquet.write_table``
file per batch, or one ``deltalake.write_deltalake`` append per batch.  Each
figure is the median of ``--repeat`` rounds, the two ways interleaved, each
into a fresh directory.

``--frames``: the records arrive as pandas DataFrames of 10,000 rows; the
baseline converts each batch of ``--batch`` rows with
``pyarrow.Table.from_pandas`` (after ``pandas.concat``).

Not a test: it prints rows/s and the ratio job / plain, and exits 0 (1 if the
output did not hold every row once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def records(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "k": f"k{i % 1000}", "v": i * 3} for i in range(n)]


def frames(recs: list[dict[str, Any]], size: int = 10_000) -> list[Any]:
    import pandas as pd

    return [pd.DataFrame(recs[i : i + size]) for i in range(0, len(recs), size)]


def job_seconds(kind: str, out: str, recs: list[Any]) -> float:
    from rivermark import Job, Stream

    src = Stream.from_iterable(recs)
    if kind == "parquet":
        src.to_parquet(out, name="bench")
    else:
        src.to_delta(out, name="bench")
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(src, checkpoint=tmp, every="1s")
        t0 = time.perf_counter()
        job.run()
        return time.perf_counter() - t0


def to_arrow(part: list[Any]) -> Any:
    """A batch of records (or of DataFrames) as one Arrow table."""
    import pyarrow as pa

    if part and isinstance(part[0], dict):
        return pa.Table.from_pylist(part)
    import pandas as pd

    return pa.Table.from_pandas(pd.concat(part), preserve_index=False)


def plain_parquet_seconds(out: str, recs: list[Any], batch: int) -> float:
    import os

    import pyarrow.parquet as pq

    os.makedirs(out)
    t0 = time.perf_counter()
    for n, i in enumerate(range(0, len(recs), batch)):
        pq.write_table(to_arrow(recs[i : i + batch]), f"{out}/part-{n:05d}.parquet")
    return time.perf_counter() - t0


def plain_delta_seconds(out: str, recs: list[Any], batch: int) -> float:
    from deltalake import write_deltalake

    t0 = time.perf_counter()
    for i in range(0, len(recs), batch):
        write_deltalake(out, to_arrow(recs[i : i + batch]), mode="append")
    return time.perf_counter() - t0


def count(kind: str, out: str) -> int:
    import pyarrow.compute as pc

    if kind == "parquet":
        import pyarrow.dataset as ds

        t = ds.dataset(out, format="parquet").to_table(columns=["id"])
    else:
        from deltalake import DeltaTable

        t = DeltaTable(out).to_pyarrow_table(columns=["id"])
    # every row once: as many distinct ids as rows
    distinct = int(pc.count_distinct(t.column("id")).as_py())
    return distinct if distinct == t.num_rows else -1


def measure(
    kind: str, plain: Callable[[str, list[Any]], float], n: int, repeat: int, as_frames: bool
) -> bool:
    recs: list[Any] = frames(records(n)) if as_frames else records(n)
    job_t: list[float] = []
    plain_t: list[float] = []
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            out = f"{tmp}/job_{r}"
            job_t.append(job_seconds(kind, out, recs))
            ok = ok and count(kind, out) == n
            plain_t.append(plain(f"{tmp}/plain_{r}", recs))
    j, p = statistics.median(job_t), statistics.median(plain_t)
    name = ("to_parquet" if kind == "parquet" else "to_delta") + (
        " (DataFrames)" if as_frames else ""
    )
    print(
        f"{name}: under a Job {n / j:,.0f} rows/s, plain batched loop {n / p:,.0f} rows/s, "
        f"ratio {p / j:.2f}{'' if ok else '  (ROW COUNT WRONG)'}"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--frames", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    n, repeat = (20_000, 1) if a.quick else (a.rows, a.repeat)
    import deltalake  # noqa: F401  (imported once before timing: neither way pays for it)
    import pyarrow.parquet  # noqa: F401

    # with --frames, --batch counts DataFrames of 10,000 rows
    batch = max(1, a.batch // 10_000) if a.frames else a.batch
    ok = measure(
        "parquet", lambda out, recs: plain_parquet_seconds(out, recs, batch), n, repeat, a.frames
    )
    ok &= measure(
        "delta", lambda out, recs: plain_delta_seconds(out, recs, batch), n, repeat, a.frames
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
