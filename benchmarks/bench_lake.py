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

Each way is timed by the wall clock and by the process's CPU time (every
thread's): on a machine shared with other work the wall clock mostly measures
the scheduler, and the CPU ratio says what the job costs over the plain loop.
A job's writer thread overlaps encoding with the pipeline, which shortens the
wall time only where a core is free, and never the CPU time.

Not a test: it prints rows/s and the ratios job / plain, and exits 0 (1 if the
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


Timing = tuple[float, float]  # (wall seconds, CPU seconds)


def timed(run: Callable[[], object]) -> Timing:
    c0, t0 = time.process_time(), time.perf_counter()
    run()
    return time.perf_counter() - t0, time.process_time() - c0


def job_seconds(kind: str, out: str, recs: list[Any]) -> Timing:
    from rivermark import Job, Stream

    src = Stream.from_iterable(recs)
    if kind == "parquet":
        src.to_parquet(out, name="bench")
    else:
        src.to_delta(out, name="bench")
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(src, checkpoint=tmp, every="1s")
        return timed(job.run)


def to_arrow(part: list[Any]) -> Any:
    """A batch of records (or of DataFrames) as one Arrow table."""
    import pyarrow as pa

    if part and isinstance(part[0], dict):
        return pa.Table.from_pylist(part)
    import pandas as pd

    return pa.Table.from_pandas(pd.concat(part), preserve_index=False)


def plain_parquet_seconds(out: str, recs: list[Any], batch: int) -> Timing:
    import os

    import pyarrow.parquet as pq

    os.makedirs(out)

    def run() -> None:
        for n, i in enumerate(range(0, len(recs), batch)):
            pq.write_table(to_arrow(recs[i : i + batch]), f"{out}/part-{n:05d}.parquet")

    return timed(run)


def plain_delta_seconds(out: str, recs: list[Any], batch: int) -> Timing:
    from deltalake import write_deltalake

    def run() -> None:
        for i in range(0, len(recs), batch):
            write_deltalake(out, to_arrow(recs[i : i + batch]), mode="append")

    return timed(run)


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
    kind: str, plain: Callable[[str, list[Any]], Timing], n: int, repeat: int, as_frames: bool
) -> bool:
    recs: list[Any] = frames(records(n)) if as_frames else records(n)
    job_t: list[Timing] = []
    plain_t: list[Timing] = []
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            out = f"{tmp}/job_{r}"
            job_t.append(job_seconds(kind, out, recs))
            ok = ok and count(kind, out) == n
            plain_t.append(plain(f"{tmp}/plain_{r}", recs))
    j, p = statistics.median(t[0] for t in job_t), statistics.median(t[0] for t in plain_t)
    jc, pc = statistics.median(t[1] for t in job_t), statistics.median(t[1] for t in plain_t)
    name = ("to_parquet" if kind == "parquet" else "to_delta") + (
        " (DataFrames)" if as_frames else ""
    )
    print(
        f"{name}: under a Job {n / j:,.0f} rows/s, plain batched loop {n / p:,.0f} rows/s, "
        f"ratio {p / j:.2f}; by CPU time {n / jc:,.0f} and {n / pc:,.0f} rows/s, ratio "
        f"{pc / jc:.2f}{'' if ok else '  (ROW COUNT WRONG)'}"
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
