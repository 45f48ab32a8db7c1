"""A node's outward face: how it is named and shown.

:class:`StreamFacade` is a base of :class:`~rivermark.core.node.Stream`.  It
holds the methods that no record passes through: the name messages use, the
streamz-style ``str``/``repr``, the HTML and graphviz views, and ``gather``.
The methods streamz has on every stream that an optional layer fulfils
(``scatter``: Dask, ``to_dataframe``: DataFrame, ``to_batch``: Batch, the
Jupyter display: the notebook outputs) are defined and registered by those
layers; :mod:`rivermark.plugins` loads them on first call.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar, cast

from rivermark.core.contracts import GraphNode

#: the node's own class (``gather`` returns the node itself)
T = TypeVar("T", bound="StreamFacade")


class StreamFacade:
    """The methods of :class:`~rivermark.core.node.Stream` that face people and other layers."""

    __slots__ = ()

    #: set by ``Stream.__init__``
    name: str | None
    stream_name: str | None
    #: attributes shown in ``str(node)`` (``Stream`` sets the list)
    str_list: ClassVar[list[str]]

    # ------------------------------------------------------------------ display
    def display_name(self) -> str:
        """How messages name the node: its kind and its ``name`` (or ``stream_name``).

        >>> from rivermark import Stream
        >>> Stream(name="numbers").map(str, name="text").display_name()
        "Map('text')"
        """
        label = self.name or self.stream_name
        kind = type(self).__name__
        return f"{kind}({label!r})" if label else kind

    def __str__(self) -> str:
        """streamz's format: ``<map: inc>``, ``<name; partition: 3>``, ``<zip>``.

        The node is named by its API name (the first name its class was
        registered under, else the class name); the attributes of
        :attr:`str_list` that are set follow, bare when there is only one.

        >>> from rivermark import Stream
        >>> def inc(x): return x + 1
        >>> s = Stream(stream_name="in")
        >>> str(s), str(s.map(inc)), str(s.partition(3, stream_name="p")), str(s.zip(s))
        ('<in; Stream>', '<map: inc>', '<p; partition: 3>', '<zip>')
        """
        cls = type(self)
        kind = cls.__dict__.get("_api_name") or cls.__name__
        head = f"{self.stream_name}; {kind}" if self.stream_name else kind
        shown = [(attr, _attr_text(getattr(self, attr, None))) for attr in self.str_list]
        shown = [(attr, text) for attr, text in shown if text]
        items = [shown[0][1]] if len(shown) == 1 else [f"{attr}={text}" for attr, text in shown]
        return f"<{head}: {', '.join(items)}>" if items else f"<{head}>"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return str(self).replace("<", "&lt;").replace(">", "&gt;")

    def visualize(self, filename: str = "mystream.png", **kwargs: Any) -> Any:
        """Render the graph with graphviz (``pip install rivermark[viz]``)."""
        from rivermark.core.graph import visualize

        return visualize(cast(GraphNode, self), filename, **kwargs)

    def gather(self: T) -> T:
        """Return this stream unchanged (as in streamz, so ``gather()`` works without Dask).

        >>> from rivermark import Stream
        >>> s = Stream(); s.gather() is s
        True
        """
        return self


def _attr_text(value: object) -> str:
    """How ``str(node)`` shows an attribute: a function by name, other values with str()."""
    try:
        if not value:
            return ""
    except (TypeError, ValueError):  # no single truth value (an array, a frame)
        pass
    if callable(value):
        # optional: a value of any type; only functions and classes have a name
        return str(getattr(value, "__name__", "") or "")
    return str(value)
