"""Walking a graph: ordering, stable node identity, fingerprints, pictures.

Stable identity is what checkpoints are matched by.  A node's id is its
``name=`` when one was given.  Otherwise it is derived: the node's kind, its
number among the nodes of that kind in the graph's order (upstreams first,
roots in the order they were created), and, after a colon, the name of its
function when it has one that is named (not a lambda): ``map-1:parse``,
``accumulate-2:total``, ``fromiterable-1``.  Nodes with a ``name=`` keep their
number, so naming one node does not renumber the others.  The same program
gives the same ids in every process, whichever of its nodes the graph is
walked from.

A derived id says where a node is in the order, not what is in front of it:
inserting a ``map`` above an unnamed ``accumulate`` keeps the id
``accumulate-1``.  So the configuration signature an unnamed node has in the
graph's :func:`fingerprint` ends with its *place*, `` after <8 hex>``: a
digest of the kinds of the nodes in front of it, up to the nearest ones a
fingerprint checks by themselves (named and stateful nodes and sources,
taken by their ids), and of its position among the nodes of its kind beside
it.  A checkpoint written before the pipeline in front of the node changed
then no longer matches it, which is exactly when restoring its state would
be wrong.

Checkpoints written by rivermark versions before readable ids hold the ids
:func:`legacy_node_ids` derives (``accumulate-534cb309``); a restore maps
them to the current ids (:mod:`rivermark.checkpoint.protocol.upgrade`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rivermark.core.contracts import GraphNode
from rivermark.errors import ConfigurationError, GraphError
from rivermark.execution.node import walk_from

#: a node of the graph walked (``Stream``); what comes back is of the same type
N = TypeVar("N", bound=GraphNode)

__all__ = [
    "nodes_of",
    "ancestors",
    "descendants",
    "topological",
    "node_ids",
    "legacy_node_ids",
    "function_name",
    "signatures",
    "fingerprint",
    "base_signature",
    "sources_of",
    "visualize",
    "create_graph",
    "dot_quote",
]


def nodes_of(node: N) -> list[N]:
    """Every node connected to ``node``, in a deterministic order."""
    return list(node.walk())


def ancestors(node: N) -> Iterator[N]:
    """Every node upstream of ``node`` (not ``node`` itself), each once, nearest first."""
    return walk_from(node.upstreams, lambda n: n.upstreams)


def descendants(node: N) -> Iterator[N]:
    """Every node downstream of ``node`` (not ``node`` itself), each once, nearest first."""
    return walk_from(node.downstreams, lambda n: n.downstreams)


def sources_of(node: N) -> list[N]:
    """The nodes with no upstream in ``node``'s graph, in topological order."""
    return [n for n in topological(node) if not n.upstreams]


def topological(node: N) -> list[N]:
    """The graph's nodes, upstreams before downstreams, deterministic for a given program.

    The roots come first, in the order they were created; then every node
    once all its upstreams are placed, each node's downstreams in the order
    they were connected.  The order does not depend on which node of the
    graph ``node`` is.
    """
    everything = nodes_of(node)
    roots = sorted((n for n in everything if not n.upstreams), key=lambda n: n._serial)  # noqa: SLF001 - a node of the graph
    return _ordered(everything, roots)


def _ordered(everything: list[N], roots: list[N]) -> list[N]:
    """``everything``, upstreams first, starting from ``roots`` in their order."""
    order: list[N] = []
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


def function_name(n: GraphNode) -> str | None:
    """The name of ``n``'s own function, as its derived id shows it; None without one.

    A lambda, a callable without ``__name__`` (a ``functools.partial``) and
    the functions rivermark supplies itself have none.

    >>> from rivermark import Stream
    >>> def parse(x): return x
    >>> s = Stream()
    >>> function_name(s.map(parse)), function_name(s.map(lambda x: x)), function_name(s)
    ('parse', None, None)
    """
    # optional: only function nodes (map, filter, ...) hold a func or a predicate
    func = getattr(n, "func", None) or getattr(n, "predicate", None)
    if not callable(func):
        return None
    # optional: a callable object has no __name__
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        return None
    # optional: a builtin or a callable object has no __code__
    code = getattr(func, "__code__", None)
    if code is not None and Path(code.co_filename).is_relative_to(_PACKAGE):
        return None  # one of rivermark's own (a sink's default, a layer's helper)
    return name


#: where rivermark's own functions are defined
_PACKAGE = Path(__file__).resolve().parent.parent


def _claim(taken: dict[str, GraphNode], nid: str, n: GraphNode) -> None:
    """Record ``nid`` as ``n``'s id; :class:`GraphError` if another node has it."""
    if nid in taken:
        raise GraphError(
            f"two nodes share the id {nid!r} ({taken[nid]!r} and {n!r}); "
            f"give each node a unique name= for checkpoints"
        )
    taken[nid] = n


def node_ids(node: GraphNode) -> dict[int, str]:
    """Map ``id(n)`` to the stable id of every node in the graph.

    A node's ``name=``, else ``<kind>-<number>[:<function>]``: its kind (its
    class's name in lower case), its number among the nodes of that kind in
    :func:`topological` order (from 1, named ones included) and the name of
    its function (:func:`function_name`).  Raises :class:`GraphError` when
    two nodes would get the same id (two nodes given the same ``name=``).

    >>> from rivermark import Stream
    >>> def parse(line): return line.split()
    >>> s = Stream.from_iterable(["a b"], name="lines")
    >>> words = s.map(parse).map(len).map(lambda n: n * 2)
    >>> ids = node_ids(s)
    >>> [ids[id(n)] for n in topological(s)]
    ['lines', 'map-1:parse', 'map-2:len', 'map-3']
    """
    ids: dict[int, str] = {}
    taken: dict[str, GraphNode] = {}
    counts: dict[str, int] = {}
    for n in topological(node):
        kind = type(n).__name__.lower()
        counts[kind] = counts.get(kind, 0) + 1
        if n.name is not None:
            nid = n.name
        else:
            func = function_name(n)
            nid = f"{kind}-{counts[kind]}" if func is None else f"{kind}-{counts[kind]}:{func}"
        _claim(taken, nid, n)
        ids[id(n)] = nid
    return ids


