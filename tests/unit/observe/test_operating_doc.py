"""docs/operating.md: its example runs, and its tables match the code."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from rivermark import Stream
from rivermark.checkpoint import Job
from rivermark.cli import run_command
from rivermark.observe.prometheus import collect_families

DOC = Path(__file__).resolve().parents[3] / "docs" / "operating.md"


def test_python_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), {})


def test_metric_table_is_what_the_endpoint_serves() -> None:
    documented = set(re.findall(r"^\| `(rivermark_\w+)` \|", DOC.read_text(), flags=re.M))
    source = Stream.from_iterable(range(10), name="numbers")
    source.partition(3).sink_to_list()
    job = Job(source, checkpoint=tempfile.mkdtemp(), every=None)
    job.run()
    served = set()
    for family in collect_families(job.metrics):
        suffix = "_total" if family.type == "counter" else ""
        served.add(family.name + suffix)
    assert documented == served


def test_option_table_lists_every_run_option() -> None:
    text = DOC.read_text()
    for param in run_command.params:
        if param.name in ("target", "verbose"):  # -v is described in the text
            continue
        flag = max(param.opts, key=len)  # type: ignore[attr-defined]
        assert f"`{flag}" in text or f", {flag}" in text, flag
        envvar = getattr(param, "envvar", None)
        assert envvar and f"`{envvar}`" in text, param.name
