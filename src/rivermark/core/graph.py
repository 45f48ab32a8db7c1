"""Walking a graph: ordering, stable node identity, fingerprints, pictures.

Stable identity is what checkpoints are matched by.  A node's id is its
``name=`` when one was given.  Otherwise it is derived from the graph's
shape: the node's kind, the ids of its upstreams, and its position among the
same-kind downstreams of its first upstream.  The id therefore survives a
restart of the same program, and changes when the pipeline in front of the
node changes, which is exactly when restoring its state would be wrong.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, GraphError

if TYPE_CHECKING:  # pragma: no cover
    from .node import Stream

__all__ = [
    "nodes_of",
    "ancestors",
    "topological",
    "node_ids",
    "fingerprint",
    "sources_of",
    "visualize",
    "create_graph",
]


def nodes_of(node: Stream) -> list[Stream]:
    """Every node connected to ``node``, in a deterministic order."""
    return list(node.walk())


def ancestors(node: Stream) -> Iterator[Stream]:
    """Every node upstream of ``node`` (not ``node`` itself), each once, nearest first."""
    seen: set[int] = set()
    todo = list(node.upstreams)
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        todo.extend(n.upstreams)


def sources_of(node: Stream) -> list[Stream]:
    """The nodes with no upstream in ``node``'s graph, in topological order."""
    return [n for n in topological(node) if not n.upstreams]


def topological(node: Stream) -> list[Stream]:
    """The graph's nodes, upstreams before downstreams, deterministic for a given program."""
    everything = nodes_of(node)
    roots = [n for n in everything if not n.upstreams]
    order: list[Stream] = []
    placed: set[int] = set()
    remaining = {id(n): len(n.upstreams) for n in everything}
    ready = list(roots)
    while ready:
        n = ready.pop(0)
        if id(n) in placed:
            continue
        placed.add(id(n))
        order.append(n)
        for d in n.downstreams:
            remaining[id(d)] -= 1
            if remaining[id(d)] <= 0:
                ready.append(d)
    if len(order) != len(everything):
        missing = [n for n in everything if id(n) not in placed]
        raise GraphError(
            f"the graph has a cycle through {missing[0]!r}; rivermark graphs must be acyclic"
        )
    return order


def node_ids(node: Stream) -> dict[int, str]:
    """Map ``id(n)`` to the stable id of every node in the graph.

    Raises :class:`GraphError` when two nodes would get the same id (two
    nodes given the same ``name=``).
    """
    ids: dict[int, str] = {}
    taken: dict[str, Stream] = {}
    for n in topological(node):
        if n.name is not None:
            nid = n.name
        else:
            ups = [ids[id(u)] for u in n.upstreams]
            if n.upstreams:
                first = n.upstreams[0]
                siblings = [d for d in first.downstreams if type(d) is type(n) and d.name is None]
                pos = next(i for i, d in enumerate(siblings) if d is n)
            else:
                pos = sum(1 for r in taken.values() if not r.upstreams and type(r) is type(n))
            key = "|".join([type(n).__name__, *ups, str(pos)])
            digest = hashlib.sha1(key.encode()).hexdigest()[:8]
            nid = f"{type(n).__name__.lower()}-{digest}"
        if nid in taken:
            raise GraphError(
                f"two nodes share the id {nid!r} ({taken[nid]!r} and {n!r}); "
                f"give each node a unique name= for checkpoints"
            )
        taken[nid] = n
        ids[id(n)] = nid
    return ids


def fingerprint(node: Stream) -> dict[str, str]:
    """Stable id -> configuration signature, for every stateful node and source."""
    ids = node_ids(node)
    out: dict[str, str] = {}
    for n in topological(node):
        if n.is_stateful or not n.upstreams:
            out[ids[id(n)]] = n.state_signature()
    return out


