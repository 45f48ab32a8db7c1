"""Fused fast paths for the most common synchronous nodes.

Each fuser returns a ``push(x, metadata)`` doing exactly what the node's
``update`` does (same error policy, same completion tracking) but calling
the next push directly; see :mod:`rivermark.core.fusion`.
"""

from __future__ import annotations

from typing import Any

from ..core.fusion import Push, register_fuser
from ..core.node import Stream
from ..sinks.basic import Sink
from .transform import Map

__all__: list[str] = []


def _fuse_map(node: Stream, who: Stream, nxt: Push) -> Push:
    assert isinstance(node, Map)
    func, args, kwargs, on_err = node.func, node.args, node.kwargs, node._user_error
    if args or kwargs:

        def push_args(x: Any, metadata: Any) -> Any:
            try:
                y = func(x, *args, **kwargs)
            except Exception as e:
                on_err(x, e, func)
                return None
            return nxt(y, metadata)

        return push_args

    def push(x: Any, metadata: Any) -> Any:
        try:
            y = func(x)
        except Exception as e:
            on_err(x, e, func)
            return None
        return nxt(y, metadata)

    return push


def _fuse_sink(node: Stream, who: Stream, nxt: Push) -> Push:
    assert isinstance(node, Sink)
    if node._is_async or node.args or node.kwargs:
        update = node.update
        return lambda x, metadata: update(x, who, metadata)
    func, on_err, update = node.func, node._user_error, node.update

    def push(x: Any, metadata: Any) -> Any:
        try:
            r = func(x)
        except Exception as e:
            on_err(x, e, func)
            return None
        if r is not None:
            # an awaitable result: let the node's own path handle it
            return node._after_call(x, r, metadata)
        return None

    return push


register_fuser(Map, _fuse_map)
register_fuser(Sink, _fuse_sink)
