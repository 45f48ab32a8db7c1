"""A partitioned job over several processes: rebalances, SIGKILLs, exactly-once output."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from rivermark.testing import WaitTimeout, run_in_thread, wait_progress

from .helpers import committed, consume_all, input_producer, wait_for

pytestmark = pytest.mark.kafka

APP = Path(__file__).with_name("group_app.py")
N = 6000
KEYS = 48


class Reader:
    """A read_committed consumer of the output in a thread; ``values`` grows as it reads."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.values: list[list[Any]] = []
        self._stop = threading.Event()
        self._c = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self._c.subscribe([topic])
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(500, timeout=0.2):
                if m.error() is None:
                    self.values.append(json.loads(m.value()))

    def close(self) -> None:
        self._stop.set()
        self._t.join(10)
        self._c.close()


#: an input record: key, value, and the partition and timestamp (ms) it is produced with
#: (None: the producer's choice)
Record = tuple[str, dict[str, int], int | None, int | None]


def _inputs(n: int) -> list[Record]:
    rnd = random.Random(13)
    return [
        (str(rnd.randrange(KEYS)), {"i": i, "v": rnd.randint(1, 9)}, None, None) for i in range(n)
    ]


def _expected(records: list[Record]) -> dict[str, list[Any]]:
    sums: dict[str, int] = defaultdict(int)
    out: dict[str, list[Any]] = defaultdict(list)
    for k, rec, _, _ in records:
        sums[k] += rec["v"]
        out[k].append(sums[k])
    return dict(out)


def _timed_inputs(n: int) -> list[Record]:
    """Records with event times: a key's records all go to one partition (its number mod
    8), times move 0.1 s per record, out of order by up to 8 s (beyond the 5 s delay: some
    are late), from an hour ago."""
    rnd = random.Random(17)
    base = (int(time.time()) - 3600) // 60 * 60_000
    out: list[Record] = []
    for i in range(n):
        k = rnd.randrange(KEYS)
        behind = rnd.choice([0, 0, 0, 1_000, 3_000, 8_000])
        out.append((str(k), {"i": i, "v": 1}, k % 8, base + i * 100 - behind))
    return out


def _expected_windows(records: list[Record]) -> dict[str, list[Any]]:
    """What an uninterrupted task per partition writes: the app's graph run in-process."""
    import importlib.util

    from rivermark import Stream

    spec = importlib.util.spec_from_file_location("group_app_windows", APP)
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    app.slow_one = lambda v: v  # the same records, without the work
    out: dict[str, list[Any]] = defaultdict(list)
    for p in sorted({r[2] for r in records}):
        source = Stream()
        written = app.windows_graph(source).sink_to_list()
        for k, rec, part, ms in records:
            if part == p:
                value = json.dumps({"k": k, **rec}).encode()
                source.emit(
                    value, metadata=[{"topic": "in", "partition": p, "timestamp": ms / 1000}]
                )
        for line in written:
            k, *rest = json.loads(line)
            out[k].append(rest)
    return dict(out)


@dataclass(frozen=True)
class Mode:
    """What the app computes (its last argument), its input and its committed output."""

    name: str
    inputs: Callable[[int], list[Record]]
    expected: Callable[[list[Record]], dict[str, list[Any]]]


SUMS = Mode("sums", _inputs, _expected)
WINDOWS = Mode("windows", _timed_inputs, _expected_windows)


class _SlowInput:
    """Writes a test's input on a thread, 50 records every 0.4 s; :meth:`finish` waits for it.

    A failure on the thread (a record the broker did not take) is raised by
    :meth:`finish`, not lost with the thread.
    """

    def __init__(self, bootstrap: str, topic: str, records: list[Record]) -> None:
        self.bootstrap, self.topic, self.records = bootstrap, topic, records
        self.thread, self.raised = run_in_thread(self)

    def run(self) -> None:
        p = input_producer(self.bootstrap)
        for i in range(0, len(self.records), 50):
            for k, rec, partition, ms in self.records[i : i + 50]:
                extra: dict[str, int] = {}
                if partition is not None:
                    extra["partition"] = partition
                if ms is not None:
                    extra["timestamp"] = ms
                value = json.dumps({"k": k, **rec}).encode()
                p.produce(self.topic, key=k.encode(), value=value, **extra)
            p.poll(0)
            time.sleep(0.4)
        # the producer's requests time out after two minutes (input_producer)
        left = p.flush(150)
        if left:
            raise AssertionError(f"{left} input records not delivered to {self.topic}")

    def finish(self, timeout: float = 300) -> None:
        """Wait until every record was written; raise what went wrong on the thread."""
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"the input to {self.topic} not written in {timeout} s")
        if self.raised:
            (error,) = self.raised
            raise AssertionError(f"writing the input failed: {error!r}") from error


