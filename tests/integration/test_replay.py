"""``rivermark replay``: a dry run of a job's new code over the input between two checkpoints.

The live job and the replays are real ``python -m rivermark`` processes on
real files; the side outputs are compared with plain Python computations of
both versions of the app, and the live checkpoints and outputs are hashed
before and after.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointMismatchError, Job, LocalDirectoryStore
from rivermark.checkpoint.protocol.upgrade import UpgradeRules
from rivermark.checkpoint.stores.names import file_name
from rivermark.checkpoint.tools.replay import ReplayError, plan_replay, run_replay
from rivermark.kafka.sink import ToKafka
from rivermark.kafka.source import KafkaBatchedSource
from rivermark.sinks.side import StandIn
from rivermark.testing import wait_for

N = 1000

APP = """\
from rivermark import Stream


def scale(x):
    return {scale}


def number(acc, x):
    return (acc[0] + 1, x)


def called(x):
    with open({calls!r}, "a") as f:
        f.write(f"{{x}}\\n")


source = Stream.from_textfile({inp!r}, stop_at_eof=True, name="lines")
numbered = source.map(int).map(scale).accumulate(number, start=(0, 0), name="numbered")
numbered.map(lambda t: f"{{t[0]}}:{{t[1]}}").sink_to_textfile({out!r}, name="out")
numbered.sink(called, name="calls")
"""

OLD = "x"
NEW = "x * 2 if x % 2 == 0 else x"


def old_scale(x: int) -> int:
    return x


def new_scale(x: int) -> int:
    return x * 2 if x % 2 == 0 else x


def rivermark(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rivermark", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


class Live:
    """A live job's files: its input, checkpoints, outputs, and the two versions of its app."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.inp = root / "in.txt"
        self.ck = root / "live-ck"
        self.out = root / "out.txt"
        self.calls = root / "calls.txt"
        self.inp.write_text("".join(f"{i}\n" for i in range(N)))
        fill = {"inp": str(self.inp), "out": str(self.out), "calls": str(self.calls)}
        self.app = root / "app.py"
        self.app.write_text(APP.format(scale=OLD, **fill))
        self.new = root / "new_app.py"
        self.new.write_text(APP.format(scale=NEW, **fill))

    def run(self) -> None:
        res = rivermark(
            "run", f"{self.app}:source", "-c", str(self.ck), "--every-batches", "100", "-q",
            "--keep", "50",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr

    def epochs(self) -> list[int]:
        return LocalDirectoryStore(self.ck).list_epochs()

    def offset(self, epoch: int) -> int:
        return int(LocalDirectoryStore(self.ck).read_manifest(epoch).positions["lines"]["offset"])

    def sink_length(self, epoch: int) -> int:
        return int(LocalDirectoryStore(self.ck).read_manifest(epoch).sinks["out"]["length"])

    def hashes(self) -> dict[str, str]:
        """sha256 of every file of the live job: checkpoints, outputs, input."""
        files = [p for p in self.ck.rglob("*") if p.is_file()]
        files += [self.out, self.calls, self.inp]
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def expected(live: Live, scale: Any, start: int, end: int | None) -> list[str]:
    """What the app with ``scale`` writes for the input lines in bytes [start, end)."""
    data = live.inp.read_bytes()
    before = data[:start].count(b"\n")
    lines = data[start:end].decode().splitlines()
    return [f"{before + k + 1}:{scale(int(v))}" for k, v in enumerate(lines)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Live:
    job = Live(tmp_path_factory.mktemp("live"))
    job.run()
    return job


def pick(live: Live) -> tuple[int, int]:
    """Two checkpoints with input between them, not the first nor the last."""
    epochs = [e for e in live.epochs() if 0 < live.offset(e) < live.inp.stat().st_size]
    assert len(epochs) >= 6, epochs
    return epochs[1], epochs[4]


def test_replay_writes_what_the_new_code_would_between_two_checkpoints(
    live: Live, tmp_path: Path
) -> None:
    e1, e2 = pick(live)
    before = live.hashes()
    side = tmp_path / "side"
    res = rivermark(
        "replay", f"{live.new}:source", "--from", f"{live.ck}@{e1}", "--until", str(e2),
        "--output", str(side),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert live.hashes() == before  # the live checkpoints, outputs and input: untouched
    o1, o2 = live.offset(e1), live.offset(e2)
    replayed = (side / "out.txt").read_text().splitlines()
    assert replayed == expected(live, new_scale, o1, o2)
    # the live output of the same range is the old version's
    data = live.out.read_bytes()[live.sink_length(e1) : live.sink_length(e2)]
    old = data.decode().splitlines()
    assert old == expected(live, old_scale, o1, o2)
    # they differ exactly in the records the change affects: the even values
    changed = [k for k, (a, b) in enumerate(zip(old, replayed)) if a != b]
    values = [int(line.split(":")[1]) for line in old]
    assert changed == [k for k, v in enumerate(values) if v % 2 == 0] and changed
    # the plain sink(func) was not called: its records are in its side output instead
    assert (side / "calls.txt").read_text().splitlines() == [
        str((int(r.split(":")[0]), int(r.split(":")[1]))) for r in replayed
    ]
    assert sorted(p.name for p in side.iterdir()) == ["calls.txt", "out.txt"]  # no checkpoints
    assert f"out: {len(replayed):,} records -> {side / 'out.txt'}" in res.stdout


def test_diff_shows_the_changed_lines_and_exits_1(live: Live, tmp_path: Path) -> None:
    e1, e2 = pick(live)
    before = live.hashes()
    args = ["--from", f"{live.ck}@{e1}", "--until", str(e2), "--diff"]
    res = rivermark("replay", f"{live.new}:source", *args, "-o", str(tmp_path / "a"))
    assert res.returncode == 1, res.stderr
    o1, o2 = live.offset(e1), live.offset(e2)
    gone = {f"-{line}" for line in expected(live, old_scale, o1, o2)}
    came = {f"+{line}" for line in expected(live, new_scale, o1, o2)}
    shown = res.stdout.splitlines()
    assert f"+++ {tmp_path / 'a' / 'out.txt'} (replay)" in shown
    assert {line for line in shown if line.startswith("-") and not line.startswith("---")} == (
        gone - {f"-{line[1:]}" for line in came}
    )
    assert "calls: not compared: a Sink cannot read back what it wrote" in res.stdout
    # the unchanged app replays exactly what the live job wrote
    res = rivermark("replay", f"{live.app}:source", *args, "-o", str(tmp_path / "b"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "out: the same as the live output" in res.stdout
    assert not any(line.startswith(("---", "+++", "@@")) for line in res.stdout.splitlines())
    assert live.hashes() == before


def test_until_end_reads_the_input_to_its_end(live: Live, tmp_path: Path) -> None:
    e1, _ = pick(live)
    before = live.hashes()
    side = tmp_path / "side"
    res = rivermark(
        "replay", f"{live.new}:source", "--from", f"{live.ck}@{e1}", "--until", "end", "-o",
        str(side),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = (side / "out.txt").read_text().splitlines()
    assert got == expected(live, new_scale, live.offset(e1), None)
    assert got[-1] == f"{N}:{new_scale(N - 1)}"
    assert live.hashes() == before


def test_from_defaults_to_the_newest_checkpoint(live: Live, tmp_path: Path) -> None:
    res = rivermark("replay", f"{live.new}:source", "--from", str(live.ck), "--until", "end",
                    "-o", str(tmp_path / "s"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "s" / "out.txt").read_text() == ""  # the newest is at the input's end


@pytest.mark.parametrize(
    "args, words",
    [
        (["--from", "{ck}@999", "--until", "end"], "'--from': checkpoint 999 is not retained"),
        (["--from", "{ck}@{e1}", "--until", "999"], "'--until': checkpoint 999 is not retained"),
        (["--from", "{ck}@{e2}", "--until", "{e1}"], "'--until': checkpoint {e1} is before"),
        (["--from", "{root}/nowhere", "--until", "end"], "'--from': no such checkpoint directory"),
        (["--from", "{ck}@x", "--until", "end"], "must be an epoch number"),
        (["--from", "{ck}", "--until", "soon"], "'soon' is neither an epoch number nor 'end'"),
        (["--from", "{ck}", "--until", "end", "--diff"], "give --until EPOCH"),
        (["--from", "{ck}", "--until", "end", "-o", "{ck}/side"], "inside the live checkpoint"),
    ],
)
def test_usage_errors_are_one_line_exit_2(live: Live, args: list[str], words: str) -> None:
    e1, e2 = pick(live)
    fill = {"ck": str(live.ck), "e1": e1, "e2": e2, "root": str(live.root)}
    given = [a.format(**fill) for a in args]
    if "-o" not in given:
        given += ["-o", str(live.root / "never")]
    before = live.hashes()
    res = rivermark("replay", f"{live.new}:source", *given)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words.format(**fill) in lines[0], res.stderr
    assert "Traceback" not in res.stderr and "replay --help" in lines[0]
    assert not (live.root / "never").exists() and live.hashes() == before


NUMBERS_APP = """\
from rivermark.sources.base import Source


class Numbers(Source):
    replayable = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._position = 0

    async def run(self):
        while self._position < 300 and not self.stopped:
            await self._emit_record(self._position, self._position + 1)


source = Numbers(name="numbers")
source.sink_to_textfile({out!r}, name="out")
"""


def test_a_source_that_cannot_stop_is_refused_in_one_line(tmp_path: Path) -> None:
    app = tmp_path / "numbers.py"
    app.write_text(NUMBERS_APP.format(out=str(tmp_path / "out.txt")))
    ck = tmp_path / "ck"
    res = rivermark("run", f"{app}:source", "-c", str(ck), "--every-batches", "100", "-q")
    assert res.returncode == 0, res.stderr
    e1, e2 = LocalDirectoryStore(ck).list_epochs()[:2]
    for until, words in [
        (str(e2), "'--until': source numbers: Numbers('numbers') cannot stop at a given "
         "position (it has no stop_at()); use --until end"),
        ("end", "'--until': source numbers: Numbers('numbers') never ends"),
    ]:  # fmt: skip
        res = rivermark("replay", f"{app}:source", "--from", f"{ck}@{e1}", "--until", until,
                        "-o", str(tmp_path / "side"))  # fmt: skip
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], res.stderr


# ---------------------------------------------------------------- the pieces, in process
def test_from_textfile_stops_exactly_at_a_position(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nbb\nccc\ndddd\n")
    first = Stream.from_textfile(str(path), stop_at_eof=True)
    seen = first.sink_to_list()
    first.start()
    wait_for(lambda: first.finished)
    assert len(seen) == 4
    # stop before "ccc": an ordinary following source (no stop_at_eof) ends there
    source = Stream.from_textfile(str(path), poll_interval="1ms")
    source.stop_at({**first.position(), "offset": 5})
    got = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert got == ["a\n", "bb\n"] and source.offset == 5


def test_from_textfile_stops_after_a_last_line_emitted_without_its_delimiter(
    tmp_path: Path,
) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb\nc")
    live = Stream.from_textfile(str(path), stop_at_eof=True)
    live.start()
    wait_for(lambda: live.finished)
    target = live.position()
    assert target["unterminated"] == 1
    path.write_text("a\nb\nc\nmore\n")  # continued since: the stop is still at "c"
    source = Stream.from_textfile(str(path), poll_interval="1ms")
    source.stop_at(target)
    got = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert got == ["a\n", "b\n", "c"]


def test_from_iterable_stops_at_an_index() -> None:
    source = Stream.from_iterable(list(range(10)))
    source.seek(3)
    source.stop_at(7)
    got = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert got == [3, 4, 5, 6] and source.position() == 7
    with pytest.raises(ValueError, match="one-shot iterator"):
        Stream.from_iterable(iter([1])).stop_at(0)


def test_kafka_source_stops_at_a_checkpoint_position_and_reads_only() -> None:
    src = KafkaBatchedSource(["t"], {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    src.stop_at({"t:0": 5, "t:1": 7, "topic_ids": {"t": "abc"}})
    assert src.stop_at_end
    # a partition the position does not name is not read
    assert src.partitions.end_offsets([("t", 0), ("t", 2)]) == {("t", 0): 5, ("t", 2): 0}
    src.read_only()
    assert src.group_takeover and src.offset_committer is not None
    src.offset_committer({("t", 0): 5}, "tag")  # commits nothing, needs no broker
    sink = Stream().to_kafka("out", {"bootstrap.servers": "127.0.0.1:1"})
    assert isinstance(sink, ToKafka)
    assert sink.output_text("é") == "é\n" and sink.output_text(b"\xff") == "\ufffd\n"


def add(a: int, x: int) -> int:
    return a + x


def test_a_refused_restore_and_stand_ins(tmp_path: Path) -> None:
    live_out = tmp_path / "live.txt"
    source = Stream.from_iterable(list(range(20)), name="nums")
    source.accumulate(add, start=0, name="sum").sink_to_textfile(str(live_out), name="out")
    Job(source, checkpoint=tmp_path / "ck", every_batches=5, every=None).run()
    epochs = LocalDirectoryStore(tmp_path / "ck").list_epochs()
    before = live_out.read_bytes()

    def graph(node_name: str) -> Stream:
        src = Stream.from_iterable(list(range(20)), name="nums")
        total = src.accumulate(add, start=0, name=node_name)
        total.sink_to_textfile(str(live_out), name="out")
        return src

    # the new graph renamed the accumulate: refused as 'rivermark run' refuses it ...
    with pytest.raises(CheckpointMismatchError, match="removed from the graph"):
        plan_replay(graph("total"), f"{tmp_path / 'ck'}@{epochs[1]}", epochs[2], UpgradeRules())
    # ... and restored with the rename
    rules = UpgradeRules.checked(rename={"sum": "total"})
    plan = plan_replay(graph("total"), f"{tmp_path / 'ck'}@{epochs[1]}", epochs[2], rules)
    run = run_replay(plan, tmp_path / "side")
    assert isinstance(run.sides["out"], StandIn)
    assert run.sides["out"].live_handle == plan.start.sinks["out"]
    start = plan.start.positions["nums"]
    assert (tmp_path / "side" / "out.txt").read_text().splitlines() == [
        str(sum(range(i + 1)))
        for i in range(start, plan.until.positions["nums"])  # type: ignore[union-attr]
    ]
    assert live_out.read_bytes() == before
    with pytest.raises(ReplayError) as refused:
        plan_replay(graph("sum"), str(tmp_path / "ck"), epochs[0], UpgradeRules())
    assert refused.value.option == "until"


def test_side_outputs_of_sinks_named_anything_stay_in_the_output_directory(
    tmp_path: Path,
) -> None:
    names = ["../../up", "a/b", "a_b", "s" * 300]

    def graph() -> Stream:
        source = Stream.from_iterable(list(range(6)), name="nums")
        for i, n in enumerate(names):
            source.map(lambda x, i=i: x + i).sink_to_textfile(str(tmp_path / f"o{i}.txt"), name=n)
        return source

    Job(graph(), checkpoint=tmp_path / "ck", every_batches=2, every=None).run()
    epochs = LocalDirectoryStore(tmp_path / "ck").list_epochs()
    side = tmp_path / "deep" / "side"
    before = {p for p in tmp_path.rglob("*")}
    plan = plan_replay(graph(), f"{tmp_path / 'ck'}@{epochs[1]}", epochs[-1], UpgradeRules())
    run_replay(plan, side)
    new = {p for p in tmp_path.rglob("*")} - before
    assert new and all(p == side.parent or p.is_relative_to(side) for p in new), new
    start = plan.start.positions["nums"]
    for i, n in enumerate(names):  # one file each ("a/b" and "a_b" apart)
        got = (side / f"{file_name(n)}.txt").read_text().splitlines()
        assert got == [str(x + i) for x in range(start, 6)]


def test_the_live_sinks_output_directory_is_refused(tmp_path: Path) -> None:
    source = Stream.from_iterable([1, 2], name="nums")
    source.sink_to_textfile(str(tmp_path / "out.txt"), name="out")
    Job(source, checkpoint=tmp_path / "ck", every=None).run()
    source = Stream.from_iterable([1, 2], name="nums")
    source.sink_to_textfile(str(tmp_path / "out.txt"), name="out")
    plan = plan_replay(source, str(tmp_path / "ck"), None, UpgradeRules())
    with pytest.raises(ReplayError, match="is the live output of sink out"):
        run_replay(plan, tmp_path)
    assert os.path.getsize(tmp_path / "out.txt") == 4


def test_the_example_of_docs_upgrading_runs_as_written(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "upgrading.md").read_text()
    section = doc[doc.index("## Dry run: `rivermark replay`") :]
    script = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0]
    after = section[section.index(script) + len(script) + len("```") :]
    shown = re.findall(r"```\n(.*?)```", after, flags=re.S)[0]  # the output it prints
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIVERMARK_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    res = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert res.returncode == 1, res.stderr  # the new code's output differs
    assert res.stdout == shown


def test_a_source_that_cannot_read_again_is_refused(tmp_path: Path) -> None:
    def graph() -> Stream:
        source = Stream.from_iterable((i for i in range(10)), name="gen")
        source.sink_to_textfile(str(tmp_path / "out.txt"), name="out")
        return source

    Job(graph(), checkpoint=tmp_path / "ck", every=None).run()
    with pytest.raises(ReplayError, match="gen .* is a source that is not replayable") as refused:
        plan_replay(graph(), str(tmp_path / "ck"), None, UpgradeRules())
    assert refused.value.option == "target"


def test_a_checkpoint_whose_keyed_state_is_a_delta(tmp_path: Path) -> None:
    words = [f"w{i % 7}" for i in range(200)]

    def graph() -> Stream:
        source = Stream.from_iterable(words, name="words")
        counts = source.frequencies(name="counts")
        counts.map(lambda d: sum(d.values())).sink_to_textfile(str(tmp_path / "o.txt"), name="out")
        return source

    Job(graph(), checkpoint=tmp_path / "ck", every=None, every_batches=20).run()
    store = LocalDirectoryStore(tmp_path / "ck")
    deltas = [e for e in store.list_epochs() if store.read_manifest(e).chains["counts"]["parent"]]
    start, until = deltas[2], deltas[4]
    before = {p: p.read_bytes() for p in (tmp_path / "ck").rglob("*") if p.is_file()}
    plan = plan_replay(graph(), f"{tmp_path / 'ck'}@{start}", until, UpgradeRules())
    run_replay(plan, tmp_path / "side")
    lo, hi = (
        store.read_manifest(start).positions["words"],
        store.read_manifest(until).positions["words"],
    )
    got = (tmp_path / "side" / "out.txt").read_text().splitlines()
    assert got == [str(i + 1) for i in range(lo, hi)]  # the counts restored from the chain
    assert {p: p.read_bytes() for p in (tmp_path / "ck").rglob("*") if p.is_file()} == before


WINDOWS_APP = """\
import pandas as pd

from rivermark import Stream
from rivermark.dataframe import DataFrame


def fmt(r):
    return f"{{r.start:g}} {{r.end:g}} {{r.key}} {{r.value}}"


def rows(frame):
    return [" ".join(map(str, row)) for row in frame.itertuples(index=False)]


def burst(x):
    # bursts of 10 records a second apart, 6 s between bursts
    return x + (x // 10) * 5


source = Stream.from_textfile({inp!r}, stop_at_eof=True, name="lines")
numbers = source.map(int, name="numbers")
timed = numbers.timestamps(lambda x: x, max_delay=2, name="times")
timed.tumbling_window(10, agg="count", name="tumbling").map(fmt).sink_to_textfile(
    {out!r} + ".tumbling", name="tumbling_out"
)
timed.hopping_window(10, 5, key=lambda x: x % 2, agg="sum", name="hopping").map(fmt).sink_to_textfile(
    {out!r} + ".hopping", name="hopping_out"
)
bursts = numbers.timestamps(burst, name="burst_times")
bursts.session_window(3, key=lambda x: x % 2, agg="count", name="sessions").map(fmt).sink_to_textfile(
    {out!r} + ".session", name="session_out"
)
frames = numbers.partition(7, name="batches").map(
    lambda xs: pd.DataFrame({{"t": list(xs), "k": [x % 3 for x in xs], "v": list(xs)}})
)
sdf = DataFrame(frames, example=pd.DataFrame({{"t": [0], "k": [0], "v": [0]}}).iloc[:0])
ftimed = sdf.timestamps("t", max_delay=1)
for kind, windows in [
    ("df_tumbling", ftimed.tumbling_window(10)),
    ("df_hopping", ftimed.hopping_window(10, 5)),
    ("df_session", ftimed.session_window(0.5)),
]:
    windows.groupby("k").v.sum(name=kind).stream.map(rows).flatten().sink_to_textfile(
        {out!r} + "." + kind, name=kind + "_out"
    )
"""


def test_unchanged_code_diffs_empty_with_windows_still_open_at_the_until_checkpoint(
    tmp_path: Path,
) -> None:
    inp, out, ck = tmp_path / "in.txt", tmp_path / "out", tmp_path / "ck"
    inp.write_text("".join(f"{i}\n" for i in range(100)))
    app = tmp_path / "same.py"
    app.write_text(WINDOWS_APP.format(inp=str(inp), out=str(out)))
    res = rivermark("run", f"{app}:source", "-c", str(ck), "--every-batches", "9", "-q")
    assert res.returncode == 0, res.stderr
    store = LocalDirectoryStore(ck)
    epochs = store.list_epochs()
    assert len(epochs) >= 8, epochs
    kinds = ["tumbling", "hopping", "session", "df_tumbling", "df_hopping", "df_session"]
    for start, until in [(epochs[1], epochs[2]), (epochs[2], epochs[5]), (epochs[0], epochs[6])]:
        side = tmp_path / f"side-{start}-{until}"
        res = rivermark(
            "replay", f"{app}:source", "--from", f"{ck}@{start}", "--until", str(until),
            "--diff", "-o", str(side),
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        for kind in kinds:
            assert f"{kind}_out: the same as the live output" in res.stdout, res.stdout
        # windows were open at the until checkpoint, and closed ones were compared
        replayed = {k: (side / f"{k}_out.txt").read_text().splitlines() for k in kinds}
        assert all(replayed.values()) or start == epochs[1], replayed
    # a replay to the end of the input closes every window, as the live run's end did
    side = tmp_path / "side-end"
    res = rivermark(
        "replay", f"{app}:source", "--from", f"{ck}@{epochs[2]}", "--until", "end", "-o", str(side)
    )
    assert res.returncode == 0, res.stderr
    live_tail = (tmp_path / "out.tumbling").read_text().splitlines()
    assert (
        (side / "tumbling_out.txt").read_text().splitlines()[-1]
        == live_tail[-1]
        == "90 100 None 10"
    )
