"""Operators joining several streams: zip, zip_latest, combine_latest, union.

Completion tracking: a record waiting in a ``zip`` buffer, and the latest
value of each side of ``combine_latest``/``zip_latest``, keep their
references (until emitted, or until replaced).  Buffers and latest values
(without metadata) are checkpoint state.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Iterable
from typing import Any, Unpack

from rivermark.core.node import Fixed, NodeOptions, Planned, Stream, check_positive_int
from rivermark.core.refs import Metadata, merge_metadata, release_refs
from rivermark.errors import ConfigurationError, GraphError
from rivermark.execution.steps import step

logger = logging.getLogger(__name__)

__all__ = ["Zip", "ZipLatest", "CombineLatest", "Union"]

Results = list[Awaitable[object]] | None


def _position(node: Stream, upstream: Stream) -> int:
    """The index of ``upstream`` in ``node.upstreams`` (by identity)."""
    for i, up in enumerate(node.upstreams):
        if up is upstream:
            return i
    raise GraphError(
        f"{node.display_name()}: {upstream!r} is not one of its upstreams; nothing to disconnect"
    )


def _index_of(node: Stream, who: Stream | None) -> int:
    for i, up in enumerate(node.upstreams):
        if up is who:
            return i
    raise GraphError(
        f"{node.display_name()}: update() from {who!r}, which is not one of its upstreams; "
        "connect the stream first (or pass who=<upstream>)"
    )


class _Held:
    """A tracked record waiting in a ``zip`` buffer, with its metadata.

    An untracked record waits bare, so the common case builds and unpacks
    no pair per record; a user's record is never of this private type.
    """

    __slots__ = ("value", "metadata")

    def __init__(self, value: Any, metadata: Metadata) -> None:
        self.value = value
        self.metadata = metadata


def _unheld(entry: Any) -> tuple[Any, Metadata | None]:
    """The record and metadata of a buffer entry."""
    if type(entry) is _Held:
        return entry.value, entry.metadata
    return entry, None


@Stream.register_api(attribute_name="zip")
class Zip(Stream):
    """Emit a tuple once every upstream has produced its next record.

    Arguments that are not streams are literals, placed at their position in
    every tuple.  A record waits in its upstream's buffer (keeping its
    reference) until its tuple is emitted.  When a buffer holds more than
    ``maxsize`` records and the caller runs on an event loop, the returned
    awaitable finishes only once that buffer shrinks (backpressure); a
    purely synchronous caller is never blocked.

    >>> a, b = Stream(), Stream()
    >>> L = a.zip(b, "lit").sink_to_list()
    >>> a.emit(1); a.emit(2); b.emit("x"); L
    [(1, 'x', 'lit')]
    >>> b.emit("y"); L
    [(1, 'x', 'lit'), (2, 'y', 'lit')]
    """

    _graphviz_orientation = 270
    _graphviz_shape = "triangle"
    # a tuple takes one record from every buffer: its count is derived (no
    # counting per tuple), from the first buffer's records in and what it holds
    derived_out = True
    #: records the first buffer held when its state was restored
    _restored_held = 0
    literals = Fixed()
    # read on every record, held as constants by the generated code: assigning one
    # (or set_state replacing the buffers) rebuilds that code; the buffers and the
    # waiters are otherwise changed in place only
    maxsize = Planned()
    buffers = Planned()
    waiters = Planned()

    def __init__(
        self, *upstreams: object, maxsize: int = 10, **kwargs: Unpack[NodeOptions]
    ) -> None:
        check_positive_int("zip", "maxsize", maxsize)
        self._maxsize = maxsize
        self._literals = [(i, v) for i, v in enumerate(upstreams) if not isinstance(v, Stream)]
        streams = [u for u in upstreams if isinstance(u, Stream)]
        if not streams:
            raise ConfigurationError(
                f"zip: needs at least one upstream stream, got only literals {upstreams!r}; "
                "pass streams, e.g. a.zip(b)"
            )
        #: one buffer per upstream: bare records, or :class:`_Held` for tracked ones (a
        #: tuple: the generated code holds each buffer; a new upstream makes a new tuple)
        self._buffers: tuple[deque[Any], ...] = tuple(deque() for _ in streams)
        self._waiters: list[asyncio.Future[Any]] = []
        Stream.__init__(self, upstreams=streams, **kwargs)

    def _pack(self, values: list[Any]) -> tuple[Any, ...]:
        for i, v in self._literals:
            values.insert(i, v)
        return tuple(values)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        buffers = self._buffers
        ups = self.upstreams
        if (
            len(ups) == 2
            and ups[0] is not ups[1]
            and (who is ups[0] or who is ups[1])
            and not self._literals
        ):
            # two distinct streams: the record meets the other side's first, or waits
            side = 0 if who is ups[0] else 1
            mine = buffers[side]
            other = buffers[1 - side]
            if metadata:
                self._retain_refs(metadata)
            if mine:  # records already wait on this side: this one waits behind them
                mine.append(_Held(x, metadata) if metadata else x)
                if len(mine) > self._maxsize:
                    return self._wait_for_room()
                return None
            if not other:  # nothing to meet on the other side yet
                mine.append(_Held(x, metadata) if metadata else x)
                return None
            y = other.popleft()
            if self._waiters:
                self._wake_waiters()
            if metadata or type(y) is _Held:
                return self._emit_tracked(x, y, metadata, side)
            return self._emit((x, y) if side == 0 else (y, x), None)
        # any other shape: more streams, literals, a stream zipped with itself
        filled, over = self._enqueue(x, who, metadata)
        if filled and all(buffers):
            return self._emit_heads()
        if over:
            return self._wait_for_room()
        return None

    def _emit_tracked(self, x: Any, entry: Any, metadata: Metadata | None, side: int) -> Results:
        """Pass on the pair of ``x`` (on ``side``) and ``entry``; it takes over their references."""
        y, held = _unheld(entry)
        out = (x, y) if side == 0 else (y, x)
        meta = merge_metadata([metadata, held] if side == 0 else [held, metadata])
        return self._emit_and_release(out, meta, meta)

    def _enqueue(self, x: Any, who: Stream | None, metadata: Metadata | None) -> tuple[bool, bool]:
        """Append ``x`` to the buffer of each position ``who`` holds (any shape of zip).

        Returns whether a buffer went from empty to holding a record, and
        whether one holds more than ``maxsize``.
        """
        buffers, ups = self._buffers, self.upstreams
        if len(buffers) < len(ups):  # an upstream was connected later
            buffers = self.buffers = (*buffers, *(deque() for _ in ups[len(buffers) :]))
        filled = over = matched = False
        for i, up in enumerate(ups):
            if up is who:  # the same stream may be zipped more than once
                buf = buffers[i]
                if metadata:
                    self._retain_refs(metadata)
                buf.append(_Held(x, metadata) if metadata else x)
                if len(buf) == 1:
                    filled = True
                elif len(buf) > self._maxsize:
                    over = True
                matched = True
        if not matched:
            _index_of(self, who)  # raises: not an upstream
        return filled, over

    def _wait_for_room(self) -> Results:
        """A buffer is over ``maxsize``: the sender waits until the other side catches up.

        Outside an event loop there is nothing to wait on; the buffer grows.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        fut = loop.create_future()
        self._waiters.append(fut)
        return [fut]

    def _wake_waiters(self) -> None:
        """A tuple left: senders waiting for room in a buffer may go on."""
        waiters = list(self._waiters)
        self._waiters.clear()  # in place: the generated code holds the list
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _emit_heads(self) -> Results:
        """Pass on the tuple of every buffer's first record (any shape)."""
        heads = [_unheld(b.popleft()) for b in self._buffers]
        if self._waiters:
            self._wake_waiters()
        values = [h[0] for h in heads]
        out = self._pack(values) if self._literals else tuple(values)
        meta = merge_metadata(h[1] for h in heads)
        return self._emit_and_release(out, meta, meta)

    def _add_upstream(self, upstream: Stream) -> None:
        super()._add_upstream(upstream)
        extra = len(self.upstreams) - len(self._buffers)
        if extra > 0:
            self.buffers = (*self._buffers, *(deque() for _ in range(extra)))

    def _remove_upstream(self, upstream: Stream) -> None:
        # as in streamz, the input's buffer goes with it; its waiting records
        # will never be part of a tuple, so they complete now
        i = _position(self, upstream)
        buffers = self._buffers
        if i < len(buffers):
            self.buffers = buffers[:i] + buffers[i + 1 :]
            for entry in buffers[i]:
                release_refs(_unheld(entry)[1])
        del self.upstreams[i]
        self._wake_waiters()

    def get_state(self) -> object:
        return {"buffers": [[_unheld(e)[0] for e in b] for b in self._buffers]}

    def set_state(self, state: Any) -> None:
        buffers = tuple(deque(b) for b in state["buffers"])
        if self.upstreams and len(buffers) != len(self.upstreams):
            raise GraphError(
                f"{self.display_name()}: the restored state has {len(buffers)} buffers for "
                f"{len(self.upstreams)} upstreams; restore it into a zip of as many streams"
            )
        # one per upstream, always (the step relies on it); assigned by the public
        # name, so code that holds the old buffers is rebuilt
        self.buffers = buffers
        self._restored_held = len(buffers[0]) if buffers else 0

    def derive_records_out(self, records_in: list[int]) -> int:
        buffers = self._buffers
        if not buffers or not records_in:
            return 0
        return max(records_in[0] + self._restored_held - len(buffers[0]), 0)

    def records_held(self) -> int | None:
        return sum(len(b) for b in list(self._buffers))

    def state_signature(self) -> str:
        lits = [i for i, _ in self._literals]
        return f"Zip(upstreams={len(self._buffers)}, literals_at={lits}, maxsize={self._maxsize})"


