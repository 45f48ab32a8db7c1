"""streamz's ``streamz.graph`` module: graphs of a pipeline.

:func:`create_graph` fills any graph object with ``add_node``/``add_edge``
(e.g. a ``networkx.DiGraph``) and :func:`visualize` renders with graphviz;
both live in :mod:`rivermark.core.graph`.  :func:`_clean_text` makes a label
safe for graphviz, as streamz's does.

>>> _clean_text("map<lambda>: x+1")
'map lambda ; x 1'
"""

from __future__ import annotations

import re

from rivermark.core.graph import create_graph as create_graph
from rivermark.core.graph import visualize as visualize

__all__ = ["create_graph", "visualize"]

#: a run of characters that graphviz labels must not contain (``:`` separates
#: a node from its port, so it is kept here and replaced below)
_UNSAFE = re.compile(r"[^A-Za-z0-9_:]+")


def _clean_text(text: str, match: str | None = None) -> str:
    """``text`` with each run of unsafe characters replaced by one space, ``:`` by ``;``.

    ``match`` is another regular expression for the runs to replace.
    """
    pattern = _UNSAFE if match is None else re.compile(match)
    return pattern.sub(" ", text).replace(":", ";")