def create_graph(node: Stream, graph: Any) -> Any:
    """Add every node and edge of ``node``'s graph to ``graph`` (e.g. a ``networkx.DiGraph``).

    As streamz's ``create_graph``: each node carries ``label`` (its ``str``),
    ``shape``, ``orientation``, ``style`` and ``fillcolor``; an edge out of a
    node with several downstreams is labelled with the downstream's position.
    Nodes are keyed by their stable ids (see :func:`node_ids`).  ``graph``
    needs only ``add_node(key, **attrs)`` and ``add_edge(a, b, **attrs)``;
    it is returned.
    """
    ids = node_ids(node)
    order = topological(node)
    for n in order:
        graph.add_node(
            ids[id(n)],
            label=str(n),
            shape=n._graphviz_shape,
            orientation=str(n._graphviz_orientation),
            style=n._graphviz_style,
            fillcolor=n._graphviz_fillcolor,
        )
    for n in order:
        several = len(n.downstreams) > 1
        for i, d in enumerate(n.downstreams):
            if several:
                graph.add_edge(ids[id(n)], ids[id(d)], label=str(i))
            else:
                graph.add_edge(ids[id(n)], ids[id(d)])
    return graph


#: keyword arguments of ``graphviz.Digraph`` itself; any others are graph attributes
_DIGRAPH_KWARGS = frozenset(
    {
        "name",
        "comment",
        "filename",
        "directory",
        "format",
        "engine",
        "encoding",
        "graph_attr",
        "node_attr",
        "edge_attr",
        "body",
        "strict",
    }
)


def node_label(n: Stream) -> str:
    """The label of ``n`` in pictures: its ``str`` without the outer angle brackets.

    >>> from rivermark import Stream
    >>> node_label(Stream().filter(lambda x: x))
    'filter: <lambda>'
    """
    text = str(n)
    if text.startswith("<") and text.endswith(">"):
        text = text[1:-1]
    return text


def visualize(
    node: Stream, filename: str | None = "mystream.png", source_node: bool = False, **kwargs: Any
) -> Any:
    """Render the graph of ``node`` with graphviz; returns the ``graphviz.Digraph``.

    With ``filename=None`` nothing is written.  As in streamz, keyword
    arguments are graph attributes (``visualize(rankdir="LR")``) unless one
    of them is an argument of ``graphviz.Digraph`` (``graph_attr=``,
    ``engine=``, ...), in which case they all go to ``graphviz.Digraph``.
    """
    try:
        import graphviz
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "visualize() needs the graphviz package: pip install 'rivermark[viz]'"
        ) from e
    if _DIGRAPH_KWARGS.intersection(kwargs):
        digraph_kwargs = dict(kwargs)
        digraph_kwargs["graph_attr"] = {"rankdir": "TB", **(kwargs.get("graph_attr") or {})}
    else:
        digraph_kwargs = {"graph_attr": {"rankdir": "TB", **{k: str(v) for k, v in kwargs.items()}}}
    ids = node_ids(node)
    g = graphviz.Digraph(**digraph_kwargs)
    for n in topological(node):
        g.node(
            ids[id(n)],
            label=node_label(n),
            shape=n._graphviz_shape,
            style=n._graphviz_style,
            fillcolor=n._graphviz_fillcolor,
        )
        for d in n.downstreams:
            g.edge(ids[id(n)], ids[id(d)])
    if filename is not None:
        base, _, fmt = filename.rpartition(".")
        if not base:
            base, fmt = filename, "png"
        try:
            g.render(base, format=fmt, cleanup=True)
        except graphviz.ExecutableNotFound as e:
            raise ConfigurationError(
                f"visualize(): writing {filename!r} needs the Graphviz 'dot' program, which is "
                "not installed; install it (Debian/Ubuntu: apt-get install graphviz, macOS: "
                "brew install graphviz, conda: conda install graphviz), or print the graph "
                "without it: 'rivermark graph app.py:name --format dot|mermaid' or "
                "rivermark.observe.graphtext.to_dot(node)"
            ) from e
    return g


def describe(nodes: Iterable[Stream]) -> str:
    """One line per node, for error messages."""
    return ", ".join(repr(n) for n in nodes)
