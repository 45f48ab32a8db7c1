"""Fused fast paths for the most common synchronous nodes.

Untracked records (``metadata`` is None) in a node's simple configuration
take a direct path; everything else goes through the node's own ``update``.
A fast path keeps the node's state exactly as ``update`` would, so the two
can alternate record by record and a checkpoint sees the same state.  A run
of maps (and a plain sink after them) is folded into one function.

Each fuser returns a ``push(x, metadata)`` doing exactly what the node's
``update`` does (same error policy, same completion tracking) but calling
the next push directly; see :mod:`rivermark.core.fusion`.
"""

from __future__ import annotations

from typing import Any

from ..core.fusion import Push, own_update, register_fuser
from ..core.node import Stream
from ..core.refs import merge_metadata, release_refs
from ..sinks.basic import Sink
from .joins import Union, Zip
from .transform import Map
from .windows import Partition, SlidingWindow

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


def via_update(node: Stream, who: Stream) -> Push:
    """The unfused path: call the node's own ``update``."""
    update = node.update
    return lambda x, metadata: update(x, who, metadata)


def _fuse_map_chain(node: Stream, who: Stream, nxt: Push) -> Push:
    """A Map fuser that folds the maps below ``node`` into the same closure."""
    pairs = []
    cur: Stream = node
    while True:
        assert isinstance(cur, Map)
        if cur.args or cur.kwargs:
            break
        pairs.append((cur.func, cur._user_error))
        ds = cur.downstreams
        if (
            len(ds) != 1
            or type(ds[0]) is not Map
            or not own_update(ds[0])
            or ds[0].args
            or ds[0].kwargs
        ):
            break
        cur = ds[0]
    if not pairs:
        return _fuse_map(node, who, nxt)
    tail = cur._downstream_push() if cur is not node else nxt
    steps = tuple(pairs)
    ds = cur.downstreams
    sink = ds[0] if len(ds) == 1 else None
    if (
        isinstance(sink, Sink)
        and type(sink) is Sink
        and own_update(sink)
        and not sink._is_async
        and not sink.args
        and not sink.kwargs
    ):
        # fold the sink into the same closure as well
        sfunc, serr, after = sink.func, sink._user_error, sink._after_call

        def push_to_sink(x: Any, metadata: Any) -> Any:
            for func, on_err in steps:
                try:
                    y = func(x)
                except Exception as e:
                    on_err(x, e, func)
                    return None
                x = y
            try:
                r = sfunc(x)
            except Exception as e:
                serr(x, e, sfunc)
                return None
            if r is not None:
                return after(x, r, metadata)
            return None

        return push_to_sink
    if len(pairs) == 1:
        return _fuse_map(node, who, nxt)

    def push(x: Any, metadata: Any) -> Any:
        for func, on_err in steps:
            try:
                y = func(x)
            except Exception as e:
                on_err(x, e, func)
                return None
            x = y
        return tail(x, metadata)

    return push


def fuse_union(node: Any, who: Stream, nxt: Push) -> Push:
    return nxt  # union passes every record on unchanged: no call at all


def fuse_zip(node: Any, who: Stream, nxt: Push) -> Push:
    update = node.update
    index = next((i for i, up in enumerate(node.upstreams) if up is who), None)
    if (
        index is None
        or node.literals
        or sum(1 for up in node.upstreams if up is who) > 1
        or len(node._buffers) != len(node.upstreams)
    ):
        return via_update(node, who)
    maxsize = node.maxsize

    if len(node.upstreams) == 2:
        other_index = 1 - index

        def push2(x: Any, metadata: Any) -> Any:
            buffers = node._buffers
            buf = buffers[index]
            if metadata or node._waiters or len(buf) >= maxsize:
                return update(x, who, metadata)
            other = buffers[other_index]
            if buf or not other:
                buf.append((x, None))
                return None
            y, meta = other.popleft()
            out = (x, y) if index == 0 else (y, x)
            if not meta:
                return nxt(out, None)
            try:
                results = nxt(out, meta)
            except BaseException:
                release_refs(meta)
                raise
            return node._release_after(results, meta)

        return push2

    def push(x: Any, metadata: Any) -> Any:
        buffers = node._buffers
        buf = buffers[index]
        if metadata or node._waiters or len(buf) >= maxsize:
            return update(x, who, metadata)
        buf.append((x, None))
        if len(buf) == 1 and all(buffers):
            heads = [b.popleft() for b in buffers]
            out = tuple([h[0] for h in heads])
            meta = merge_metadata([h[1] for h in heads])
            if meta is None:
                return nxt(out, None)
            try:
                results = nxt(out, meta)
            except BaseException:
                release_refs(meta)
                raise
            return node._release_after(results, meta)
        return None

    return push


def fuse_partition(node: Any, who: Stream, nxt: Push) -> Push:
    if node.key is not None or node.timeout is not None:
        return via_update(node, who)
    update, n = node.update, node.n

    def push(x: Any, metadata: Any) -> Any:
        buf = node._buffers.get(None)
        if metadata or buf is None:
            return update(x, who, metadata)
        buf.append(x)
        if len(buf) >= n:
            return node._flush_now(None)
        return None

    return push


def fuse_sliding_window(node: Any, who: Stream, nxt: Push) -> Push:
    update, n, partial = node.update, node.n, node.partial

    def push(x: Any, metadata: Any) -> Any:
        if metadata or node._n_meta:
            return update(x, who, metadata)
        buf = node._buffer
        buf.append(x)
        metas = node._meta
        metas.append(None)
        if len(buf) == n:
            metas.popleft()
            return nxt(tuple(buf), None)
        if partial:
            return nxt(tuple(buf), None)
        return None

    return push


register_fuser(Map, _fuse_map_chain)
register_fuser(Sink, _fuse_sink)
register_fuser(Union, fuse_union)
register_fuser(Zip, fuse_zip)
register_fuser(Partition, fuse_partition)
register_fuser(SlidingWindow, fuse_sliding_window)