def _by_key(values: list[list[Any]]) -> dict[str, list[Any]]:
    """The output values per key, in order: ``[key, total]`` -> total, ``[key, *rest]`` -> rest."""
    got: dict[str, list[Any]] = defaultdict(list)
    for k, *rest in values:
        got[k].append(rest[0] if len(rest) == 1 else rest)
    return dict(got)


def _assigned(text: str) -> list[tuple[int, set[int]]]:
    """(pid, partitions) of every assignment and (negative pid) revocation in the log."""
    out = []
    for m in re.finditer(r" (\d+) \S+ partitions (assigned|revoked|lost)[^:]*: (\[.*\])", text):
        parts = {int(x) for x in re.findall(r", (\d+)\)", m.group(3))}
        out.append((int(m.group(1)) * (1 if m.group(2) == "assigned" else -1), parts))
    return out


def _held(text: str, pid: int) -> set[int]:
    """The partitions process ``pid`` holds according to the log."""
    held: set[int] = set()
    for who, parts in _assigned(text):
        if who == pid:
            held |= parts
        elif who == -pid:
            held -= parts
    return held


def _scenario(
    bootstrap: str,
    new_topic: Callable[..., str],
    group: str,
    tmp_path: Path,
    location: str,
    events: list[str],
    n: int,
    killed: list[tuple[int, int, int]] | None = None,
    mode: Mode = SUMS,
    session_ms: int | None = None,
) -> str:
    """3 processes, ``events`` spread over the input by progress; checks the output exactly.

    Events: ``kill`` (SIGKILL a random process, start a replacement), ``add``
    (a fourth process), ``remove`` (SIGTERM the fourth), ``pause`` (SIGSTOP a
    process until others got its partitions, then SIGCONT).  Returns the log;
    ``killed`` receives (victim pid, replacement pid, log length at the kill)
    per kill, then (0, 0, log length) once all the output is read.
    """
    inp, out = new_topic(partitions=8, prefix="in"), new_topic(partitions=4, prefix="out")
    args = [sys.executable, str(APP), bootstrap, inp, out, group, location, mode.name]
    log = tmp_path / "procs.log"
    procs: list[subprocess.Popen[bytes]] = []

    env = dict(os.environ)
    if session_ms is not None:
        env["APP_SESSION_MS"] = str(session_ms)

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as f:
            p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=f, env=env)
        procs.append(p)
        return p

    records = mode.inputs(n)
    expected = mode.expected(records)
    outputs = sum(len(v) for v in expected.values())
    reader = Reader(bootstrap, out)
    rnd = random.Random(5)
    try:
        base = [start() for _ in range(3)]
        # every partition has a task before the input flows
        wait_for(
            lambda: len(re.findall(r"task \S+ started", log.read_text())) >= 8,
            timeout=90,
            what="8 tasks started",
        )
        feeder = _SlowInput(bootstrap, inp, records)
        extra: subprocess.Popen[bytes] | None = None
        kills = 0
        for i, event in enumerate(events):
            # by progress, so the events spread over the input whatever the machine's speed
            goal = (i + 1) * outputs // (len(events) + 2)
            # by progress too: a loaded machine (a broker starved past the sink's
            # deadlines, tasks that give up and start again) is slow, not stuck
            wait_progress(lambda: len(reader.values), goal, stall=240, what=f"{goal} outputs")
            time.sleep(rnd.uniform(0.0, 1.0))
            if event == "kill":
                victim = base.pop(rnd.randrange(len(base)))
                assert victim.poll() is None, log.read_text()[-3000:]
                at = len(log.read_text())
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                base.append(start())
                if killed is not None:
                    killed.append((victim.pid, base[-1].pid, at))
            elif event == "pause":
                # a process stopped past its session timeout loses its partitions
                # while it still holds their stores; it gives them up when it goes on
                paused = base[rnd.randrange(len(base))]
                seen = len(log.read_text())
                held = _held(log.read_text(), paused.pid)
                assert held, log.read_text()[-3000:]
                paused.send_signal(signal.SIGSTOP)
                wait_for(
                    lambda s=seen, h=held, me=paused.pid: any(
                        pid != me and parts & h for pid, parts in _assigned(log.read_text()[s:])
                    ),
                    timeout=60,
                    what="the paused process's partitions assigned to others",
                )
                paused.send_signal(signal.SIGCONT)
            elif event == "add":
                extra = start()
            else:
                assert extra is not None and extra.poll() is None, log.read_text()[-3000:]
                # a SIGTERM before the app installed its handlers would end it at once
                # (-15): it asks to stop once it is in the group, as an operator would
                wait_for(
                    lambda p=extra.pid: (
                        f" {p} rivermark.kafka.partitioned joining group" in log.read_text()
                    ),
                    timeout=120,
                    what="the added process joining the group",
                )
                extra.send_signal(signal.SIGTERM)
                assert extra.wait(timeout=90) == 0, log.read_text()[-3000:]
        assert kills == events.count("kill")
        feeder.finish()
        wait_progress(lambda: len(reader.values), outputs, stall=240, what=f"all {outputs} outputs")
        if killed is not None:
            killed.append((0, 0, len(log.read_text())))
        for p in base:
            assert p.poll() is None, log.read_text()[-3000:]
            p.send_signal(signal.SIGTERM)
        for p in base:
            assert p.wait(timeout=90) == 0, log.read_text()[-3000:]
    finally:
        reader.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    text = log.read_text()
    # a fresh read of everything committed, in order per key (one output partition each)
    msgs = consume_all(bootstrap, out, expected=outputs, timeout=60, committed_only=True)
    got = _by_key([json.loads(m.value()) for m in msgs])
    for k, want in expected.items():
        assert got.get(k) == want, (
            f"key {k}: got {len(got.get(k, []))} results, want {len(want)}; first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(got.get(k, []), want)) if a != b), None)}"
        )
    assert sum(len(v) for v in got.values()) == outputs
    # the group's offsets (for lag tools) are the final checkpoints' positions: the end
    held = committed(bootstrap, group, inp, 8)
    assert sum(held.values()) == n, (
        f"the group holds {held} ({sum(held.values())} of {n}); what the processes said of "
        "commits and partitions:\n"
        + "\n".join(
            line[-300:]
            for line in text.splitlines()
            if "commit" in line or "partitions " in line or "the group" in line
        )[-6000:]
    )
    return text


