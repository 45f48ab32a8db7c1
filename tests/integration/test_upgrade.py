"""Upgrading a job's code with its state, through the real ``rivermark run``.

Each case runs an app on a growing input file, stops it once its output is
written (with a savepoint, ``rivermark stop --savepoint``; the rename also
with SIGKILL; later runs with SIGTERM), changes the app (a node renamed, removed, added),
appends input and runs again (an app that needs a migration runs its
own ``Job``): the output equals a plain-Python reference.
Without the upgrade option the second run is refused with exit 2, a line
naming the node, and the output as it was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from itertools import accumulate
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing import wait_for

RIVERMARK = str(Path(sys.executable).parent / "rivermark")
TOKEN = "a-control-token-of-test-0123456789"

HEAD = """\
import os
from rivermark import Stream

def add(a, x):
    return a + x

def inc(a, x):
    return a + 1

def top(a, x):
    return max(a, x)

source = Stream.from_textfile(os.environ["UP_IN"], name="lines")
nums = source.map(int)
"""

SUM = 'nums.accumulate(add, start=0, name="{name}").sink_to_textfile("sum.txt", name="out-sum")\n'
COUNT = (
    'nums.accumulate(inc, start=0, name="count").sink_to_textfile("count.txt", name="out-count")\n'
)
TOP = 'nums.accumulate(top, start=-1, name="top").sink_to_textfile("top.txt", name="out-top")\n'

FIRST = list(range(0, 60))
SECOND = list(range(60, 130))


class App:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.input = tmp_path / "in.txt"
        self.ckpt = tmp_path / "ckpt"
        self.runs = 0

    def write(self, *parts: str) -> None:
        (self.dir / "app.py").write_text(textwrap.dedent(HEAD + "".join(parts)))

    def feed(self, values: list[int]) -> None:
        with self.input.open("a") as f:
            f.writelines(f"{v}\n" for v in values)

    def text_lines(self, name: str) -> list[str]:
        p = self.dir / name
        return p.read_text().splitlines() if p.exists() else []

    def lines(self, name: str) -> list[int]:
        return [int(x) for x in self.text_lines(name)]

    def command(self, *flags: str) -> list[str]:
        if flags[:1] == ("--own-job",):
            return [sys.executable, "app.py", str(self.ckpt)]
        return [
            RIVERMARK,
            "run",
            "app.py:source",
            "-c",
            str(self.ckpt),
            "--every",
            "0.2s",
            "--quiet",
            "--log-level",
            "info",
            *flags,
        ]

    def run_until(self, want: dict[str, int], *flags: str, stop: int | str = signal.SIGTERM) -> str:
        """Run until each output file has its number of lines, then ``stop``; the log.

        ``stop="savepoint"``: ``rivermark stop --savepoint`` through the job's
        control API; the last checkpoint is then a savepoint.
        """
        self.runs += 1
        log = self.dir / f"stderr-{self.runs}.txt"
        env = {**os.environ, "UP_IN": str(self.input), "RIVERMARK_CONTROL_TOKEN": TOKEN}
        command = self.command(*flags) + (["--ui", "0"] if stop == "savepoint" else [])
        with log.open("w") as err:
            proc = subprocess.Popen(command, cwd=self.dir, env=env, stderr=err)
            try:
                # the output is there, and the job has written a checkpoint since it started
                wait_for(
                    lambda: (
                        proc.poll() is not None
                        or (
                            all(len(self.text_lines(n)) >= k for n, k in want.items())
                            and " written: " in log.read_text()
                        )
                    ),
                    timeout=120,
                    what=f"output {want}",
                )
                assert proc.poll() is None, log.read_text()
                if isinstance(stop, str):
                    res = subprocess.run(
                        [RIVERMARK, "stop", "--savepoint", str(self.ckpt)],
                        env=env, capture_output=True, text=True, timeout=120,
                    )  # fmt: skip
                    assert res.stdout.startswith("stopped; final savepoint"), res.stderr
                    assert proc.wait(timeout=60) == 0, log.read_text()
                    store = LocalDirectoryStore(self.ckpt)
                    assert store.read_manifest(store.list_epochs()[-1]).savepoint
                else:
                    proc.send_signal(stop)
                    code = proc.wait(timeout=60)
                    assert code == (0 if stop == signal.SIGTERM else -stop), log.read_text()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        text = log.read_text()
        assert "Traceback" not in text, text
        return text

    def diff(self, *flags: str) -> subprocess.CompletedProcess[str]:
        args = [RIVERMARK, "checkpoints", "diff", str(self.ckpt), "--against", "app.py:source"]
        env = {**os.environ, "UP_IN": str(self.input)}
        return subprocess.run(
            [*args, *flags], cwd=self.dir, env=env, capture_output=True, text=True, timeout=120
        )

    def refused(self, *flags: str) -> str:
        """Run once more; it must refuse with exit 2 and leave the output as it was."""
        before = {p.name: p.read_bytes() for p in self.dir.glob("*.txt") if "stderr" not in p.name}
        env = {**os.environ, "UP_IN": str(self.input)}
        res = subprocess.run(
            self.command(*flags), cwd=self.dir, env=env, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 2, (res.returncode, res.stderr)
        assert "Traceback" not in res.stderr, res.stderr
        after = {p.name: p.read_bytes() for p in self.dir.glob("*.txt") if "stderr" not in p.name}
        assert after == before
        return res.stderr


def sums(values: list[int]) -> list[int]:
    return list(accumulate(values))


@pytest.mark.parametrize("stop", ["savepoint", signal.SIGKILL], ids=["savepoint", "sigkill"])
def test_renamed_node_keeps_its_state(tmp_path: Path, stop: int | str) -> None:
    app = App(tmp_path)
    app.write(SUM.format(name="sum"))
    app.feed(FIRST)
    app.run_until({"sum.txt": len(FIRST)}, stop=stop)
    app.write(SUM.format(name="total"))
    app.feed(SECOND)
    # what a restore would do, without running it
    diff = app.diff()
    assert diff.returncode == 2, diff.stderr
    assert "  refused: sum: removed from the graph, with " in diff.stdout, diff.stdout
    assert diff.stdout.splitlines()[-1] == "the restore would be refused"
    diff = app.diff("--rename", "sum=total", "--json")
    assert diff.returncode == 0, diff.stderr
    nodes = {d["node"]: d["action"] for d in json.loads(diff.stdout)["nodes"]}
    assert nodes == {"lines": "kept", "out-sum": "kept", "total": "renamed"}
    err = app.refused()
    assert "removed: sum: removed from the graph, with " in err, err
    assert "--rename sum=NEW-ID" in err, err
    assert "added: total: " in err, err
    log = app.run_until({"sum.txt": len(FIRST + SECOND)}, "--rename", "sum=total")
    assert app.lines("sum.txt") == sums(FIRST + SECOND)
    assert log.count("renamed: total: state of sum goes to total") == 1, log
    # the next run restores under the new id, and the rename given again changes nothing
    more = list(range(130, 150))
    app.feed(more)
    app.run_until({"sum.txt": len(FIRST + SECOND + more)}, "--rename", "sum=total")
    assert app.lines("sum.txt") == sums(FIRST + SECOND + more)
    # a misspelt old id is no rename the checkpoint records: refused, naming the ids it holds
    err = app.refused("--rename", "summ=total")
    line = next(x for x in err.splitlines() if "rename summ=total" in x)
    assert "holds no 'summ' (and records no rename of 'summ' to 'total')" in line, err
    assert "its ids are lines, out-sum, total" in line, err


def test_removed_node_is_refused_with_its_size_unless_allowed(tmp_path: Path) -> None:
    app = App(tmp_path)
    app.write(SUM.format(name="sum"), COUNT)
    app.feed(FIRST)
    app.run_until({"sum.txt": len(FIRST), "count.txt": len(FIRST)}, stop="savepoint")
    app.write(SUM.format(name="sum"))
    app.feed(SECOND)
    err = app.refused()
    line = next(x for x in err.splitlines() if "removed: count:" in x)
    assert " bytes of state in the checkpoint" in line, err
    assert "--allow-dropped-state count" in line, err
    # another id does not allow this one
    app.refused("--allow-dropped-state", "other")
    log = app.run_until({"sum.txt": len(FIRST + SECOND)}, "--allow-dropped-state", "count")
    assert app.lines("sum.txt") == sums(FIRST + SECOND)
    assert app.lines("count.txt") == list(range(1, len(FIRST) + 1))
    assert log.count("dropped: count: ") == 1, log
    assert log.count("kept: sum: restored") == 1, log


def test_allow_dropped_state_all(tmp_path: Path) -> None:
    app = App(tmp_path)
    app.write(SUM.format(name="sum"), COUNT, TOP)
    app.feed(FIRST)
    app.run_until({"top.txt": len(FIRST)})
    app.write(SUM.format(name="sum"))
    app.feed(SECOND)
    log = app.run_until({"sum.txt": len(FIRST + SECOND)}, "--allow-dropped-state", "all")
    assert app.lines("sum.txt") == sums(FIRST + SECOND)
    assert "dropped: count: " in log and "dropped: top: " in log, log


def test_added_node_starts_empty_when_allowed(tmp_path: Path) -> None:
    app = App(tmp_path)
    app.write(SUM.format(name="sum"))
    app.feed(FIRST)
    app.run_until({"sum.txt": len(FIRST)}, stop="savepoint")
    app.write(SUM.format(name="sum"), COUNT)
    app.feed(SECOND)
    err = app.refused()
    assert "added: count: " in err and "--allow-new-nodes" in err, err
    log = app.run_until(
        {"sum.txt": len(FIRST + SECOND), "count.txt": len(SECOND)}, "--allow-new-nodes"
    )
    assert app.lines("sum.txt") == sums(FIRST + SECOND)
    assert app.lines("count.txt") == list(range(1, len(SECOND) + 1))
    assert log.count("added: count: ") == 1, log


MIGRATED = """\
import logging
import sys
from rivermark.checkpoint import Job

