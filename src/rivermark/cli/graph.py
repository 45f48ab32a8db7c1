"""``rivermark graph``: an app's graph as Graphviz dot or Mermaid text."""

from __future__ import annotations

import click

from rivermark._app import load_app
from rivermark.cli.group import cli
from rivermark.cli.options import app_argument, logged

__all__ = ["graph_command"]


def _do_graph(target: str, fmt: str) -> int:
    from rivermark.observe.graphtext import to_dot, to_mermaid

    node = load_app(target)
    print(to_dot(node) if fmt == "dot" else to_mermaid(node))
    return 0


@cli.command("graph")
@app_argument
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["dot", "mermaid"]),
    default="dot",
    show_default=True,
    help="Graphviz dot source or a Mermaid flowchart.",
)
@logged
def graph_command(target: str, fmt: str) -> int:
    """Print the graph of APP.py:NAME as text (no Graphviz 'dot' program needed).

    Render dot output with 'dot -Tpng -o graph.png'; Mermaid output renders in
    GitHub markdown and many editors.
    """
    return _do_graph(target, fmt)
