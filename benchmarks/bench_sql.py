"""``to_sql`` under a Job against a plain batched writer loop, same run.

Run:  .venv/bin/python benchmarks/bench_sql.py                 # 300,000 rows, SQLite
      .venv/bin/python benchmarks/bench_sql.py --pg            # also PostgreSQL (scripts/postgres)
      .venv/bin/python benchmarks/bench_sql.py --quick         # smoke run

Append mode, one dict record per row ``{"id", "k", "v"}`` from
``Stream.from_iterable``.  The job: ``to_sql(url, "out")`` with a checkpoint
every second.  The baseline: the same rows written by a plain loop in batches
of ``--batch`` rows, one transaction per batch (``sqlite3.executemany``;
psycopg ``COPY``), without checkpoints.  Each figure is the median of
``--repeat`` rounds, the two ways interleaved, each on a fresh table.

Two ratios: by wall clock, and by this process's CPU time (every thread:
the job's loop and checkpoint writer, or the plain loop).  The CPU ratio is
the steadier on a loaded machine; it leaves out the PostgreSQL server's
own work (the same ``COPY`` either way, plus the job's two-phase commit).

Not a test: it prints rows/s and the ratios job / plain, and exits 0 (1 if a
table did not hold every row once).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds() -> float:
    """This process's CPU time so far, all threads, user and system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(run: Any, *args: Any) -> tuple[float, float]:
    """(wall seconds ``run(*args)`` reports, CPU seconds the process spent in the call)."""
    c0 = cpu_seconds()
    wall = float(run(*args))
    return wall, cpu_seconds() - c0


def records(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "k": f"k{i % 1000}", "v": i * 3} for i in range(n)]


COLS = {"id": "BIGINT", "k": "TEXT", "v": "BIGINT"}


def job_seconds(url: str, recs: list[dict[str, Any]], table: str) -> float:
    from rivermark import Job, Stream

    src = Stream.from_iterable(recs)
    src.to_sql(url, table, columns=COLS, create=True)
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(src, checkpoint=tmp, every="1s")
        t0 = time.perf_counter()
        job.run()
        return time.perf_counter() - t0


def plain_sqlite_seconds(path: str, recs: list[dict[str, Any]], table: str, batch: int) -> float:
    import sqlite3

    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA synchronous=FULL")
    c.execute(f"CREATE TABLE {table} (id BIGINT, k TEXT, v BIGINT)")
    t0 = time.perf_counter()
    for i in range(0, len(recs), batch):
        rows = [(r["id"], r["k"], r["v"]) for r in recs[i : i + batch]]
        c.execute("BEGIN")
        c.executemany(f"INSERT INTO {table} (id, k, v) VALUES (?, ?, ?)", rows)
        c.execute("COMMIT")
    took = time.perf_counter() - t0
    c.close()
    return took


def plain_pg_seconds(url: str, recs: list[dict[str, Any]], table: str, batch: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (id BIGINT, k TEXT, v BIGINT)")
        t0 = time.perf_counter()
        for i in range(0, len(recs), batch):
            with (
                c.transaction(),
                c.cursor() as cur,
                cur.copy(f"COPY {table} (id, k, v) FROM STDIN") as copy,
            ):
                for r in recs[i : i + batch]:
                    copy.write_row((r["id"], r["k"], r["v"]))
        return time.perf_counter() - t0


def count(url: str, table: str) -> int:
    if url.startswith("sqlite"):
        import sqlite3

        c = sqlite3.connect(url[len("sqlite:///") :])
        n = int(c.execute(f"SELECT count(DISTINCT id) FROM {table}").fetchone()[0])
        c.close()
        return n
    import psycopg

    with psycopg.connect(url) as pc:
        return int(pc.execute(f"SELECT count(DISTINCT id) FROM {table}").fetchone()[0])


def measure(name: str, url: str, plain: Any, n: int, repeat: int) -> bool:
    import rivermark  # noqa: F401 - imported before the first timing, not in it

    recs = records(n)
    job_t: list[tuple[float, float]] = []
    plain_t: list[tuple[float, float]] = []
    ok = True
    for r in range(repeat):
        job_t.append(timed(job_seconds, url, recs, f"job_{r}"))
        ok = ok and count(url, f"job_{r}") == n
        plain_t.append(timed(plain, recs, f"plain_{r}"))
    j, p = (statistics.median(w for w, _ in job_t), statistics.median(w for w, _ in plain_t))
    jc, pc = (statistics.median(c for _, c in job_t), statistics.median(c for _, c in plain_t))
    print(
        f"{name}: to_sql under a Job {n / j:,.0f} rows/s, plain batched loop {n / p:,.0f} rows/s, "
        f"ratio {p / j:.2f} by wall clock; CPU {jc:.2f} s against {pc:.2f} s, ratio {pc / jc:.2f}"
        f"{'' if ok else '  (ROW COUNT WRONG)'}"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument(
        "--pg", action="store_true", help="also PostgreSQL, started by scripts/postgres"
    )
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    n, repeat = (20_000, 1) if a.quick else (a.rows, a.repeat)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        db = f"{tmp}/bench.db"
        ok &= measure(
            "SQLite", f"sqlite:///{db}",
            lambda recs, t: plain_sqlite_seconds(db, recs, t, a.batch), n, repeat,
        )  # fmt: skip
    if a.pg:
        d = tempfile.mkdtemp(prefix="rivermark-pg-bench-")
        script = str(ROOT / "scripts" / "postgres")
        url = subprocess.run([script, "start", d], capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        try:
            ok &= measure(
                "PostgreSQL", url,
                lambda recs, t: plain_pg_seconds(url, recs, t, a.batch), n, repeat,
            )  # fmt: skip
        finally:
            subprocess.run([script, "stop", d], check=False)
            shutil.rmtree(d, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
