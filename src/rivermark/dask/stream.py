"""``DaskStream``, the base of every scattered node, and the nodes that submit one task per record."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import distributed

from rivermark.core.graph import ancestors
from rivermark.core.node import Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.dask.client import _check_client, _default_client, _label
from rivermark.dask.tasks import _apply, _apply_star


class DaskStream(Stream):
    """A stream whose records are Dask futures (made by ``Stream.scatter()``).

    ``map``, ``starmap`` and ``accumulate`` submit work to the cluster;
    ``gather()`` returns to local values.

    >>> from distributed import Client
    >>> client = Client(processes=False, n_workers=1, dashboard_address=":0")
    >>> source = Stream()
    >>> total = source.scatter().map(lambda x: x * 10).accumulate(lambda a, b: a + b)
    >>> out = total.gather()
    >>> L = out.sink_to_list()
    >>> for i in range(1, 4):
    ...     source.emit(i)
    >>> out.flush()
    >>> L
    [10, 30, 60]
    >>> client.close()
    """

    _graphviz_fillcolor: ClassVar[str] = "lightblue"
    #: the client given to ``scatter(client=...)``; the nodes below it remember it too
    dask_client: distributed.Client | None = None

    @property
    def client(self) -> distributed.Client:
        """The Dask client: an upstream ``scatter(client=...)``'s, else the default one."""
        if self.dask_client is not None:
            return self.dask_client
        for n in ancestors(self):
            if isinstance(n, DaskStream) and n.dask_client is not None:
                self.dask_client = n.dask_client
                return n.dask_client
        return _default_client(self)

    def _submit(
        self, func: Callable[..., object], *args: object, label: object = None
    ) -> distributed.Future[object]:
        client = self.client
        _check_client(self, client)
        # keys name the user's function, so errors and the dashboard say what ran
        key = f"{_label(label if label is not None else func)}-{uuid.uuid4().hex}"
        return client.submit(func, *args, key=key, pure=False)


class _Inline:
    """A record on its way from ``scatter`` into the task of the node right after it."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


def _arg(x: object) -> object:
    return x.value if type(x) is _Inline else x


@DaskStream.register_api(attribute_name="map")
class DaskMap(DaskStream):
    """Submit ``func(x, *args, **kwargs)`` for every future; emit the result's future.

    >>> s = Stream()
    >>> type(s.scatter().map(abs)).__name__
    'DaskMap'
    """

    _worker_call: ClassVar[Callable[..., object]] = staticmethod(_apply)

    def __init__(
        self, upstream: Stream, func: Callable[..., object], *args: object, **kwargs: Any
    ) -> None:
        check_callable("map", "func", func)
        self.func = func
        stream_name = kwargs.pop("stream_name", None)
        name = kwargs.pop("name", None)
        on_error = kwargs.pop("on_error", None)
        self.args = args
        self.kwargs = kwargs
        DaskStream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    def update(
        self, x: object, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        fut = self._submit(
            self._worker_call, self.func, _arg(x), self.args, self.kwargs, label=self.func
        )
        return self._emit(fut, metadata)


@DaskStream.register_api(attribute_name="starmap")
class DaskStarmap(DaskMap):
    """Submit ``func(*x, *args, **kwargs)`` for every future of a tuple.

    >>> s = Stream()
    >>> type(s.scatter().starmap(max)).__name__
    'DaskStarmap'
    """

    _worker_call: ClassVar[Callable[..., object]] = staticmethod(_apply_star)