class _LatestOfEach(Stream):
    """What ``zip_latest`` and ``combine_latest`` share: the latest value of each input."""

    last: list[Any]
    _have: list[bool]
    _meta: list[Metadata | None]
    _missing: int

    def _grow(self) -> None:
        """Make room for upstreams connected after construction."""
        extra = len(self.upstreams) - len(self.last)
        if extra < 0:
            raise GraphError(
                f"{self.display_name()}: an upstream was disconnected; "
                "build a new node instead of removing inputs from a join"
            )
        self.last.extend([None] * extra)
        self._have.extend([False] * extra)
        self._meta.extend([None] * extra)
        self._missing += extra

    def _add_upstream(self, upstream: Stream) -> None:
        super()._add_upstream(upstream)
        self._grow()

    def _forget(self, i: int) -> None:
        """Drop the latest value of input ``i`` (and release its record)."""
        del self.last[i]
        if not self._have.pop(i):
            self._missing -= 1
        release_refs(self._meta.pop(i))


@Stream.register_api(attribute_name="zip_latest")
class ZipLatest(_LatestOfEach):
    """Pair every record of the first (lossless) stream with the latest of the others.

    Records of the lossless stream that arrive before every other stream has
    produced a value wait (keeping their references) and are emitted, in
    order, as soon as it has.  The latest value of each other stream keeps
    its reference until it is replaced.

    >>> a, b = Stream(), Stream()
    >>> L = a.zip_latest(b).sink_to_list()
    >>> a.emit(1); a.emit(2); b.emit("x"); L
    [(1, 'x'), (2, 'x')]
    >>> a.emit(3); b.emit("y"); a.emit(4); L[2:]
    [(3, 'x'), (4, 'y')]
    """

    _graphviz_orientation = 270
    _graphviz_shape = "triangle"

    def __init__(self, lossless: Stream, *upstreams: Stream, **kwargs: Unpack[NodeOptions]) -> None:
        streams = (lossless, *upstreams)
        for u in streams:
            if not isinstance(u, Stream):
                raise ConfigurationError(
                    f"zip_latest: every argument must be a stream, got {u!r}; pass streams"
                )
        self.lossless = lossless
        self.last: list[Any] = [None] * len(streams)
        self._have = [False] * len(streams)
        self._meta: list[Metadata | None] = [None] * len(streams)
        self._pending: deque[tuple[Any, Metadata | None]] = deque()
        self._missing = len(streams) - 1
        Stream.__init__(self, upstreams=list(streams), **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        idx = _index_of(self, who)
        if len(self.last) != len(self.upstreams):
            self._grow()
        if metadata:
            self._retain_refs(metadata)
        if idx == 0:
            self._pending.append((x, metadata))
        else:
            release_refs(self._meta[idx])
            self._meta[idx] = metadata
            self.last[idx] = x
            if not self._have[idx]:
                self._have[idx] = True
                self._missing -= 1
        if self._missing:
            return None
        out: list[Awaitable[object]] | None = None
        others = self.last[1:]
        pending = self._pending
        while pending:
            v, md = pending.popleft()
            meta = merge_metadata([md, *self._meta[1:]]) if (md or any(self._meta)) else None
            try:
                r = self._emit((v, *others), meta)
            except BaseException:
                release_refs(md)
                raise
            r = self._release_after(r, md)
            if r:
                if out is None:
                    out = []
                out.extend(r)
        return out

    def _remove_upstream(self, upstream: Stream) -> None:
        i = _position(self, upstream)
        if i == 0:
            raise GraphError(
                f"{self.display_name()}: cannot disconnect {upstream!r}, the lossless stream "
                "whose records it emits; build a new zip_latest instead"
            )
        if i < len(self.last):
            self._forget(i)
        del self.upstreams[i]

    def get_state(self) -> object:
        return {
            "last": list(self.last[1:]),
            "have": list(self._have[1:]),
            "pending": [v for v, _ in self._pending],
        }

    def set_state(self, state: Any) -> None:
        self.last = [None, *state["last"]]
        self._have = [False, *state["have"]]
        self._missing = sum(1 for h in self._have[1:] if not h)
        self._meta = [None] * len(self.last)
        self._pending = deque((v, None) for v in state["pending"])

    def state_signature(self) -> str:
        return f"ZipLatest(upstreams={len(self.last)})"


@Stream.register_api(attribute_name="combine_latest")
class CombineLatest(_LatestOfEach):
    """Emit a tuple of the latest value of every upstream whenever one of them updates.

    ``emit_on`` (a stream, an upstream index, or a list of these) limits
    emission to updates of those upstreams; the default is every upstream.
    Nothing is emitted until every upstream has produced a value.

    Completion tracking: the latest value of each upstream keeps its
    reference until it is replaced.  A record of an ``emit_on`` upstream that
    arrives before every upstream has produced a value is not buffered for a
    later emission: its value becomes that upstream's latest (it appears in
    later tuples) but its reference is released at once, so it counts as
    completed.

    >>> a, b = Stream(), Stream()
    >>> L = a.combine_latest(b).sink_to_list()
    >>> a.emit(1); b.emit("x"); a.emit(2); b.emit("y"); L
    [(1, 'x'), (2, 'x'), (2, 'y')]
    >>> c, d = Stream(), Stream()
    >>> L2 = c.combine_latest(d, emit_on=0).sink_to_list()
    >>> c.emit(1); d.emit("x"); d.emit("y"); c.emit(2); L2
    [(2, 'y')]
    """

    _graphviz_orientation = 270
    _graphviz_shape = "triangle"

    def __init__(
        self, *upstreams: Stream, emit_on: object = None, **kwargs: Unpack[NodeOptions]
    ) -> None:
        if not upstreams:
            raise ConfigurationError("combine_latest: needs at least one upstream; pass streams")
        for u in upstreams:
            if not isinstance(u, Stream):
                raise ConfigurationError(
                    f"combine_latest: every upstream must be a stream, got {u!r}; pass streams"
                )
        self._emit_all = emit_on is None
        self._emit_on_idx = self._resolve_emit_on(upstreams, emit_on)
        self._emits = [i in self._emit_on_idx for i in range(len(upstreams))]
        self.last: list[Any] = [None] * len(upstreams)
        self._have = [False] * len(upstreams)
        self._meta: list[Metadata | None] = [None] * len(upstreams)
        self._missing = len(upstreams)
        Stream.__init__(self, upstreams=list(upstreams), **kwargs)

    @staticmethod
    def _resolve_emit_on(upstreams: tuple[Stream, ...], emit_on: object) -> tuple[int, ...]:
        if emit_on is None:
            return tuple(range(len(upstreams)))
        items = list(emit_on) if isinstance(emit_on, Iterable) else [emit_on]
        if not items:
            raise ConfigurationError(
                "combine_latest: emit_on is an empty list, so nothing would ever be emitted; "
                "pass None (emit on every upstream), a stream, an index, or a list of them"
            )
        out: list[int] = []
        for item in items:
            if isinstance(item, Stream):
                idx = next((i for i, u in enumerate(upstreams) if u is item), None)
                if idx is None:
                    raise ConfigurationError(
                        f"combine_latest: emit_on stream {item!r} is not one of the upstreams; "
                        "pass one of the combined streams or its index"
                    )
            elif isinstance(item, int) and not isinstance(item, bool):
                if not 0 <= item < len(upstreams):
                    raise ConfigurationError(
                        f"combine_latest: emit_on index {item!r} is out of range for "
                        f"{len(upstreams)} upstreams; pass an index from 0 to {len(upstreams) - 1}"
                    )
                idx = item
            else:
                raise ConfigurationError(
                    f"combine_latest: emit_on must be a stream, an index or a list of them, "
                    f"got {item!r}; pass e.g. emit_on=0 or emit_on=[source]"
                )
            if idx not in out:
                out.append(idx)
        return tuple(sorted(out))

    @property
    def emit_on(self) -> tuple[Stream, ...]:
        """The upstreams whose updates cause an emission."""
        return tuple(self.upstreams[i] for i in self._emit_on_idx)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        idx = _index_of(self, who)
        if len(self.last) != len(self.upstreams):
            self._grow()
        old = self._meta[idx]
        self.last[idx] = x
        if self._missing:
            if not self._have[idx]:
                self._have[idx] = True
                self._missing -= 1
            if self._missing and self._emits[idx]:
                # early emit_on record: keep the value, do not hold the record
                self._meta[idx] = None
                release_refs(old)
                return None
        if metadata:
            self._retain_refs(metadata)
        self._meta[idx] = metadata
        release_refs(old)
        if self._missing or not self._emits[idx]:
            return None
        meta = merge_metadata(self._meta) if any(self._meta) else None
        return self._emit(tuple(self.last), meta)

    def _grow(self) -> None:
        extra = len(self.upstreams) - len(self.last)
        super()._grow()
        self._emits.extend([self._emit_all] * extra)
        if self._emit_all:
            self._emit_on_idx = tuple(range(len(self.last)))

    def _remove_upstream(self, upstream: Stream) -> None:
        i = _position(self, upstream)
        if i < len(self.last):
            if not self._emit_all and self._emit_on_idx == (i,):
                raise GraphError(
                    f"{self.display_name()}: cannot disconnect {upstream!r}, its only emit_on "
                    "upstream: nothing would be emitted any more; build a new combine_latest "
                    "with another emit_on"
                )
            self._forget(i)
            del self._emits[i]
            self._emit_on_idx = tuple(j for j, e in enumerate(self._emits) if e)
        del self.upstreams[i]

    def get_state(self) -> object:
        return {"last": list(self.last), "have": list(self._have)}

    def set_state(self, state: Any) -> None:
        self.last = list(state["last"])
        self._have = list(state["have"])
        self._missing = sum(1 for h in self._have if not h)
        self._meta = [None] * len(self.last)

    def state_signature(self) -> str:
        return f"CombineLatest(upstreams={len(self.last)}, emit_on={list(self._emit_on_idx)})"


@Stream.register_api(attribute_name="union")
class Union(Stream):
    """Pass on every record of any upstream, as it arrives.

    >>> a, b = Stream(), Stream()
    >>> L = a.union(b).sink_to_list()
    >>> a.emit(1); b.emit(2); a.emit(3); L
    [1, 2, 3]
    """

    derived_out = True

    def __init__(self, *upstreams: Stream, **kwargs: Unpack[NodeOptions]) -> None:
        for u in upstreams:
            if not isinstance(u, Stream):
                raise ConfigurationError(
                    f"union: every upstream must be a stream, got {u!r}; pass streams"
                )
        Stream.__init__(self, upstreams=list(upstreams), **kwargs)
