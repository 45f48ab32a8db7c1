"""docs/quickstart.md as a newcomer follows it: every command of the page, in order, in a
fresh virtual environment made from a copy of the checkout (``pip install`` included); the
job runs, shows its page and metrics, stops on Ctrl-C (SIGINT) and resumes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from rivermark.testing import wait_for

from .observe.test_prometheus_server import free_port
from .test_wheel import _clean_env, _project_files

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), flags=re.S)


class Shell:
    """Runs the page's commands in ``cwd`` as a shell would, after the activation line."""

    def __init__(self, cwd: Path, ports: dict[str, str]) -> None:
        self.cwd = cwd
        self.ports = ports
        self.activated = False
        self.ran: list[str] = []

    def _script(self, line: str) -> str:
        for theirs, ours in self.ports.items():
            line = line.replace(theirs, ours)
        return (". .venv/bin/activate && exec " if self.activated else "exec ") + line

    def run(self, line: str, timeout: float = 900) -> str:
        self.ran.append(line)
        res = subprocess.run(
            ["bash", "-c", self._script(line)],
            cwd=self.cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert res.returncode == 0, f"{line}: {res.stdout}\n{res.stderr}"
        return res.stdout

    def start(self, line: str) -> subprocess.Popen[str]:
        self.ran.append(line)
        return subprocess.Popen(
            ["bash", "-c", self._script(line)],
            cwd=self.cwd, env=_clean_env(), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip


def _ctrl_c(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out, err


def _totals(cwd: Path) -> list[dict[str, Any]]:
    path = cwd / "totals.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_every_command_of_the_quickstart_works_from_a_fresh_virtualenv(tmp_path: Path) -> None:
    cwd = tmp_path / "rivermark"
    for rel in _project_files():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, cwd / rel)
    (python_block,) = _blocks("python")
    assert len(python_block.splitlines()) <= 22  # "a 20-line job"
    (cwd / "app.py").write_text(python_block)
    commands = [c for b in _blocks("bash") for c in b.splitlines() if c.strip()]
    ui, metrics = str(free_port()), str(free_port())
    sh = Shell(cwd, {"8080": ui, "9100": metrics})
    todo = list(commands)

    def next_is(prefix: str) -> str:
        line = todo.pop(0)
        assert line.startswith(prefix), (line, prefix)
        return line

    sh.run(next_is("python3 -m venv .venv"))
    assert next_is(". .venv/bin/activate")
    sh.activated = True
    sh.ran.append(". .venv/bin/activate")
    sh.run(next_is("pip install "))
    sh.run(next_is("printf "))
    run_line = next_is("rivermark run app.py:orders")
    job = sh.start(run_line)
    try:
        wait_for(lambda: len(_totals(cwd)) == 2 or job.poll() is not None, what="the first totals")
        assert job.poll() is None
        sh.run(next_is('echo \'{"user": "ann", "amount": 7}\''))
        wait_for(lambda: len(_totals(cwd)) == 3, what="the total of the appended order")
        assert json.loads(sh.run(next_is("tail -n 1 totals.jsonl"))) == {"ann": 12, "bob": 3}
        shown = sh.run(next_is("curl -s http://127.0.0.1:9100/metrics"))
        assert shown.strip().endswith(" 1.0"), shown
        status = json.loads(sh.run(next_is("curl -s http://127.0.0.1:8080/api/job")))
        assert status["status"] == "running"
        assert status["counts"]["parse"]["errors_skipped"] == 1
        assert status["counts"]["orders"]["records_out"] == 4
    finally:
        out, err = _ctrl_c(job)
    stopped = err.strip().splitlines()[-1]
    assert re.fullmatch(
        r"stopped by the user \(Ctrl-C\) at orders: 4 records, position 96; last checkpoint "
        r"epoch \d+; run the same command again to resume",
        stopped,
    ), err
    sh.run(next_is('echo \'{"user": "bob", "amount": 4}\''))
    assert next_is("rivermark run app.py:orders") == run_line  # the same command
    again = sh.start(run_line)
    try:
        wait_for(lambda: len(_totals(cwd)) == 4, what="the resumed totals")
        assert _totals(cwd)[-1] == {"ann": 12, "bob": 7}
    finally:
        out, err = _ctrl_c(again)
    first = out.splitlines()[0]
    assert re.fullmatch(
        r"resuming from checkpoint \d+ written \d+s ago; positions: orders byte 96; "
        r"the previous run: stopped \(Ctrl-C \(SIGINT\)\)",
        first,
    ), out
    listed = sh.run(next_is("rivermark checkpoints list ckpt"))
    assert "resumed from" in listed, listed
    assert todo == [] and sh.ran == commands
    # the page's figures are the ones the doc shows
    text = PAGE.read_text()
    assert "orders: 4 records, position 96;" in text and "orders byte 96;" in text
    assert '{"ann": 12, "bob": 7}' in text
    assert os.path.exists(cwd / "ckpt" / "job.json")
