"""The README's first example runs as written and resumes after a restart."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def first_python_block() -> str:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]


def test_readme_example_runs_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    events = [{"user": f"u{i % 3}", "amount": i - 2} for i in range(10)]
    Path("events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    code = first_python_block()
    exec(compile(code, "README.md", "exec"), {})
    lines = Path("totals.jsonl").read_text().splitlines()
    assert len(lines) == sum(1 for e in events if e["amount"] > 0)
    expected: dict[str, int] = {}
    for e in events:
        if e["amount"] > 0:
            expected[e["user"]] = expected.get(e["user"], 0) + e["amount"]
    assert json.loads(lines[-1]) == expected
    # running it again on the same checkpoint directory resumes at the end: no new output
    exec(compile(code, "README.md", "exec"), {})
    assert Path("totals.jsonl").read_text().splitlines() == lines