def pair(acc, x):
    s, n = acc
    return (s + x, n + 1), f"{s + x} {n + 1}"

nums.accumulate(pair, start=(0, 0), name="sum", returns_state=True).sink_to_textfile(
    "pairs.txt", name="out-pairs"
)

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    job = Job(
        source,
        checkpoint=sys.argv[1],
        every="0.2s",
        migrate={"sum": lambda old: {"state": (old["state"], 60)}},
    )
    job.install_signal_handlers()
    job.run()
"""


MIGRATED_BY_THE_COMMAND = """\
def pair(acc, x):
    s, n = acc
    return (s + x, n + 1), f"{s + x} {n + 1}"

def upgrade(old):
    return {"state": (old["state"], 60)}

nums.accumulate(pair, start=(0, 0), name="sum", returns_state=True).sink_to_textfile(
    "pairs.txt", name="out-pairs"
)
"""


def test_rivermark_run_migrates_with_a_function_of_the_app(tmp_path: Path) -> None:
    app = App(tmp_path)
    app.write(SUM.format(name="sum"))
    app.feed(FIRST)
    app.run_until({"sum.txt": len(FIRST)}, stop="savepoint")
    app.write(MIGRATED_BY_THE_COMMAND)
    app.feed(SECOND)
    err = app.refused()
    # the refusal tells a user of the command what to pass
    assert "(rivermark run --migrate sum=FUNCTION, a function of the app)" in err, err
    wrong = subprocess.run(
        app.command("--migrate", "sum=upgrades"),
        cwd=app.dir, env={**os.environ, "UP_IN": str(app.input)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert wrong.returncode == 2, wrong.stderr
    assert wrong.stderr.strip() == (
        "rivermark run: --migrate sum=upgrades: the app 'app.py' defines no function "
        "'upgrades'; define def upgrades(old_state): return new_state there"
    ), wrong.stderr
    log = app.run_until({"pairs.txt": len(SECOND)}, "--migrate", "sum=upgrade")
    want = [f"{s} {n}" for n, s in enumerate(sums(FIRST + SECOND), 1)][len(FIRST) :]
    assert app.text_lines("pairs.txt") == want
    assert log.count("migrated: sum: state migrated from Accumulate(func=add, ") == 1, log


def test_changed_state_needs_a_migration(tmp_path: Path) -> None:
    app = App(tmp_path)
    app.write(SUM.format(name="sum"))
    app.feed(FIRST)
    app.run_until({"sum.txt": len(FIRST)}, stop="savepoint")
    app.write(MIGRATED)
    app.feed(SECOND)
    err = app.refused()
    assert "changed: sum: " in err and "(was Accumulate(func=add, " in err, err
    assert "now Accumulate(func=pair, returns_state=True" in err, err
    log = app.run_until({"pairs.txt": len(SECOND)}, "--own-job")
    everything = FIRST + SECOND
    want = [f"{s} {n}" for n, s in enumerate(sums(everything), 1)][len(FIRST) :]
    assert app.text_lines("pairs.txt") == want
    assert app.lines("sum.txt") == sums(FIRST)
    assert log.count("migrated: sum: state migrated from Accumulate(func=add, ") == 1, log
