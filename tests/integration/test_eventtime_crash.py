"""Event-time windows after SIGKILLs, at checkpoint fault points, and live versus backfill.

``apps/eventtime_app.py`` windows a file of out-of-order records (tumbling,
hopping, session windows, the late records, and event-time timers of a
``keyed_process``); ``apps/eventtime_frames_app.py`` windows the same rows
as streaming DataFrame batches (a line per batch of 100 rows).  Every run
must write the bytes an uninterrupted run writes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointNotFoundError, Job, open_store
from rivermark.testing import wait_for
from rivermark.testing.crash import run_uncrashed, run_with_crashes
from rivermark.testing.faults import FAULT_POINTS

pytestmark = pytest.mark.crash

APP = Path(__file__).parent / "apps" / "eventtime_app.py"
FRAMES_APP = Path(__file__).parent / "apps" / "eventtime_frames_app.py"
N = 30_000
ROWS_PER_BATCH = 100


def _lines(n: int) -> list[str]:
    out = []
    for i in range(n):
        ts = i / 100 - ((i * 7919) % 400) / 100  # up to 4 s behind
        if i % 997 == 500:
            ts -= 30  # far behind the watermark: late
        out.append(json.dumps({"v": i, "ts": round(ts, 2), "k": (i // 50) % 20}) + "\n")
    return out


def _batches(lines: list[str]) -> list[str]:
    """The same rows as JSON batches ``[[v, ts, k], ...]``, a line each."""
    rows = [json.loads(line) for line in lines]
    return [
        json.dumps([[r["v"], r["ts"], r["k"]] for r in rows[i : i + ROWS_PER_BATCH]]) + "\n"
        for i in range(0, len(rows), ROWS_PER_BATCH)
    ]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("eventtime")
    lines = _lines(N)
    (d / "in.jsonl").write_text("".join(lines))
    (d / "batches.jsonl").write_text("".join(_batches(lines)))
    return d


def _cmd(ckpt: Path, app: Path = APP) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{app}:source",
        "--checkpoint", str(ckpt), "--every", "0.2s", "--keep", "3",
    ]  # fmt: skip


def _env(workdir: Path, out: Path, work: int = 0, name: str = "in.jsonl") -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["RIVERMARK_APP_INPUT"] = str(workdir / name)
    env["RIVERMARK_APP_OUTPUT"] = str(out)
    env["RIVERMARK_APP_WORK"] = str(work)
    env["RIVERMARK_COMPACT_EVERY"] = "3"
    return env


@pytest.fixture(scope="module")
def reference(workdir: Path) -> bytes:
    out = workdir / "reference.txt"
    run_uncrashed(_cmd(workdir / "ref-ckpt"), env=_env(workdir, out))
    data = out.read_bytes()
    kinds = {line.split(b" ")[0] for line in data.splitlines()}
    assert kinds == {b"tumble", b"hop", b"session", b"late", b"alarm"}
    return data


@pytest.fixture(scope="module")
def frames_reference(workdir: Path) -> bytes:
    out = workdir / "frames-reference.txt"
    run_uncrashed(
        _cmd(workdir / "frames-ref-ckpt", FRAMES_APP), env=_env(workdir, out, 0, "batches.jsonl")
    )
    data = out.read_bytes()
    kinds = {line.split(b" ")[0] for line in data.splitlines()}
    assert kinds == {b"tumble", b"hop", b"session", b"late"}
    return data


#: app -> (script, input, fixture of its uncrashed output, checkpoint every n batches,
#: work per row, kills, seconds from start to kill); the frames app is slower per line
#: (pandas per batch of 100 rows) and needs no work added to be killed mid-data
KILLED_APPS = {
    "records": (APP, "in.jsonl", "reference", 500, 600, 15, (0.05, 0.6)),
    "frames": (FRAMES_APP, "batches.jsonl", "frames_reference", 5, 0, 8, (0.3, 1.5)),
}


def _position(ckpt: Path) -> int | None:
    try:
        store = open_store(str(ckpt), create=False)
    except CheckpointNotFoundError:
        return None
    epochs = store.list_epochs()
    if not epochs:
        return None
    return int(store.read_manifest(epochs[-1]).positions["lines"]["offset"])


@pytest.mark.parametrize("app", list(KILLED_APPS))
def test_random_kills_give_identical_windows(
    workdir: Path, app: str, request: pytest.FixtureRequest
) -> None:
    script, name, fixture, every_batches, work, kills, (early, late) = KILLED_APPS[app]
    reference = request.getfixturevalue(fixture)
    ckpt = workdir / f"random-{app}-ckpt"
    out = workdir / f"random-{app}.txt"
    size = (workdir / name).stat().st_size
    progress: list[int] = []

    def record_progress(_: int) -> None:
        p = _position(ckpt)
        if p is not None:
            progress.append(p)

    report = run_with_crashes(
        [*_cmd(ckpt, script), "--every-batches", str(every_batches)],
        env=_env(workdir, out, work, name),
        kills=kills,
        min_delay=early,
        max_delay=late,
        timeout=200,
        seed=11,
        on_kill=record_progress,
        ready=lambda pid: f"pid={pid} " in _lock_text(ckpt),
    )
    assert report.completed
    assert report.kills == kills, report.summary()  # a run that ends early holds until killed
    assert sum(0 < p < size for p in progress) >= 3, progress  # killed mid-data
    assert out.read_bytes() == reference


def _lock_text(ckpt: Path) -> str:
    try:
        return (ckpt / "LOCK").read_text()
    except OSError:
        return ""


@pytest.mark.parametrize("point", [f"{p}:3" for p in FAULT_POINTS])
def test_fault_points_give_identical_windows(workdir: Path, reference: bytes, point: str) -> None:
    tag = point.replace(":", "-")
    ckpt = workdir / f"fault-{tag}-ckpt"
    out = workdir / f"fault-{tag}.txt"
    report = run_with_crashes(
        [*_cmd(ckpt), "--every-batches", "3000"],
        env=_env(workdir, out),
        kills=0,
        fault_points=[point],
        timeout=90,
    )
    assert report.fault_kills == {point: 1}
    assert out.read_bytes() == reference


def _graph(path: Path, out: Path, stop_at_eof: bool) -> Stream:
    """The app's windows in-process, reading ``path`` (live: waiting for more lines)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("eventtime_app_mod", APP)
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    # the app imports its sibling pacing.py, as under ``rivermark run``
    sys.path.insert(0, str(APP.parent))
    try:
        spec.loader.exec_module(app)
    finally:
        sys.path.remove(str(APP.parent))
    source = Stream.from_textfile(
        str(path), stop_at_eof=stop_at_eof, poll_interval="5ms", name="lines"
    )
    times = source.map(app.parse).timestamps(app.event_time, max_delay="5s", name="times")
    tumble = times.tumbling_window(
        1, key=app.key, fold=app.count_sum, start=(0, 0), grace=1, name="tumble"
    )
    hop = times.hopping_window(4, 2, agg="mean", value=app.value, name="hop")
    sessions = times.session_window(2, key=app.key, agg="collect", value=app.value, name="sessions")
    alarms = times.keyed_process(app.note, key=app.key, on_timer=app.alarm, name="alarms")
    tumble.map(app.line("tumble")).union(
        hop.map(app.line("hop")),
        sessions.map(app.line("session")),
        tumble.late.map(app.late_line),
        alarms,
    ).sink_to_textfile(str(out), name="out")
    return source


