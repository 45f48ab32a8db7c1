"""``Fixed``: an operator's configuration fixed when the node is created.

The data flow's folding (:mod:`.steps`) knows these, and only these, of a
node's attributes; :mod:`rivermark.core.config` offers the class to the
operators with the other option checks.
"""

from __future__ import annotations

from typing import Any

from rivermark.errors import ConfigurationError

__all__ = ["Fixed"]


class Fixed:
    """An operator's configuration attribute that is fixed at construction.

    Configuration that decides *how* a node processes records (extra
    arguments of the user function, a key, a window length that sizes a
    container) is set once, in ``__init__``; assigning it afterwards raises
    :class:`ConfigurationError` instead of taking effect on one execution
    path and not on another.  The value lives in the attribute ``_<name>``,
    which ``__init__`` sets and the node's own code reads directly (a plain
    attribute, as fast as any).  Configuration that is read on every record (``func``,
    ``predicate``, ``n`` of ``partition``, ``maxsize`` of ``zip``) is a
    plain attribute instead: assigning it takes effect on every path from
    the next record on.

    >>> from rivermark import Stream
    >>> s = Stream(); m = s.map(lambda x, k: x + k, 1)
    >>> m.args = (2,)
    Traceback (most recent call last):
    rivermark.errors.ConfigurationError: Map.args is fixed when the node is created (got (2,)); build a new node with the new value instead
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = "_" + name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return getattr(obj, self.slot)

    def __set__(self, obj: Any, value: Any) -> None:
        # ``__init__`` sets ``_<name>``; the public name is read-only
        raise ConfigurationError(
            f"{obj.display_name()}.{self.name} is fixed when the node is created "
            f"(got {value!r}); build a new node with the new value instead"
        )
