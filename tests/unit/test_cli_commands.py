"""The ``rivermark`` command line: help, version, options, env vars, usage errors, output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rivermark import Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.cli import cli, main

RIVERMARK = [sys.executable, "-m", "rivermark.cli"]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RIVERMARK, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    lines = tmp_path / "in.txt"
    lines.write_text("".join(f"{i}\n" for i in range(100)))
    for more in (False, True):
        if more:  # a second run resumes at line 101 of the grown file
            with lines.open("a") as f:
                f.write("".join(f"{i}\n" for i in range(100, 300)))
        source = Stream.from_textfile(str(lines), stop_at_eof=True, name="lines")
        source.map(int).accumulate(lambda acc, x: [*acc, x], start=[], name="seen")
        Job(source, checkpoint=tmp_path / "ck", every=None).run()
    return tmp_path / "ck"


def test_version_and_help_of_every_command() -> None:
    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.startswith("rivermark, version ")
    for cmd, words in [
        ((), "Run an app"),
        (("run",), "Run APP.py:NAME (or package.module:NAME) as a checkpointed job"),
        (("checkpoints",), "Inspect a checkpoint directory"),
        (("checkpoints", "list"), "List the checkpoints"),
        (("checkpoints", "show"), "Describe checkpoint EPOCH"),
        (("checkpoints", "verify"), "Verify every checkpoint in DIR"),
        (("checkpoints", "diff"), "Compare checkpoints"),
        (("checkpoints", "export"), "Write the state of NODE in a checkpoint of DIR as rows"),
        (("checkpoints", "prune"), "Delete all but the newest --keep checkpoints"),
        (("checkpoints", "resign"), "Sign with the new key every checkpoint of DIR"),
        (("graph",), "Print the graph of APP.py:NAME as text"),
        (("ui",), "Serve a page with the checkpoint history of DIR"),
        (("savepoint",), "Take a savepoint of the running job"),
        (("stop",), "Stop the running job at DIR|URL gracefully"),
        (("replay",), "Dry-run APP.py:NAME from a checkpoint of the live job"),
    ]:
        # in this process (the entry point itself is run above and below)
        res = CliRunner().invoke(cli, [*cmd, "--help"], prog_name="rivermark")
        assert res.exit_code == 0, (cmd, res.output)
        assert words in res.output, cmd
        # the logging options are described once, in the top-level help, and
        # accepted by every subcommand
        assert ("--log-level" in res.output) == (cmd == ()), cmd
        res = CliRunner().invoke(
            cli, [*cmd, "--log-level", "info", "--help"], prog_name="rivermark"
        )
        assert res.exit_code == 0 and words in res.output, (cmd, res.output)
    # every command is listed in its group's help
    listed = run_cli("--help").stdout
    for name in ("checkpoints", "graph", "replay", "run", "savepoint", "stop", "ui"):
        assert f"\n  {name} " in listed, name
    listed = run_cli("checkpoints", "--help").stdout
    for name in ("diff", "export", "list", "prune", "resign", "show", "verify"):
        assert f"\n  {name} " in listed, name


def test_every_job_option_has_a_flag_and_an_env_var() -> None:
    text = run_cli("run", "--help").stdout
    for flag, env in [
        ("--checkpoint", "RIVERMARK_CHECKPOINT"),
        ("--every", "RIVERMARK_EVERY"),
        ("--every-batches", "RIVERMARK_EVERY_BATCHES"),
        ("--keep", "RIVERMARK_KEEP"),
        ("--exactly-once", "RIVERMARK_EXACTLY_ONCE"),
        ("--allow-new-nodes", "RIVERMARK_ALLOW_NEW_NODES"),
        ("--on-error", "RIVERMARK_ON_ERROR"),
    ]:
        assert flag in text and env in text, flag


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "app.py:x"], "Missing option '--checkpoint'"),
        (["run", "app.py:x", "-c", "d", "--keep", "0"], "'--keep'"),
        (["run", "app.py:x", "-c", "d", "--on-error", "ignore"], "'ignore'"),
        (["run", "app.py:x", "-c", "d", "--rename", "sum"], "'sum' is not OLD=NEW"),
        (["run", "app.py:x", "-c", "d", "--rename", "a=b", "--rename", "a=c"], "renamed twice"),
        (["checkpoints", "show", "d", "--bogus"], "No such option '--bogus'"),
        (["checkpoints", "lst", "d"], "No such command 'lst'"),
        (["--log-level", "loud", "checkpoints", "list", "d"], "'loud'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], words: str) -> None:
    res = run_cli(*args)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "--help" in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_env_vars_configure_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = tmp_path / "app.py"
    out = tmp_path / "out.txt"
    app.write_text(
        "from rivermark import Stream\n"
        "src = Stream.from_iterable(list(range(50)))\n"
        f"src.map(lambda x: 10 // (x % 5)).sink_to_textfile({str(out)!r})\n"
    )
    monkeypatch.setenv("RIVERMARK_CHECKPOINT", str(tmp_path / "envck"))
    monkeypatch.setenv("RIVERMARK_ON_ERROR", "skip")
    monkeypatch.setenv("RIVERMARK_KEEP", "2")
    monkeypatch.setenv("RIVERMARK_EVERY_BATCHES", "10")
    monkeypatch.setenv("RIVERMARK_EVERY", "none")
    assert main(["run", f"{app}:src"]) == 0
    # every fifth record divides by zero and is skipped, as RIVERMARK_ON_ERROR says
    assert len(out.read_text().splitlines()) == 40
    assert len(LocalDirectoryStore(tmp_path / "envck").list_epochs()) == 2  # RIVERMARK_KEEP
    # the variables go through the options' checks
    res = run_cli("run", f"{app}:src", env={"RIVERMARK_EVERY_BATCHES": "0"})
    assert res.returncode == 2 and "'--every-batches'" in res.stderr


def test_log_level_anywhere_and_json_log_format(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(
        "from rivermark import Stream\n"
        "src = Stream.from_iterable(list(range(20)))\n"
        "src.sink_to_list()\n"
    )
    for args in (
        ["--log-level", "INFO", "--log-format", "json", "run", f"{app}:src"],
        ["run", f"{app}:src", "--log-format", "json", "--log-level", "info"],
    ):
        res = run_cli(*args, "-c", str(tmp_path / "ck"), "--every", "none")
        assert res.returncode == 0, res.stderr
        records = [json.loads(line) for line in res.stderr.splitlines()]
        written = [r for r in records if r["message"].startswith("checkpoint ")]
        assert written and all(r["level"] == "INFO" and "epoch" in r for r in written)
        assert all("position" in r for r in written)


def test_list_has_a_header_and_json(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", "list", str(ckpt)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["EPOCH", "TIME"]
    epochs = LocalDirectoryStore(ckpt).list_epochs()
    assert [int(line.split()[0]) for line in lines[1:]] == epochs
    assert main(["checkpoints", "list", str(ckpt), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["epoch"] for r in rows] == epochs and all(r["error"] is None for r in rows)


def test_show_positions_with_meaning(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    middle = next(e for e in epochs if store.read_manifest(e).positions["lines"]["offset"] == 290)
    assert main(["checkpoints", "show", str(ckpt), str(middle)]) == 0
    out = capsys.readouterr().out
    assert "position lines[offset] = 290" in out
    assert "in.txt (line 101)" in out and "800 of 1090 bytes left" in out
    assert main(["checkpoints", "show", str(ckpt), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["epoch"] == epochs[-1]
    assert "(line 301)" in info["positions"]["lines"]["meaning"][0]


def test_show_state_pretty_and_truncated(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", "show", str(ckpt), "--state", "seen", "--max-chars", "0"]) == 0
    full = capsys.readouterr().out
    assert full.startswith("{'state': [0,\n") and "299]}" in full
    assert main(["checkpoints", "show", str(ckpt), "--state", "seen", "--max-chars", "40"]) == 0
    cut = capsys.readouterr().out
    assert len(cut.splitlines()[0]) < 60 and "more characters)" in cut
    assert main(["checkpoints", "show", str(ckpt), "--state", "seen", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == list(range(300))


def test_show_state_of_unknown_node_names_the_known_ones(ckpt: Path) -> None:
    res = run_cli("checkpoints", "show", str(ckpt), "--state", "nope")
    assert res.returncode == 2
    assert "no state for node 'nope'" in res.stderr and "seen" in res.stderr
    assert "Traceback" not in res.stderr


def test_diff_json(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    epochs = LocalDirectoryStore(ckpt).list_epochs()
    assert main(["checkpoints", "diff", str(ckpt), str(epochs[0]), str(epochs[-1]), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["from"] == epochs[0] and d["to"] == epochs[-1]
    assert d["positions"]["lines"][0]["offset"] == 0 and d["positions"]["lines"][1]["offset"] > 0
    assert "seen" in d["state"] and d["fingerprint_differs"] is False


def test_diff_says_what_moved_and_grew(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    epochs = LocalDirectoryStore(ckpt).list_epochs()
    assert main(["checkpoints", "diff", str(ckpt), str(epochs[0]), str(epochs[-1])]) == 0
    text = capsys.readouterr().out
    # 300 lines of "i\n": 10 of 2 bytes, 90 of 3, 200 of 4
    assert "position lines: moved +1,090 bytes (0 -> 1090)" in text, text
    assert "state seen: grew by 300 entries (0 -> 300)" in text, text
    assert main(["checkpoints", "diff", str(ckpt), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["moved"]["lines"]["unit"] == "bytes" and d["moved"]["lines"]["count"] > 0
    assert d["entries"]["seen"][1] == 300


def test_diff_counts_the_keys_of_keyed_state_across_its_deltas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rivermark import KeyedState

    def add(acc: KeyedState, x: int) -> KeyedState:
        acc[x] = acc.get(x, 0) + 1
        return acc

    for n in (100, 250, 400):  # three runs: a base, then deltas on top of it
        source = Stream.from_iterable(range(n), name="keys")
        source.accumulate(add, start=KeyedState(), name="counts")
        Job(source, checkpoint=tmp_path / "ck", every=None).run()
    store = LocalDirectoryStore(tmp_path / "ck")
    epochs = store.list_epochs()
    assert store.load_manifest(epochs[-1]).chains["counts"]["parent"] is not None  # a delta
    assert main(["checkpoints", "diff", str(tmp_path / "ck"), str(epochs[0]), str(epochs[-1])]) == 0
    text = capsys.readouterr().out
    assert "position keys: moved +400 items" in text, text
    assert "state counts: grew by 400 entries (0 -> 400)" in text, text


def test_list_says_where_each_run_began(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalDirectoryStore(ckpt)
    first, second = store.list_epochs()[0], store.list_epochs()[-1]
    assert main(["checkpoints", "list", str(ckpt)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "RUN"
    began = [line.split(None, 1)[0] + " " + line.split("  ")[-1] for line in lines[1:]]
    marked = [b for b in began if "started fresh" in b or "resumed from" in b]
    # the fixture's two runs: a fresh one, then one that resumed from the first's last
    assert marked[0] == f"{first} started fresh", lines
    assert len(marked) == 2 and marked[1].endswith(f"resumed from {second - 1}"), lines
    assert main(["checkpoints", "list", str(ckpt), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[-1]["run"]["resumed_from"] == second - 1


def test_list_shows_how_long_each_checkpoint_took(
    ckpt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["checkpoints", "list", str(ckpt)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[4:9] == ["END", "TO", "END", "WRITE", "PAUSE"]
    for line in lines[1:]:
        words = line.split()
        duration, write, pause = float(words[4]), float(words[6]), float(words[8])
        # "0.004 s  0.003 s  0.004 s": a blocking write holds the sources throughout
        assert 0 < write <= duration < 30 and 0 < pause <= duration, line
    assert main(["checkpoints", "list", str(ckpt), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["duration"] >= r["pause"] > 0 and r["duration"] >= r["write"] for r in rows)


def test_counts_carry_over_a_restore(ckpt: Path) -> None:
    store = LocalDirectoryStore(ckpt)
    last = store.read_manifest(store.list_epochs()[-1])
    # the second run read lines 101-300 only: the first run's 100 are carried
    assert last.counts is not None and last.run is not None
    assert last.run["resumed_from"] is not None
    assert last.counts["lines"] == [300, 300, 0, 0, 0, 0]
    assert last.counts["seen"] == [300, 0, 0, 0, 0, 0]  # a leaf passes nothing on


def test_export_writes_a_nodes_state_as_rows(
    tmp_path: Path, ckpt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pandas as pd

    from rivermark import KeyedState

    assert main(["checkpoints", "export", str(ckpt), "seen"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [{"index": i, "value": i} for i in range(300)]

    def add(acc: KeyedState, x: int) -> KeyedState:
        acc[f"k{x % 7}"] = acc.get(f"k{x % 7}", 0) + x
        return acc

    for n in (50, 120):  # a base and a delta on it
        source = Stream.from_iterable(range(n), name="numbers")
        source.accumulate(add, start=KeyedState(), name="sums")
        Job(source, checkpoint=tmp_path / "keyed", every=None).run()
    expected = {f"k{r}": sum(x for x in range(120) if x % 7 == r) for r in range(7)}
    out = tmp_path / "sums.parquet"
    args = ["checkpoints", "export", str(tmp_path / "keyed"), "sums"]
    assert main([*args, "--format", "parquet", "-o", str(out)]) == 0
    frame = pd.read_parquet(out)
    assert dict(zip(frame["key"], frame["value"])) == expected
    assert main([*args, "-o", str(tmp_path / "sums.jsonl")]) == 0
    lines = (tmp_path / "sums.jsonl").read_text().splitlines()
    assert {d["key"]: d["value"] for d in map(json.loads, lines)} == expected
    res = run_cli("checkpoints", "export", str(ckpt), "nope")
    assert res.returncode == 2 and "no state for node 'nope'" in res.stderr and "seen" in res.stderr
    res = run_cli("checkpoints", "export", str(ckpt), "seen", "--format", "parquet")
    assert res.returncode == 2 and "give --output FILE" in res.stderr


def test_an_option_without_its_value_points_at_the_subcommands_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "app.py:source", "--ui"]) == 2
    assert capsys.readouterr().err == (
        "rivermark: error: Option '--ui' requires an argument. (see 'rivermark run --help')\n"
    )
