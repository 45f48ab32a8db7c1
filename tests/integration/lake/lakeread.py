"""Reading what the file sinks wrote, as a reader of the dataset or table would."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rivermark.testing.s3_server import S3Server


def lake_cmd(app: str, ckpt: str, every: str = "0.2s") -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{app}:source",
        "--checkpoint", ckpt, "--every", every,
    ]  # fmt: skip


def lake_env(
    kind: str,
    url: str,
    mode: str,
    n: int,
    work: int = 0,
    base: dict[str, str] | None = None,
    paced_while_killed: bool = False,
) -> dict[str, str]:
    """The app's environment; ``paced_while_killed``: ``work`` only in the runs a crash
    harness kills (``apps/pacing.py``), the run after the last kill at full speed."""
    env = dict(os.environ if base is None else base)
    env.update(
        RIVERMARK_LAKE_KIND=kind,
        RIVERMARK_LAKE_URL=url,
        RIVERMARK_LAKE_MODE=mode,
        RIVERMARK_LAKE_N=str(n),
        RIVERMARK_APP_WORK=str(work),
    )
    if paced_while_killed:
        env["RIVERMARK_APP_WORK_WHILE_KILLED"] = "1"
    return env


#: S3 endpoint -> its filesystem
_filesystems: dict[str, Any] = {}


def _filesystem(s3: S3Server) -> Any:
    """One S3 filesystem per server: a new one per read would build an S3 client each
    time, the larger part of a read's processor time."""
    if s3.endpoint not in _filesystems:
        _filesystems[s3.endpoint] = s3.filesystem()
    return _filesystems[s3.endpoint]


def parquet_rows(url: str, s3: S3Server | None) -> list[tuple[Any, ...]]:
    """``(id, k, v, g)`` of every row in the dataset (pyarrow, Hive partitions), sorted."""
    import pyarrow.dataset as ds

    if s3 is None:
        if not os.path.isdir(url):
            return []
        d = ds.dataset(url, format="parquet", partitioning="hive")
    else:
        fs = _filesystem(s3)
        fs.invalidate_cache()  # what the bucket holds now, as a new reader would list it
        path = url[len("s3://") :]
        if not fs.exists(path):
            return []
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        d = ds.dataset(path, format="parquet", partitioning="hive",
                       filesystem=PyFileSystem(FSSpecHandler(fs)))  # fmt: skip
    if not d.files:  # the sink's own directory only (its lock), no data yet
        return []
    t = d.to_table(columns=["id", "k", "v", "g"])
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "k", "v", "g"))))


#: seconds between two reads of a poller, at least
PAUSE = 0.1


class Poller:
    """Calls ``read()`` over and over in a thread; keeps every row seen."""

    def __init__(self, read: Callable[[], list[tuple[Any, ...]]]) -> None:
        self.read = read
        self.seen: set[tuple[Any, ...]] = set()
        self.reads = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                self.seen.update(self.read())
                self.reads += 1
                # about twice for each checkpoint of the jobs (every 0.2 s), and as
                # long between reads as the last read took: the reader and the S3
                # server it asks leave the processors to the job under test
                self._stop.wait(max(PAUSE, time.monotonic() - began))
        except BaseException as e:  # reported by __exit__
            self.error = e

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def delta_rows(url: str, mode: str) -> list[tuple[Any, ...]]:
    """The table's rows at its latest version, read by DuckDB over deltalake's dataset, sorted.

    append: ``(id, k, v, g)``; merge: ``(k, total, last)``.
    """
    import duckdb
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(url):
        return []
    ds = DeltaTable(url).to_pyarrow_dataset()  # noqa: F841 - read by DuckDB below by name
    cols = "id, k, v, g" if mode == "append" else "k, total, last"
    with duckdb.connect() as con:
        return sorted(con.sql(f"SELECT {cols} FROM ds").fetchall())


def valid_totals(n: int, keys: int) -> dict[str, set[int]]:
    """Every total of a key after some prefix of ``n`` records (``apps/sinkjob.py``'s rule)."""
    valid: dict[str, set[int]] = {}
    sums: dict[str, int] = {}
    for i in range(n):
        k = f"k{i % keys}"
        if (i // keys) % 13 == 12:
            sums.pop(k, None)
            continue
        sums[k] = sums.get(k, 0) + i
        valid.setdefault(k, set()).add(sums[k])
    return valid
