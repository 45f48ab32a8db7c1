"""The base of every streaming frame: values flowing through a stream, with an example.

A :class:`Streaming` wraps a :class:`~rivermark.core.node.Stream` together
with an ``example`` of what flows; :mod:`.core` derives the pandas frames
(``DataFrame``, ``Series`` ...) from it.  Element-wise operations build
``map`` nodes through :meth:`Streaming.map_partitions`.

Objects derived element-wise from the same DataFrame remember how they were
computed from it, so ``sdf.x + sdf.y`` or ``sdf[sdf.x > 0]`` need no zip: they
are computed together, from the same batch.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any, cast

from rivermark.core.graph import ancestors
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["FRAME_TYPES", "Streaming"]


def _identity(x: object) -> object:
    return x


def _example_of(
    func: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    vals = [a.example if isinstance(a, Streaming) else a for a in args]
    return func(*vals, **kwargs)


class _Apply:
    """``func(*args, **kwargs)`` with the streaming arguments replaced by one record.

    A class rather than a closure so that it pickles without the streaming
    arguments (and the graph behind them): on a Dask stream it is sent to
    the workers.
    """

    def __init__(
        self, func: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ):
        self.func = func
        self.pos = tuple(i for i, a in enumerate(args) if isinstance(a, Streaming))
        self.const = tuple(None if isinstance(a, Streaming) else a for a in args)
        self.kwargs = kwargs

    def __call__(self, x: object) -> object:
        vals = list(self.const)
        for i in self.pos:
            vals[i] = x
        return self.func(*vals, **self.kwargs)


class _ApplyEach:
    """``func`` with each streaming argument computed from the root's record by its own path."""

    def __init__(
        self, func: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ):
        self.func = func
        self.fns = tuple(a._fn if isinstance(a, Streaming) else None for a in args)  # noqa: SLF001 - a frame of the same class
        self.const = tuple(None if isinstance(a, Streaming) else a for a in args)
        self.kwargs = kwargs

    def __call__(self, v: object) -> object:
        vals = [f(v) if f is not None else c for f, c in zip(self.fns, self.const)]
        return self.func(*vals, **self.kwargs)


class _Then:
    """``second(first(v))``, picklable."""

    def __init__(
        self, first: Callable[[object], object], second: Callable[[object], object]
    ) -> None:
        self.first = first
        self.second = second

    def __call__(self, v: object) -> object:
        return self.second(self.first(v))


