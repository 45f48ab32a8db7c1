"""The graph without Graphviz's dot program: ``rivermark graph`` and visualize()'s message."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.errors import ConfigurationError

APP = """\
from rivermark import Stream

def parse_a_rather_long_function_name_that_must_not_be_cut(line):
    return line

src = Stream.from_iterable(["a"], name="lines")
parsed = src.map(parse_a_rather_long_function_name_that_must_not_be_cut, name="parse")
parsed.filter(lambda x: x, name="nonempty").sink_to_list(name="out")
parsed.sink_to_list(name="all")
"""


def rivermark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rivermark.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_graph_command_prints_dot_and_mermaid(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    dot = rivermark("graph", f"{app}:src")
    assert dot.returncode == 0, dot.stderr
    assert dot.stdout.startswith("digraph rivermark {\n    rankdir=LR;")
    assert "map: parse_a_rather_long_function_name_that_must_not_be_cut" in dot.stdout
    assert '"nonempty" [label="filter: <lambda>"' in dot.stdout
    edges = re.findall(r'^    "(\w+)" -> "(\w+)";$', dot.stdout, flags=re.M)
    assert sorted(edges) == sorted(
        [("lines", "parse"), ("parse", "nonempty"), ("parse", "all"), ("nonempty", "out")]
    )
    mermaid = rivermark("graph", f"{app}:src", "--format", "mermaid")
    assert mermaid.returncode == 0, mermaid.stderr
    lines = mermaid.stdout.splitlines()
    assert lines[0] == "flowchart LR"
    assert '    parse["map: parse_a_rather_long_function_name_that_must_not_be_cut"]' in lines
    assert "    parse --> nonempty" in lines and "    nonempty --> out" in lines
    bad = rivermark("graph", f"{app}:src", "--format", "png")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_visualize_without_dot_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a PATH on which the dot program cannot be found (the machine may have it elsewhere)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("dot") is None
    s = Stream(name="src")
    s.map(str).sink_to_list()
    with pytest.raises(
        ConfigurationError, match=re.escape("needs the Graphviz 'dot' program")
    ) as e:
        s.visualize(str(tmp_path / "g.png"))
    assert "apt-get install graphviz" in str(e.value) and "rivermark graph" in str(e.value)
    assert not (tmp_path / "g.png").exists()
    assert os.environ["PATH"] == str(empty)