def test_three_processes_sigkills_and_a_fourth_give_exact_output(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    events = ["kill", "kill", "add", "kill", "remove", "pause", "kill", "kill"]
    location = str(tmp_path / "ckpt")
    text = _scenario(bootstrap, new_topic, group, tmp_path, location, events, N)
    # partitions moved: tasks were restored from checkpoints written by other processes
    assert len(re.findall(r"task \S+ started", text)) > 8
    assert text.count("restored checkpoint") >= 5, text[-3000:]
    assert "partitions lost (session timed out)" in text


def test_event_time_windows_per_partition_stay_exact_across_sigkills(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    # each task windows its own partition by the Kafka record timestamps, with its own
    # watermark and its open windows in RocksDB; processes are SIGKILLed, one joins and
    # leaves: the committed windows and late records are those of an uninterrupted task
    # per partition
    events = ["kill", "kill", "add", "kill", "remove"]
    location = str(tmp_path / "ckpt")
    text = _scenario(bootstrap, new_topic, group, tmp_path, location, events, 3000, mode=WINDOWS)
    assert text.count("restored checkpoint") >= 3, text[-3000:]
    # the windows live in RocksDB, a directory per task: restored from it or the store
    assert "node windows keeps open in RocksDB" in text, text[-3000:]
    assert "restored the RocksDB state of node windows" in text, text[-3000:]
    # a task that stopped closed its databases and removed their live directories; those
    # of the killed processes were removed by the partitions' next owners
    assert not list(Path(f"{location}-state").glob("*/*/*/db*")), text[-3000:]


def test_tasks_checkpoint_in_object_storage_across_sigkills(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path, bucket: str
) -> None:
    # each task's store is an ObjectStore with its own lease under s3://bucket/app/tasks/
    events = ["kill", "add", "remove", "kill"]
    text = _scenario(bootstrap, new_topic, group, tmp_path, f"s3://{bucket}/app", events, 3000)
    restored = re.findall(r"restored checkpoint \d+ from ObjectStore\('s3://([^']+)'\)", text)
    assert len(restored) >= 2 and all(r.startswith(f"{bucket}/app/tasks/") for r in restored)


def test_a_killed_process_started_again_gets_its_partitions_back_without_a_rebalance(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    # static membership: the replacement takes the dead process's identity (its
    # slot on this host), so the group hands it the same partitions at once and
    # no other process gives up or gains a partition
    killed: list[tuple[int, int, int]] = []
    location = str(tmp_path / "ckpt")
    text = _scenario(
        bootstrap, new_topic, group, tmp_path, location, ["kill", "kill"], 2400, killed
    )
    assert len(killed) == 3
    for (victim, new, at), (_, _, until) in zip(killed, killed[1:]):
        held = _held(text[:at], victim)
        # every assignment callback, empty ones too: a rebalance calls every member's
        after = _assigned(text[at:until])
        assert held and after, text[at:until][-3000:]
        assert after[0] == (new, held), (held, after)
        assert all(abs(pid) in (victim, new) for pid, _ in after), after
    assert len(re.findall(r"joining group \S+ as static member '[^']+-\d'", text)) == 5


def _transactional_id(task_store: Path) -> str | None:
    from rivermark.checkpoint import LocalDirectoryStore

    store = LocalDirectoryStore(task_store)
    for epoch in reversed(store.list_epochs() if task_store.exists() else []):
        for handle in store.read_manifest(epoch).sinks.values():
            if isinstance(handle, dict) and handle.get("transactional_id"):
                return str(handle["transactional_id"])
    return None


def test_a_fenced_task_gives_its_partition_up_and_the_process_goes_on(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    n = 1500
    inp, out = new_topic(partitions=2, prefix="in"), new_topic(partitions=4, prefix="out")
    ckpt, log = tmp_path / "ckpt", tmp_path / "procs.log"
    records = _inputs(n)
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            [sys.executable, str(APP), bootstrap, inp, out, group, str(ckpt)],
            stdout=subprocess.DEVNULL,
            stderr=f,
        )
    try:
        wait_for(lambda: log.read_text().count("started (store") >= 2, 90, "2 tasks started")
        first = _SlowInput(bootstrap, inp, records[:300])
        store = ckpt / "tasks" / f"{inp}-0"
        wait_for(
            lambda: _transactional_id(store) is not None,
            90,
            "a checkpoint of task 0 naming its transactional id",
        )
        # another producer takes the task's transactional id: the task is fenced
        fencer = ck.Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": _transactional_id(store)}
        )
        fencer.init_transactions(60)
        # the rest of the input comes after the fence, so the task writes again and
        # learns it was fenced however slowly the machine got here
        first.finish()
        rest = _SlowInput(bootstrap, inp, records[300:])
        try:
            # the fenced producer learns it when it next writes or commits; a write
            # the broker no longer answers ends at the sink's flush_timeout, a commit
            # retried on transient errors at its commit_timeout (60 s each by default)
            wait_for(
                lambda: f"task {inp}[0] gave its partition up" in log.read_text(),
                200,
                "task 0 to give its partition up",
            )
        except WaitTimeout as e:
            raise AssertionError(f"{e}; the processes' log ends:\n{log.read_text()[-6000:]}") from e
        assert proc.poll() is None, log.read_text()[-3000:]
        rest.finish()
        # the task started again from its last checkpoint, and task 1 went on
        wait_for(lambda: log.read_text().count(f"task {inp}[0] started") >= 2, 60, "task 0 again")
        msgs = consume_all(bootstrap, out, expected=n, timeout=120, committed_only=True)
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _by_key([json.loads(m.value()) for m in msgs]) == _expected(records)
    assert "Traceback" not in log.read_text()


def test_processes_stopped_together_leave_their_final_offsets_in_the_group(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    # three processes asked to stop at once: the first to leave starts a rebalance that
    # refuses the others' final commits; each tries again while it takes part in it, so
    # the group's offsets (what lag tools read) end at the input's end.  Nothing is
    # killed or paused here: a long session keeps a broker starved on a busy machine
    # from timing the members out (a session lost at the stop fails their commits)
    ckpt = str(tmp_path / "ckpt")
    _scenario(bootstrap, new_topic, group, tmp_path, ckpt, [], 1200, session_ms=30_000)
