"""As-of join of two Kafka topics: rivermark against Quix Streams' ``join_asof``, same data.

Run:  .venv/bin/python benchmarks/bench_joins_kafka.py                 # 200k left, 20k keys x 10
      .venv/bin/python benchmarks/bench_joins_kafka.py --full          # 1M left, 100k keys x 10
      .venv/bin/python benchmarks/bench_joins_kafka.py --n 20000 --keys 2000   # a smoke run

**Records.** The input of ``bench_joins.py`` (a table of ``keys`` keys with
``versions`` versions each, ``n`` left records with random keys, times in
milliseconds): the changes as ``{"k", "ts", "v"}`` in a topic ``table``, the
left records as ``{"k", "ts", "i"}`` in a topic ``lefts``, both JSON, both
of ``--partitions`` partitions with the key deciding the partition
(``k % partitions``) and as the message key, each record's Kafka timestamp
its time; produced before any timing.  Contenders, in the same run:

- ``plain``: the plain loop of ``bench_joins.py`` over the records in
  memory (a dict of sorted version lists, ``bisect``): the baseline, 1.00;
- ``rivermark in memory``: ``bench_joins.py``'s job (``from_iterable`` of
  the records in time order, ``to_table`` + ``join_asof(how="left")``
  under ``Job(every="1s")``);
- ``rivermark Kafka``: ``from_kafka`` of each topic (read to its end) ->
  ``json.loads`` -> ``timestamps`` -> ``to_table`` / ``join_asof(how="left")``
  -> a sink, under ``Job(every="1s")`` (checkpoints in a temporary
  directory);
- ``Quix Streams``: ``app.dataframe(lefts).join_asof(app.dataframe(table),
  how="left", on_merge="keep-left")`` (the Kafka key and timestamp, state in
  RocksDB, ``commit_interval=1``, no changelog topics) -> a counter that
  stops the app at the last left record; run in a separate virtualenv
  (``.venv-peers``, see ``bench_kafka_1to1.py``), left out without it.

Time: from building the pipeline (consumers included) until the last left
record is joined; also the CPU time of the process (all threads) that ran
it.  Rates are left records per second.  Check: every contender's version
for every left record against the plain loop's; rivermark joins by event
time (a left record waits for the table's watermark) and must give exactly
the plain loop's versions.  Quix Streams joins each left record with what
its store holds when the record is read, so which version it finds depends
on how far it has read the table topic: the table reports how many of its
joins agree (not a failure).

Not a test: it prints a table and exits 0 (1 if a rivermark run joins
differently from the plain loop).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from bench_joins import Rec, inputs, load, run_plain  # noqa: E402
from bench_joins import run_rivermark as run_memory  # noqa: E402
from kafkabench import Message, broker, produce  # noqa: E402

BASE_MS = 1_700_000_000_000  # the Kafka timestamp of time 0


def in_ms(data: list[Rec]) -> list[Rec]:
    """The records with times in whole milliseconds, the left records numbered (the 4th field)."""
    out: list[Rec] = []
    i = 0
    for kind, t, k, v in data:
        if kind == "L":
            out.append((kind, round(t * 1000), k, i))
            i += 1
        else:
            out.append((kind, round(t * 1000), k, v))
    return out


def answers(joined: list[tuple[Rec, Any]]) -> dict[int, Any]:
    """{left record number: version} of the plain loop's or the in-memory job's output."""
    return {r[3]: v for r, v in joined}


def messages(data: list[Rec], partitions: int) -> Iterator[Message]:
    """The records as Kafka messages: keyed by the key, in partition ``k % partitions``."""
    for kind, t, k, v in data:
        body = {"k": k, "ts": t, "v": v} if kind == "T" else {"k": k, "ts": t, "i": v}
        yield Message(
            "table" if kind == "T" else "lefts",
            json.dumps(body).encode(),
            k % partitions,
            key=str(k).encode(),
            timestamp=BASE_MS + t,
        )


def _ts(r: dict[str, Any]) -> int:
    return int(r["ts"])


def _k(r: dict[str, Any]) -> int:
    return int(r["k"])


def _v(r: dict[str, Any]) -> Any:
    return r["v"]


def run_kafka(bootstrap: str, n: int, tmp: Path) -> tuple[float, float, dict[int, Any]]:
    import rivermark.kafka  # noqa: F401
    from rivermark import Job, Stream

    out: list[tuple[dict[str, Any], Any]] = []
    t0, c0 = time.perf_counter(), time.process_time()
    group = f"rivermark-{uuid.uuid4().hex[:8]}"

    def source(topic: str) -> Stream:
        return Stream.from_kafka(
            topic,
            {"bootstrap.servers": bootstrap, "group.id": group},
            stop_at_end=True,
            name=f"kafka-{topic}",
        )

    lefts, changes = source("lefts"), source("table")
    table = (
        changes.map(json.loads, name="parse_changes")
        .timestamps(_ts, name="table_times")
        .to_table(key=_k, value=_v, name="table")
    )
    (
        lefts.map(json.loads, name="parse_lefts")
        .timestamps(_ts, name="left_times")
        .join_asof(table, key=_k, how="left", name="join")
        .sink(out.append, name="out")
    )
    Job(lefts, checkpoint=str(tmp / f"ckpt-{group}"), every="1s").run()
    took = time.perf_counter() - t0, time.process_time() - c0
    if len(out) != n:
        raise RuntimeError(f"rivermark Kafka joined {len(out):,} left records of {n:,}")
    return took[0], took[1], {r["i"]: v for r, v in out}


# ---------------------------------------------------------------- Quix Streams (separate venv)
def quix_child(bootstrap: str, n: int, state_dir: str, result: str) -> None:
    """Run in the peers' virtualenv: join, then write the times and the joins to ``result``."""
    from quixstreams import Application

    t0, c0 = time.perf_counter(), time.process_time()
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        commit_interval=1.0,
        auto_create_topics=False,
        use_changelog_topics=False,
        state_dir=state_dir,
    )
    lefts = app.dataframe(app.topic("lefts", value_deserializer="json"))
    table = app.dataframe(app.topic("table", value_deserializer="json"))
    got: list[tuple[int, Any]] = []

    def note(d: dict[str, Any]) -> None:
        got.append((d["i"], d.get("v")))
        if len(got) >= n:
            app.stop()  # graceful: commits the last checkpoint

    lefts.join_asof(table, how="left", on_merge="keep-left", grace_ms=timedelta(days=3650)).update(
        note
    )
    app.run()
    took = {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    with open(result, "w") as f:
        json.dump({**took, "joins": got}, f)


def peers_python(arg: str | None) -> str | None:
    if arg:
        return arg
    candidate = Path(sys.prefix).parent / ".venv-peers" / "bin" / "python"
    return str(candidate) if candidate.exists() else None


def run_quix(python: str, bootstrap: str, n: int, tmp: Path) -> tuple[float, float, dict[int, Any]]:
    result = tmp / f"quix-{uuid.uuid4().hex[:8]}.json"
    cmd = [
        python,
        __file__,
        "--quix-child",
        bootstrap,
        str(n),
        str(tmp / "quix-state"),
        str(result),
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"quix child failed: {res.stderr[-2000:]}")
    got = json.loads(result.read_text())
    return float(got["seconds"]), float(got["cpu"]), {i: v for i, v in got["joins"]}


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--quix-child":
        logging.basicConfig(level=logging.WARNING)
        quix_child(argv[1], int(argv[2]), argv[3], argv[4])
        return 0
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--n", type=int, default=200_000, help="left records (default 200,000)")
    p.add_argument("--keys", type=int, default=20_000, help="table keys (default 20,000)")
    p.add_argument("--versions", type=int, default=10)
    p.add_argument("--full", action="store_true", help="1,000,000 left, 100,000 keys")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--peers-python", default=None, help="python of the venv with quixstreams")
    args = p.parse_args(argv)
    n, keys = (1_000_000, 100_000) if args.full else (args.n, args.keys)
    logging.basicConfig(level=logging.WARNING)
    start = load()
    data = in_ms(inputs(n, keys, args.versions))
    peers = peers_python(args.peers_python)

    from rivermark.testing.kafka_broker import create_topic

    rows: list[tuple[str, float, float, str]] = []
    status = 0
    c0 = time.process_time()
    secs, plain_out = run_plain(data)
    rows.append(
        (
            "plain dict of sorted lists + bisect (in memory)",
            secs,
            time.process_time() - c0,
            "baseline",
        )
    )
    expected = answers(plain_out)
    del plain_out
    c0 = time.process_time()
    secs, mem_out = run_memory(data)
    check = "ok" if answers(mem_out) == expected else "differs"
    status |= check != "ok"
    rows.append(
        (
            'rivermark in memory: from_iterable, Job(every="1s")',
            secs,
            time.process_time() - c0,
            check,
        )
    )
    del mem_out
    with broker("rivermark-bench-joins-kafka-") as (bs, tmp):
        keep = {"retention.ms": "-1"}  # the timestamps lie in the past
        create_topic(bs, "table", partitions=args.partitions, config=keep)
        create_topic(bs, "lefts", partitions=args.partitions, config=keep)
        produce(bs, messages(data, args.partitions), flush_timeout=120)
        del data
        secs, cpu, got = run_kafka(bs, n, tmp)
        check = "ok" if got == expected else "differs"
        status |= check != "ok"
        rows.append(('rivermark Kafka: from_kafka x 2, Job(every="1s")', secs, cpu, check))
        if peers is not None:
            secs, cpu, got = run_quix(peers, bs, n, tmp)
            same = sum(got.get(i) == v for i, v in expected.items())
            rows.append(
                (
                    'Quix Streams Kafka: join_asof(how="left")',
                    secs,
                    cpu,
                    f"{len(got):,} joined, {same / n:.1%} as the plain loop",
                )
            )
        else:
            print("(no peers' virtualenv: Quix Streams left out; see the module docs)")
    print(
        f"{n:,} left records, {keys:,} keys x {args.versions} versions "
        f"({keys * args.versions:,} changes), {args.partitions} partitions a topic; "
        f"load {start} at the start, {load()} at the end"
    )
    print()
    print(
        "| run | seconds | CPU seconds | left records/s | plain / this | plain / this (CPU) "
        "| check |"
    )
    print("|---|---|---|---|---|---|---|")
    base, base_cpu = rows[0][1], rows[0][2]
    for title, s, cpu, check in rows:
        print(
            f"| {title} | {s:.1f} | {cpu:.1f} | {n / s:,.0f} | {base / s:.2f} | "
            f"{base_cpu / cpu:.2f} | {check} |"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