class Streaming:
    """A stream of values with an ``example`` of what flows; the base of every frame.

    >>> s = Stream()
    >>> sc = Streaming(s, example=0)
    >>> L = (sc * 2).stream.sink_to_list()
    >>> s.emit(3); L
    [6]
    """

    _stream_type = "streaming"

    def __init__(
        self,
        stream: Stream | None = None,
        example: object = None,
        stream_type: str | None = None,
    ) -> None:
        self.stream = stream if stream is not None else Stream()
        self.example = example
        if stream_type is not None:
            if stream_type not in ("streaming", "updating"):
                raise ConfigurationError(
                    f"{type(self).__name__}: stream_type must be 'streaming' or 'updating', "
                    f"got {stream_type!r}"
                )
            self._stream_type = stream_type
        # how this object is computed from a root stream's record (for combining)
        self._root: Stream = self.stream
        self._fn: Callable[[object], object] = _identity

    @property
    def local_stream(self) -> Stream:
        """``self.stream``, gathered to values when it carries Dask futures.

        Stateful nodes (reductions, cumulative, windowed, rolling and groupby
        aggregations) keep their state in the pipeline's process, where it is
        checkpointed; on a Dask stream their input is gathered first, as
        ``sdf.stream.gather()`` would.  A plain stream's ``gather()`` is the
        stream itself.
        """
        stream = self.stream
        if type(stream).gather is Stream.gather:
            return stream
        return stream.gather()

    # ---------------------------------------------------------------- building blocks
    @staticmethod
    def map_partitions(func: Callable[..., object], *args: object, **kwargs: object) -> Streaming:
        """Apply ``func`` to each record; streaming arguments are replaced by their records.

        Arguments derived from the same root stream are evaluated on the same
        record, so ``map_partitions(operator.add, sdf.x, sdf.y)`` works.
        """
        example = kwargs.pop("example", None)
        stream_type = cast("str | None", kwargs.pop("stream_type", None))
        streams = [a for a in args if isinstance(a, Streaming)]
        if not streams:
            raise ConfigurationError(
                "map_partitions: pass at least one streaming DataFrame/Series argument"
            )
        if example is None:
            try:
                example = _example_of(func, args, kwargs)
            except Exception as e:  # the function may not work on empty examples
                logger.debug("map_partitions: no example from %r: %r", func, e)
                example = None
        first = streams[0]
        if stream_type is None:
            stream_type = first._stream_type
        distinct = {id(a.stream) for a in streams}
        fn: Callable[[object], object]
        if len(distinct) == 1:
            apply = _Apply(func, args, kwargs)
            out_stream = first.stream.map(apply)  # type: ignore[attr-defined]
            root = first._root  # noqa: SLF001 - a frame of the same class
            fn = _Then(first._fn, apply)  # noqa: SLF001 - a frame of the same class

        elif len({id(a._root) for a in streams}) != 1:  # noqa: SLF001 - a frame of the same class
            if not _share_a_source([a.stream for a in streams]):
                raise ConfigurationError(  # optional __name__: a callable object has none
                    f"map_partitions({getattr(func, '__name__', func)!r}): the arguments come "
                    "from different source streams; combine frames derived from the same "
                    "DataFrame, or join their streams first (e.g. with zip) and build one "
                    "DataFrame from the result"
                )
            # results of different stateful nodes of the same source (e.g.
            # ``sdf.x - sdf.x.rolling(3).mean()``): as streamz, zip their streams,
            # which pairs their records in arrival order
            return Streaming._zip_partitions(func, args, kwargs, example, stream_type)
        else:
            root = first._root  # noqa: SLF001 - a frame of the same class
            fn = _ApplyEach(func, args, kwargs)
            out_stream = root.map(fn)  # type: ignore[attr-defined]
        out = _wrap(out_stream, example, stream_type)
        out._root = root  # noqa: SLF001 - a frame of the same class
        out._fn = fn  # noqa: SLF001 - a frame of the same class
        return out

    @staticmethod
    def _zip_partitions(
        func: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
        example: object,
        stream_type: str,
    ) -> Streaming:
        """``map_partitions`` over arguments with different roots: zip their streams.

        Each argument stream must emit one record per record of the source
        they derive from (true for element-wise results, reductions, windows
        and rolling aggregations of the same DataFrame); the records are
        paired in arrival order.
        """
        streams: list[Stream] = []
        slots: list[int | None] = []
        for a in args:
            if isinstance(a, Streaming):
                pos = next((i for i, st in enumerate(streams) if st is a.stream), None)
                if pos is None:
                    streams.append(a.stream)
                    pos = len(streams) - 1
                slots.append(pos)
            else:
                slots.append(None)
        consts = list(args)

        def apply(records: tuple[object, ...]) -> object:
            vals = [records[i] if i is not None else c for i, c in zip(slots, consts)]
            return func(*vals, **kwargs)

        zipped = Stream.zip(*streams)  # type: ignore[attr-defined]
        return _wrap(zipped.map(apply), example, stream_type)

    @classmethod
    def register_api(
        cls,
        modifier: Callable[[Callable[..., object]], object] = _identity,
        attribute_name: str | None = None,
    ) -> Callable[[Callable[..., object]], Callable[..., object]]:
        """Add a method to this frame class (and its subclasses), as streamz's ``register_api``.

        >>> import pandas as pd
        >>> from rivermark.dataframe import DataFrame
        >>> @DataFrame.register_api()
        ... def double(self):
        ...     return self * 2
        >>> source = Stream()
        >>> sdf = DataFrame(source, example=pd.DataFrame({"x": [1]}))
        >>> L = sdf.double().x.stream.sink_to_list()
        >>> source.emit(pd.DataFrame({"x": [4]})); L[0].tolist()
        [8]
        """

        def register(func: Callable[..., object]) -> Callable[..., object]:
            # optional: a callable object has no __name__
            name = attribute_name or getattr(func, "__name__", None)
            if not name:
                raise ConfigurationError(
                    f"register_api: cannot infer a name for {func!r}; pass attribute_name="
                )
            setattr(cls, name, modifier(func))
            return func

        return register

    def accumulate_partitions(self, func: Callable[..., object], **kwargs: object) -> Streaming:
        """A running ``state = func(state, batch, **kwargs)`` over the batches, as in streamz.

        ``start``, ``returns_state`` and ``with_state`` are those of
        :meth:`Stream.accumulate`; ``example`` (else ``func`` called on the
        example) types the result and ``stream_type`` (default: this
        object's) says whether it is streaming or updating.  The state is
        checkpointed with the node.
        """
        from rivermark.operators.stateful import no_default

        start = kwargs.pop("start", no_default)
        returns_state = kwargs.pop("returns_state", False)
        example = kwargs.pop("example", None)
        stream_type = cast(str, kwargs.pop("stream_type", self._stream_type))
        with_state = kwargs.get("with_state", False)
        if example is None:
            try:
                example = func(
                    start, self.example, **{k: v for k, v in kwargs.items() if k != "with_state"}
                )
                if returns_state:
                    example = cast("tuple[object, object]", example)[1]
            except Exception as e:  # the function may not accept the start marker
                logger.debug("accumulate_partitions: no example from %r: %r", func, e)
                example = self.example
            if with_state:
                example = (start, example)
        node = self.local_stream.accumulate(  # type: ignore[attr-defined]
            func, start=start, returns_state=returns_state, **kwargs
        )
        return self.accumulate_node(node, example, stream_type)

    def accumulate_node(
        self, node: Stream, example: object, stream_type: str = "updating", name: str | None = None
    ) -> Streaming:
        """Wrap a stateful node built on ``self.stream`` (its output becomes a new root).

        ``name`` names the node, as ``name=`` does on every node: its state is
        then matched by that name across changes of the graph around it.
        """
        if name is not None:
            node.name = name
        return _wrap(node, example, stream_type)

    # ---------------------------------------------------------------- operators
    def _binop(self, other: object, op: Callable[..., object]) -> Streaming:
        return self.map_partitions(op, self, other)

    def _rbinop(self, other: object, op: Callable[..., object]) -> Streaming:
        return self.map_partitions(op, other, self)

    def __add__(self, o: object) -> Streaming:
        return self._binop(o, operator.add)

    def __radd__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.add)

    def __sub__(self, o: object) -> Streaming:
        return self._binop(o, operator.sub)

    def __rsub__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.sub)

    def __mul__(self, o: object) -> Streaming:
        return self._binop(o, operator.mul)

    def __rmul__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.mul)

    def __truediv__(self, o: object) -> Streaming:
        return self._binop(o, operator.truediv)

    def __rtruediv__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.truediv)

    def __floordiv__(self, o: object) -> Streaming:
        return self._binop(o, operator.floordiv)

    def __rfloordiv__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.floordiv)

    def __mod__(self, o: object) -> Streaming:
        return self._binop(o, operator.mod)

    def __rmod__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.mod)

    def __pow__(self, o: object) -> Streaming:
        return self._binop(o, operator.pow)

    def __rpow__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.pow)

    def __and__(self, o: object) -> Streaming:
        return self._binop(o, operator.and_)

    def __rand__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.and_)

    def __or__(self, o: object) -> Streaming:
        return self._binop(o, operator.or_)

    def __ror__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.or_)

    def __xor__(self, o: object) -> Streaming:
        return self._binop(o, operator.xor)

    def __rxor__(self, o: object) -> Streaming:
        return self._rbinop(o, operator.xor)

    def __lt__(self, o: object) -> Streaming:
        return self._binop(o, operator.lt)

    def __le__(self, o: object) -> Streaming:
        return self._binop(o, operator.le)

    def __gt__(self, o: object) -> Streaming:
        return self._binop(o, operator.gt)

    def __ge__(self, o: object) -> Streaming:
        return self._binop(o, operator.ge)

    def __eq__(self, o: object) -> Streaming:  # type: ignore[override]
        return self._binop(o, operator.eq)

    def __ne__(self, o: object) -> Streaming:  # type: ignore[override]
        return self._binop(o, operator.ne)

    __hash__ = object.__hash__

    def __neg__(self) -> Streaming:
        return self.map_partitions(operator.neg, self)

    def __abs__(self) -> Streaming:
        return self.map_partitions(operator.abs, self)

    def __invert__(self) -> Streaming:
        return self.map_partitions(operator.invert, self)

    # ---------------------------------------------------------------- misc
    def emit(self, x: object) -> object:
        """Push one batch into the underlying stream (checked against the example)."""
        self.verify(x)
        return self.stream.emit(x)

    def verify(self, x: object) -> None:
        """Check that ``x`` is like the example (overridden by frames)."""

    def start(self) -> None:
        """Start the sources upstream."""
        self.stream.start()

    def stop(self) -> None:
        """Stop the sources upstream."""
        self.stream.stop()

    def __repr__(self) -> str:
        ex = self.example
        if hasattr(ex, "head"):
            ex = ex.head(2)
        return f"{type(self).__name__} - elements like:\n{ex!r}"

    def _ipython_display_(self) -> None:
        """In Jupyter: the latest rows, kept current as records flow (``rivermark[notebook]``)."""
        from rivermark.observe.notebook import display_frame

        display_frame(self)

    def _repr_html_(self) -> str:
        ex: Any = self.example  # any record: pandas objects render as HTML
        body = ex.head(2)._repr_html_() if hasattr(ex, "_repr_html_") else repr(ex)
        return f"<h5>{type(self).__name__} - elements like</h5>\n{body}"


