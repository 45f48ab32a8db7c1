"""How messages name a user's function: its qualified name, else its name, else its repr.

>>> function_name(len), function_name(str.upper)
('len', 'str.upper')
>>> import functools
>>> function_name(functools.partial(int, base=2)).startswith("functools.partial(")
True
"""

from __future__ import annotations

__all__ = ["function_name"]


def function_name(func: object) -> str:
    """``func``'s ``__qualname__`` or ``__name__``, else its ``repr``."""
    # optional: a callable object or a functools.partial has neither name
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return name if isinstance(name, str) else repr(func)