def test_live_trickle_then_end_equals_backfill(tmp_path: Path) -> None:
    lines = _lines(6000)
    backfill_in = tmp_path / "backfill.jsonl"
    backfill_in.write_text("".join(lines))
    backfill_out = tmp_path / "backfill.txt"
    Job(_graph(backfill_in, backfill_out, True), checkpoint=tmp_path / "b", every=None).run()

    live_in, live_out = tmp_path / "live.jsonl", tmp_path / "live.txt"
    live_in.write_text("")
    source = _graph(live_in, live_out, False)
    job = Job(source, checkpoint=tmp_path / "l", every="30ms")
    runner = threading.Thread(target=job.run)
    runner.start()
    with open(live_in, "a") as f:  # records trickle in, in small bursts
        for i in range(0, len(lines), 200):
            f.write("".join(lines[i : i + 200]))
            f.flush()
            time.sleep(0.02)
    size = live_in.stat().st_size
    wait_for(lambda: source.offset == size, timeout=60)
    partial = live_out.read_bytes()
    job.stop()
    runner.join(60)
    assert partial and backfill_out.read_bytes().startswith(partial)  # windows closed live
    # the same job, now over the finished file: it ends its input and closes the rest
    Job(_graph(live_in, live_out, True), checkpoint=tmp_path / "l", every=None).run()
    assert live_out.read_bytes() == backfill_out.read_bytes()
