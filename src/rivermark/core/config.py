"""A node's options: the checks that refuse a bad one, and configuration fixed at creation.

Each check raises :class:`~rivermark.errors.ConfigurationError` with one
line naming the node and the option and saying what to pass instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError

__all__ = ["ErrorPolicy", "check_callable", "check_positive_int", "Fixed"]

ErrorPolicy = str | Callable[[Any, BaseException], Any]

_VALID_POLICIES = ("raise", "skip")


def check_callable(node_kind: str, arg: str, value: Any) -> None:
    """Raise ConfigurationError unless ``value`` is callable."""
    if not callable(value):
        raise ConfigurationError(
            f"{node_kind}: {arg} must be callable, got {value!r} of type "
            f"{type(value).__name__}; pass a function, e.g. {node_kind}(lambda x: x)"
        )


def check_positive_int(node_kind: str, arg: str, value: Any, minimum: int = 1) -> None:
    """Raise ConfigurationError unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"{node_kind}: {arg} must be an integer >= {minimum}, got {value!r}; "
            f"pass e.g. {arg}={max(minimum, 2)}"
        )


def _check_policy(policy: Any) -> None:
    if policy is None or callable(policy) or policy in _VALID_POLICIES:
        return
    raise ConfigurationError(
        f"on_error must be 'raise', 'skip' or a callable(record, exception), got {policy!r}"
    )


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
