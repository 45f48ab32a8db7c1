"""A node's options: the checks that refuse a bad one, and configuration fixed at creation.

Each check raises :class:`~rivermark.errors.ConfigurationError` with one
line naming the node and the option and saying what to pass instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rivermark.errors import ConfigurationError
from rivermark.execution.fixed import Fixed as Fixed
from rivermark.execution.fixed import Planned as Planned

__all__ = ["ErrorPolicy", "check_callable", "check_positive_int", "Fixed", "Planned"]

ErrorPolicy = str | Callable[[Any, BaseException], Any]

_VALID_POLICIES = ("raise", "skip")


def check_callable(node_kind: str, arg: str, value: object) -> None:
    """Raise ConfigurationError unless ``value`` is callable."""
    if not callable(value):
        raise ConfigurationError(
            f"{node_kind}: {arg} must be callable, got {value!r} of type "
            f"{type(value).__name__}; pass a function, e.g. {node_kind}(lambda x: x)"
        )


def check_positive_int(node_kind: str, arg: str, value: object, minimum: int = 1) -> None:
    """Raise ConfigurationError unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"{node_kind}: {arg} must be an integer >= {minimum}, got {value!r}; "
            f"pass e.g. {arg}={max(minimum, 2)}"
        )


def _check_policy(policy: object) -> None:
    if policy is None or callable(policy) or policy in _VALID_POLICIES:
        return
    raise ConfigurationError(
        f"on_error must be 'raise', 'skip' or a callable(record, exception), got {policy!r}"
    )