def legacy_node_ids(node: GraphNode) -> dict[int, str]:
    """``id(n)`` -> the id rivermark derived before readable ids, ``<kind>-<8 hex>``.

    Checkpoints written by those versions hold these ids.  Their roots of
    one kind were numbered in the order the graph was walked from the node
    given to the job, which the graph no longer knows; when the graph has
    two roots of one kind (named or not), only the ids that every starting
    node gives are returned (an id that depends on the start is left out, so
    nothing is guessed).  Empty when no start gives a valid derivation.
    """
    everything = nodes_of(node)
    kinds = [type(r) for r in everything if not r.upstreams]
    starts = everything if len(set(kinds)) < len(kinds) else [node]
    # the roots in the order each start walks them: few distinct orders
    orders: dict[tuple[int, ...], list[GraphNode]] = {}
    for s in starts:
        roots = [n for n in nodes_of(s) if not n.upstreams]
        orders.setdefault(tuple(map(id, roots)), roots)
    found: list[dict[int, str]] = []
    for roots in orders.values():
        try:
            found.append(_legacy_ids(_ordered(everything, roots)))
        except GraphError:
            continue
    if not found:
        return {}
    return {k: v for k, v in found[0].items() if all(f.get(k) == v for f in found[1:])}


def _legacy_ids(order: list[GraphNode]) -> dict[int, str]:
    """The ids of rivermark before readable ids, over the graph's ``order`` then."""
    ids: dict[int, str] = {}
    taken: dict[str, GraphNode] = {}
    for n in order:
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
        _claim(taken, nid, n)
        ids[id(n)] = nid
    return ids


def _places(order: list[GraphNode], ids: dict[int, str]) -> dict[int, str]:
    """``id(n)`` -> the place digest of every unnamed node with upstreams (see the module's docs).

    A node's place hashes its kind, what is in front of it and its position
    among the nodes of its kind below its first upstream (named ones
    included).  An upstream that a fingerprint checks by itself (a named
    node, a stateful one, a source) is taken by its id, any other by its
    place, so the digest covers the stateless nodes in front up to those.
    """
    places: dict[int, str] = {}
    for n in order:
        if n.name is not None or not n.upstreams:
            continue
        below = [d for d in n.upstreams[0].downstreams if type(d) is type(n)]
        pos = next(i for i, d in enumerate(below) if d is n)
        front = [
            places[id(u)] if id(u) in places and not u.is_stateful else f"={ids[id(u)]}"
            for u in n.upstreams
        ]
        key = "|".join([type(n).__name__, *front, str(pos)])
        places[id(n)] = hashlib.sha1(key.encode()).hexdigest()[:8]
    return places


#: the end of the signature of an unnamed node with upstreams: its place
_PLACE = re.compile(r" after [0-9a-f]{8}$")


def signatures(node: GraphNode, keep: Callable[[GraphNode], bool]) -> dict[int, str]:
    """``id(n)`` -> the signature node ``n`` has in a fingerprint, for the nodes ``keep`` keeps.

    A node's ``state_signature()``; an unnamed node with upstreams adds its
    place (`` after <8 hex>``), so that its signature changes when the
    pipeline in front of it changes while its derived id stays.
    """
    order = topological(node)
    places = _places(order, node_ids(node))
    return {
        id(n): (
            f"{n.state_signature()} after {places[id(n)]}"
            if n.name is None and n.upstreams
            else n.state_signature()
        )
        for n in order
        if keep(n)
    }


def base_signature(signature: str) -> str:
    """``signature`` without the place an unnamed node's signature ends with.

    >>> base_signature("Accumulate(func=total) after 1f0c22ab"), base_signature("FromIterable()")
    ('Accumulate(func=total)', 'FromIterable()')
    """
    return _PLACE.sub("", signature)


def fingerprint(node: GraphNode) -> dict[str, str]:
    """Stable id -> signature (see :func:`signatures`), for every stateful node and source."""
    ids = node_ids(node)
    sigs = signatures(node, lambda n: n.is_stateful or not n.upstreams)
    return {ids[k]: sig for k, sig in sigs.items()}


def create_graph(node: GraphNode, graph: Any) -> Any:
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


def dot_quote(text: str) -> str:
    """``text`` as a quoted Graphviz string: an id (which may hold ``:``), a label, a style.

    >>> print(dot_quote('map-1:parse'), dot_quote('say "hi"'))
    "map-1:parse" "say \\"hi\\""
    """
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def node_label(n: GraphNode) -> str:
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
    node: GraphNode, filename: str | None = "mystream.png", source_node: bool = False, **kwargs: Any
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
            # written as a line: graphviz's edge() reads "map-1:parse" as node "map-1", port "parse"
            g.body.append(f"\t{dot_quote(ids[id(n)])} -> {dot_quote(ids[id(d)])}\n")
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


def describe(nodes: Iterable[GraphNode]) -> str:
    """One line per node, for error messages."""
    return ", ".join(repr(n) for n in nodes)
