"""``Fixed`` and ``Planned``: the node attributes the data flow may fold in.

The data flow's folding (:mod:`.steps`) knows these, and only these, of a
node's attributes: a :class:`Fixed` one never changes; a :class:`Planned`
one may, and assigning it retires the code written with the old value.
:mod:`rivermark.core.config` offers the classes to the operators with the
other option checks.
"""

from __future__ import annotations

from typing import Any

from rivermark.errors import ConfigurationError

__all__ = ["Fixed", "Planned"]


class Fixed:
    """An operator's configuration attribute that is fixed at construction.

    Configuration that decides *how* a node processes records (extra
    arguments of the user function, a key, a window length that sizes a
    container) is set once, in ``__init__``; assigning it afterwards raises
    :class:`ConfigurationError` instead of taking effect on one execution
    path and not on another.  The value lives in the attribute ``_<name>``,
    which ``__init__`` sets and the node's own code reads directly (a plain
    attribute, as fast as any).  Configuration that may be assigned later
    and is read on every record (``func``, ``predicate``) is a plain
    attribute instead, or a :class:`Planned` one (``n`` of ``partition``,
    ``maxsize`` of ``zip``): assigning it takes effect on every path from
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


class Planned(Fixed):
    """A node attribute the generated code holds as a constant; assigning it rebuilds that code.

    For what a step reads on every record but the node (or its user) may
    replace: ``n`` of ``partition`` or the buffers of ``zip``.  The value
    lives in ``_<name>``, which ``__init__`` sets and the node's own code
    reads; the node changes the object it holds only in place (a list
    appended to, a deque cleared) or by assigning the public name, which
    retires the plan of the node's graph (:mod:`.plan`): every function
    written with the old value hands its records to the node-by-node path,
    and the next record builds code with the new one.

    >>> from rivermark import Stream
    >>> s = Stream(); L = s.partition(2).sink_to_list()
    >>> s.emit(1); s.emit(2)
    >>> s.downstreams[0].n = 3
    >>> for i in range(3):
    ...     s.emit(i)
    >>> L
    [(1, 2), (0, 1, 2)]
    """

    def __set__(self, obj: Any, value: Any) -> None:
        object.__setattr__(obj, self.slot, value)
        # the plan of the node's graph (the Node protocol's attribute): its code folded the old value
        plan = obj._rivermark_plan  # noqa: SLF001
        if plan is not None:
            plan.retire()