def _sources_of(stream: Stream) -> set[int]:
    """The ids of the nodes without upstreams that ``stream`` derives from."""
    if not stream.upstreams:
        return {id(stream)}
    return {id(n) for n in ancestors(stream) if not n.upstreams}


def _share_a_source(streams: list[Stream]) -> bool:
    """Whether every stream derives from one same source node."""
    common = _sources_of(streams[0])
    for st in streams[1:]:
        common &= _sources_of(st)
    return bool(common)


#: the frame classes that :func:`_wrap` gives a result, by the pandas type of
#: its example: ``{pandas type: (streaming class, updating class)}``, looked
#: up in order.  :mod:`.core` fills it with the classes it defines
#: (``DataFrame``, ``Series``, ``Index`` ...); any other example gives a
#: plain :class:`Streaming`.
FRAME_TYPES: dict[type, tuple[type[Streaming], type[Streaming]]] = {}


def _wrap(stream: Stream, example: object, stream_type: str) -> Streaming:
    """The frame class for ``example`` (DataFrame, Series, Index, or generic Streaming)."""
    for kind, (streaming, updating) in FRAME_TYPES.items():
        if isinstance(example, kind):
            return (streaming if stream_type == "streaming" else updating)(
                stream, example, stream_type=stream_type
            )
    return Streaming(stream, example, stream_type=stream_type)
