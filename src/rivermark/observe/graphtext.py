"""The graph as text: Graphviz ``dot`` source and Mermaid, without the ``dot`` program.

``rivermark graph APP.py:NAME [--format dot|mermaid]`` prints these.  Node
labels are the nodes' full ``str`` (never cut); ids are the stable ids the
checkpoints use.  The layout is left to right, as the live page draws it.

>>> from rivermark import Stream
>>> s = Stream(name="src")
>>> _ = s.map(str, name="text").sink_to_list(name="out")
>>> print(to_mermaid(s))
flowchart LR
    src(["Stream"])
    text["map: str"]
    out["sink_to_list"]
    src --> text
    text --> out
"""

from __future__ import annotations

from rivermark.core.graph import dot_quote, node_ids, node_label, topological
from rivermark.core.node import Stream

__all__ = ["to_dot", "to_mermaid"]


def _label(n: Stream) -> str:
    return node_label(n)


def to_dot(node: Stream) -> str:
    """Graphviz source of ``node``'s graph (render it with ``dot -Tpng``).

    >>> from rivermark import Stream
    >>> s = Stream(name="src")
    >>> _ = s.filter(lambda x: x > 0, name="positive")
    >>> print(to_dot(s))  # doctest: +ELLIPSIS
    digraph rivermark {
        rankdir=LR;
        "src" [label="Stream", shape=ellipse, style="rounded,filled", fillcolor=white];
        "positive" [label="filter: <lambda>", shape=ellipse, ...];
        "src" -> "positive";
    }
    """
    ids = node_ids(node)
    lines = ["digraph rivermark {", "    rankdir=LR;"]
    order = topological(node)
    for n in order:
        lines.append(
            f"    {dot_quote(ids[id(n)])} [label={dot_quote(_label(n))}, "
            f"shape={n._graphviz_shape}, style={dot_quote(n._graphviz_style)}, "
            f"fillcolor={n._graphviz_fillcolor}];"
        )
    for n in order:
        for d in n.downstreams:
            lines.append(f"    {dot_quote(ids[id(n)])} -> {dot_quote(ids[id(d)])};")
    lines.append("}")
    return "\n".join(lines)


def _mermaid_text(text: str) -> str:
    return '"' + text.replace('"', "#quot;").replace("\n", " ") + '"'


def to_mermaid(node: Stream) -> str:
    """Mermaid ``flowchart`` source of ``node``'s graph (GitHub and many editors render it)."""
    ids = node_ids(node)
    names: dict[int, str] = {}
    lines = ["flowchart LR"]
    order = topological(node)
    for i, n in enumerate(order):
        nid = ids[id(n)]
        safe = nid if nid.replace("-", "_").replace("_", "").isalnum() else f"n{i}"
        names[id(n)] = safe
        label = _mermaid_text(_label(n))
        shape = f"([{label}])" if not n.upstreams else f"[{label}]"
        lines.append(f"    {safe}{shape}")
    for n in order:
        for d in n.downstreams:
            lines.append(f"    {names[id(n)]} --> {names[id(d)]}")
    return "\n".join(lines)
