"""``rivermark.graph``: streamz's ``streamz.graph`` names."""

from __future__ import annotations

import networkx as nx

from rivermark import Stream
from rivermark.graph import _clean_text, create_graph


def test_clean_text_replaces_runs_and_colons() -> None:
    assert _clean_text("JFDSM*(@&$:FFDS:;;") == "JFDSM ;FFDS; "
    assert _clean_text("a-b", match="-") == "a b"


def test_create_graph_into_networkx() -> None:
    s = Stream(stream_name="src")
    m = s.map(str)
    m.sink(print)
    g = create_graph(m, nx.DiGraph())
    assert g.number_of_nodes() == 3 and g.number_of_edges() == 2
    assert nx.is_directed_acyclic_graph(g)
