"""Synchronous sinks: ``sink(func)`` and ``sink_to_list()``.

A synchronous sink completes a record when its call returns.  When ``func``
returns an awaitable, the record completes only when it finishes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rivermark.core import runtime
from rivermark.core.node import Fixed, Planned, Stream, check_callable, is_coroutine_function
from rivermark.core.refs import Metadata, release_refs, retain_refs
from rivermark.execution import plan
from rivermark.execution.steps import step

__all__ = ["Sink", "SinkToList"]


def _no_call(x: Any, *args: Any, **kwargs: Any) -> None:
    """The ``func`` of a custom sink subclass that was given none."""


#: keyword arguments of a sink that configure the node, not the user function
_NODE_KWARGS = ("stream_name", "name", "on_error", "loop", "asynchronous", "ensure_io_loop")


@Stream.register_api(attribute_name="sink")
class Sink(Stream):
    """Call ``func(x, *args, **kwargs)`` on every record; nothing is emitted on.

    Delivery through a user ``sink`` is at-least-once under checkpoints: after a
    crash, records since the last checkpoint are passed to ``func`` again.
    ``func`` may be a coroutine function (``async def`` or Tornado's
    ``@gen.coroutine``): the sink then runs on the event loop and an ``emit``
    waits for the call to finish.

    As streamz's ``Sink``, the class is also the base of custom sinks: a
    subclass overrides ``update`` and calls ``super().__init__(upstream,
    **kwargs)`` without ``func``.

    >>> s = Stream()
    >>> seen = []
    >>> _ = s.sink(seen.append)
    >>> s.emit("a"); seen
    ['a']
    >>> class Doubled(Sink):
    ...     def update(self, x, who=None, metadata=None):
    ...         seen.append(2 * x)
    >>> _ = Doubled(s)
    >>> s.emit("b"); seen
    ['a', 'b', 'bb']
    """

    _graphviz_shape: ClassVar[str] = "trapezium"
    args = Fixed()
    kwargs = Fixed()
    # read on every record: the generated code holds it; assigning it rebuilds that code
    func = Planned()

    def __init__(
        self, upstream: Stream, func: Callable[..., Any] | None = None, *args: Any, **kwargs: Any
    ) -> None:
        if func is not None or type(self) is Sink:
            check_callable("sink", "func", func)
        self._func: Callable[..., Any] = func if func is not None else _no_call
        node_kwargs = {k: kwargs.pop(k) for k in _NODE_KWARGS if k in kwargs}
        self._args = args
        self._kwargs = kwargs
        # A coroutine function makes this an asynchronous node: emits then run
        # on the event loop and wait for the awaitable (backpressure).
        if func is not None and is_coroutine_function(func):
            self._is_async = True
        self.in_flight = 0
        Stream.__init__(self, upstream, **node_kwargs)

    def records_held(self) -> int | None:
        return self.in_flight if self._is_async else None

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        func = self.func
        try:
            r = func(x, *self._args, **self._kwargs)
        except Exception as e:
            self._user_error(x, e, func)
            return None
        if r is None:
            return None
        return self._after_call(x, r, metadata)  # an awaitable: the record waits for it

    def _after_call(
        self, x: Any, r: Any, metadata: Metadata | None
    ) -> list[Awaitable[object]] | None:
        if inspect.isawaitable(r):
            retain_refs(metadata)
            self.in_flight += 1
            if runtime.current_loop() is None:
                # a plain function returned an awaitable in a synchronous graph
                runtime.run_sync(self.loop, self._finish(x, r, metadata))
                return None
            if not self._is_async:
                # e.g. sink(tornado_queue.put) called on a loop: from now on the
                # sink is asynchronous, so ``emit`` waits for what it returns
                self._is_async = True
                plan.changed(self)
            return [asyncio.ensure_future(self._finish(x, r, metadata))]
        return None

    async def _finish(self, x: Any, r: Awaitable[object], metadata: Metadata | None) -> None:
        try:
            await r
        except Exception as e:
            try:
                self._user_error(x, e, self.func)  # returns if the policy drops it
            except BaseException:
                # raised to whoever awaits the record; it stays incomplete
                self.in_flight -= 1
                raise
        self.in_flight -= 1
        release_refs(metadata)


@Stream.register_api(attribute_name="sink_to_list")
class SinkToList(Stream):
    """Append every record to the list ``L`` (returned by ``sink_to_list()``).

    Under checkpoints the list is part of the job's state.

    >>> s = Stream()
    >>> L = s.sink_to_list()
    >>> s.emit(1); s.emit(2); L
    [1, 2]
    """

    _graphviz_shape: ClassVar[str] = "trapezium"
    _state_attrs: ClassVar[tuple[str, ...]] = ("L",)

    def __new__(cls, upstream: Stream, **kwargs: Any) -> Any:
        node = super().__new__(cls)
        node.__init__(upstream, **kwargs)  # type: ignore[misc]
        return node.L

    def __init__(self, upstream: Stream, **kwargs: Any) -> None:
        # optional: set once __init__ has run (__new__ runs it; a second call returns)
        if getattr(self, "_initialised", False):
            return
        self._initialised = True
        self.L: list[Any] = []
        Stream.__init__(self, upstream, **kwargs)

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        self.L.append(x)
        return None

    def set_state(self, state: Any) -> None:
        # keep the list object the user holds; replace its contents
        self.L[:] = state["L"]
