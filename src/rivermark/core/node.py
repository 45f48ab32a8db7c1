"""The stream node: streamz's ``Stream`` with a fast synchronous path.

A node holds strong references to its downstreams (so a sink that nothing
else references keeps receiving while its source feeds it) and to its
upstreams.  ``destroy()`` unlinks a node, after which it can be freed.

``update(x, who, metadata)`` receives a record and returns ``None`` or a list
of awaitables (asynchronous work still running downstream).  ``_emit`` passes
a record to every downstream and returns what they returned, so the caller
can wait for the slowest branch (backpressure).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar, TypedDict, TypeVar

from rivermark.core import runtime
from rivermark.core.config import _VALID_POLICIES as _VALID_POLICIES
from rivermark.core.config import (
    ErrorPolicy,
    Fixed,
    Planned,
    check_callable,
    check_positive_int,
)
from rivermark.core.config import _check_policy as _check_policy
from rivermark.core.facade import StreamFacade
from rivermark.core.facade import _attr_text as _attr_text
from rivermark.core.figures import JoinFigures
from rivermark.core.naming import function_name
from rivermark.core.origin import describe_origin
from rivermark.core.refs import Metadata, release_refs, retain_refs
from rivermark.errors import (
    ConfigurationError,
    ErrorContext,
    NodeFailedError,
    StateStoreError,
    add_context,
)
from rivermark.execution import counting, emitting, plan, push
from rivermark.execution.node import walk_from
from rivermark.execution.steps import step, step_of

logger = logging.getLogger(__name__)

__all__ = [
    "Stream",
    "identity",
    "ErrorPolicy",
    "check_callable",
    "check_positive_int",
    "is_coroutine_function",
    "Fixed",
    "Planned",
    "NodeOptions",
]

F = TypeVar("F")


def identity(x: F) -> F:
    """Return ``x`` unchanged (the default ``register_api`` modifier)."""
    return x


class NodeOptions(TypedDict, total=False):
    """The keyword options every node takes (``Stream.__init__``), passed on by subclasses."""

    stream_name: str | None
    loop: asyncio.AbstractEventLoop | None
    asynchronous: bool | None
    ensure_io_loop: bool
    name: str | None
    on_error: ErrorPolicy | None


#: numbers the nodes in the order they are created (``Stream._serial``)
_SERIALS = itertools.count(1)


def _inherited(upstreams: list[Any], attr: str) -> Any:
    """The first upstream node's ``attr`` that is set (error policy, event loop)."""
    for up in upstreams:
        if isinstance(up, Stream):
            value = getattr(up, attr)
            if value is not None:
                return value
    return None


def _check_asynchronous(upstreams: list[Any], asynchronous: bool) -> None:
    """Refuse ``asynchronous=`` that differs from an upstream's: a graph is one or the other."""
    for up in upstreams:
        theirs = up.asynchronous if isinstance(up, Stream) else None
        if theirs is not None and bool(theirs) != bool(asynchronous):
            raise ConfigurationError(
                f"asynchronous={asynchronous!r} on a node whose upstream {up!r} was "
                f"created with asynchronous={theirs!r}: a graph is either asynchronous "
                "or not; pass the same value (or leave it out downstream)"
            )


def _neighbours(n: Stream) -> list[Stream]:
    """A node's neighbours in the order :meth:`Stream.walk` visits them: upstreams first."""
    return [*reversed(n.downstreams), *reversed(n.upstreams)]


class Stream(StreamFacade):
    """A node in a stream graph; the root of every operator, source and sink.

    Parameters follow streamz: ``upstream``/``upstreams`` connect the node,
    ``stream_name`` labels it in reprs and graphs, ``loop`` pins the event
    loop.  rivermark adds ``name`` (a stable identity for checkpoints) and
    ``on_error`` (``"raise"`` (default), ``"skip"``, or a callable receiving
    the record and the exception; nodes inherit their upstream's policy).

    >>> source = Stream()
    >>> out = source.map(lambda x: x + 1).sink_to_list()
    >>> for i in range(3):
    ...     source.emit(i)
    >>> out
    [1, 2, 3]
    """

    _graphviz_shape: ClassVar[str] = "ellipse"
    _graphviz_style: ClassVar[str] = "rounded,filled"
    _graphviz_fillcolor: ClassVar[str] = "white"
    _graphviz_orientation: ClassVar[int] = 0
    #: attributes shown in ``str(node)``
    str_list: ClassVar[list[str]] = ["func", "predicate", "n", "interval"]
    #: True for nodes whose ``update`` schedules work on an event loop
    _is_async: bool = False
    #: records taken in and not yet passed on or written
    #: (:class:`~rivermark.core.contracts.HoldsWork`); nodes that hold work count it here
    in_flight: int = 0
    #: names of attributes that make up the node's checkpointed state
    _state_attrs: ClassVar[tuple[str, ...]] = ()
    #: True when ``records_out`` is not counted by :mod:`rivermark.execution.counting`:
    #: the node passes on one record per record received unless its function
    #: fails (derived when read), or counts what it emits itself (sources)
    derived_out: bool = False
    #: a root fed by ``emit`` counts what it passes on only when this is set
    #: (:func:`rivermark.execution.plan.count_emits`)
    counts_emits: bool = False
    #: the order nodes were created in: roots are ordered by it (see
    #: :func:`rivermark.core.graph.topological`), so a graph's order and its
    #: derived ids do not depend on the node it is walked from
    _serial: int = 0

    def __init__(
        self,
        upstream: Stream | None = None,
        upstreams: list[Stream] | None = None,
        stream_name: str | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        asynchronous: bool | None = None,
        ensure_io_loop: bool = False,
        name: str | None = None,
        on_error: ErrorPolicy | None = None,
    ) -> None:
        self._serial = next(_SERIALS)
        self.downstreams: list[Stream] = []
        self.upstreams: list[Stream] = (
            list(upstreams) if upstreams is not None else [] if upstream is None else [upstream]
        )
        self.stream_name = stream_name
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        _check_policy(on_error)
        if on_error is None:
            on_error = _inherited(self.upstreams, "on_error")
        self.on_error: ErrorPolicy | None = on_error
        self.error_count = 0
        #: records dropped by ``on_error="skip"`` / handed to an ``on_error`` callable
        self.errors_skipped = 0
        self.errors_handled = 0
        #: the last record whose user function raised, and the exception (read by the metrics)
        self.last_error: tuple[Any, BaseException] | None = None
        #: stepped once per record passed on to the downstreams (:mod:`rivermark.execution.counting`)
        self.out_counter = counting.new_counter()
        if asynchronous is not None:
            _check_asynchronous(self.upstreams, asynchronous)
        self.asynchronous: bool | None = asynchronous
        if ensure_io_loop and not type(self).__module__.startswith("rivermark."):
            # a node written for streamz asks for the loop when its update needs
            # one (it schedules work there): its records are then passed on the loop
            self._is_async = True
        self._loop: asyncio.AbstractEventLoop | None = loop
        if self._loop is None:
            self._loop = _inherited(self.upstreams, "_loop")
        if self._loop is None and (ensure_io_loop or self._is_async):
            self._loop = runtime.current_loop()
        for up in self.upstreams:
            if isinstance(up, Stream):
                up._add_downstream(self)  # noqa: SLF001 - a node links itself below its upstreams

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Let node classes written for streamz return what streamz accepts from ``update``.

        streamz lets ``update`` return a single awaitable (``async def update``,
        a Tornado ``@gen.coroutine``, a future) instead of a list of them.  The
        ``update`` of a class defined outside rivermark is wrapped so that
        such a result becomes the list rivermark expects; a coroutine-function
        ``update`` also marks the class as asynchronous (its records are
        passed on the event loop, and a synchronous ``emit`` waits for them).
        Its ``_emit`` always returns a list, as streamz's does (so
        ``await asyncio.gather(*self._emit(x))`` works).
        """
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("rivermark.") or step_of(cls.__dict__.get("update")):
            return  # rivermark's own kind of node (a step returns None or a list)
        if "_emit" not in cls.__dict__:
            cls._emit = _emit_list  # type: ignore[assignment]
        update = cls.__dict__.get("update")
        if (
            update is None
            or isinstance(update, (staticmethod, classmethod))
            or not callable(update)
        ):
            return
        if is_coroutine_function(update):
            cls._is_async = True
        cls.update = _wrap_user_update(update)  # type: ignore[method-assign]

    def _user_results(self, result: Any) -> list[Awaitable[object]] | None:
        """The awaitable a user ``update`` returned, as the list rivermark passes upstream.

        A node that returns an awaitable needs the event loop: it is marked
        asynchronous from then on, so later records are passed on the loop
        and ``emit`` waits for them (the record at hand cannot wait anymore
        when the graph was taken for a synchronous one).
        """
        if not inspect.isawaitable(result):
            return None  # streamz ignores other return values as well
        if not self._is_async:
            self._is_async = True
            plan.changed(self)
        if runtime.current_loop() is not None:
            return [asyncio.ensure_future(result)]
        # called outside any event loop: run it to the end on the node's loop
        runtime.run_sync(self.loop, _awaited(result))
        return None

    # ------------------------------------------------------------------ API registry
    @classmethod
    def register_api(
        cls, modifier: Callable[[Any], Any] = identity, attribute_name: str | None = None
    ) -> Callable[[F], F]:
        """Add a node class or function to the chaining API (as in streamz).

        >>> @Stream.register_api(attribute_name="double")
        ... class Double(Stream):
        ...     def update(self, x, who=None, metadata=None):
        ...         return self._emit(2 * x, metadata)
        >>> s = Stream(); L = s.double().sink_to_list(); s.emit(4); L
        [8]
        """

        def register(func: F) -> F:
            @functools.wraps(func)  # type: ignore[arg-type]
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                return func(*args, **kwargs)  # type: ignore[operator]

            # optional: a callable object has no __name__
            name = attribute_name or getattr(func, "__name__", None)
            if not name:
                raise ConfigurationError(
                    f"register_api: cannot infer a name for {func!r}; pass attribute_name="
                )
            # as in streamz, the method carries its API name (Stream.map.__name__ == "map")
            wrapped.__name__ = name
            wrapped.__qualname__ = f"{cls.__name__}.{name}"
            if isinstance(func, type) and "_api_name" not in func.__dict__:
                # the first name a node class is registered under is shown by str(node)
                func._api_name = name  # type: ignore[attr-defined]  # noqa: SLF001
            setattr(cls, name, modifier(wrapped))
            return func

        return register

    # ------------------------------------------------------------------ graph shape
    @property
    def upstream(self) -> Stream | None:
        """The single upstream (``None`` for a source)."""
        if len(self.upstreams) > 1:
            raise ValueError(f"{self!r} has more than one upstream; use .upstreams")
        return self.upstreams[0] if self.upstreams else None

    def _add_downstream(self, d: Stream) -> None:
        if d not in self.downstreams:
            self.downstreams.append(d)
        plan.changed(self, d)

    def _add_upstream(self, upstream: Stream) -> None:
        """Record ``upstream`` as a new input (called by :meth:`connect`).

        As in streamz, a node that keeps something per upstream (a buffer, a
        latest value) overrides this and :meth:`_remove_upstream`.
        """
        self.upstreams.append(upstream)

    def _remove_upstream(self, upstream: Stream) -> None:
        """Forget the input ``upstream`` (called by :meth:`disconnect` and :meth:`destroy`)."""
        self.upstreams.remove(upstream)

    def connect(self, downstream: Stream) -> None:
        """Connect this node to ``downstream`` (the same as creating it with ``upstream=self``)."""
        self._add_downstream(downstream)
        if self not in downstream.upstreams:
            downstream._add_upstream(self)
        plan.changed(self, downstream)

    def disconnect(self, downstream: Stream) -> None:
        """Disconnect this node from ``downstream``."""
        if downstream in self.downstreams:
            self.downstreams.remove(downstream)
        if self in downstream.upstreams:
            downstream._remove_upstream(self)
        plan.changed(self, downstream)

    def destroy(self, streams: list[Stream] | None = None) -> None:
        """Unlink this node from its upstreams so it (and what only it feeds) can be freed."""
        ups = list(streams if streams is not None else self.upstreams)
        for up in ups:
            if self in up.downstreams:
                up.downstreams.remove(self)
            if up in self.upstreams:
                self._remove_upstream(up)
        plan.changed(self, *ups)

    def walk(self) -> Iterator[Stream]:
        """Every node connected to this one (upstream or downstream), each once."""
        return walk_from([self], _neighbours)

    # ------------------------------------------------------------------ loop
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this node's asynchronous work runs on."""
        if self._loop is None:
            for n in self.walk():
                loop = n._loop  # noqa: SLF001 - a node of the same graph
                if loop is not None:
                    self._loop = loop
                    break
            else:
                self._loop = runtime.current_loop() or runtime.background_loop()
        return self._loop

    @loop.setter
    def loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Move this node's asynchronous work to ``loop`` (before the graph runs)."""
        self._loop = loop
        plan.changed(self)

    # ------------------------------------------------------------------ data flow
    #: the plan of this node's graph (:mod:`rivermark.execution.plan`); None until built
    _rivermark_plan: plan.Plan | None = None

    @step
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        """Receive ``x`` from upstream ``who``; the base node passes it on unchanged."""
        return self._emit(x, metadata)

    #: pass ``x`` on to every downstream; returns their awaitables (the node's push)
    _emit = push.pass_down
    #: the push to the downstreams, put on the node by its plan (built on first use)
    _push = plan.unplanned_push

    def record_loop(self) -> Callable[[Iterator[Any]], list[Awaitable[object]] | None]:
        """``run(records)``: pass untracked records from an iterator to every downstream.

        ``run`` takes records from the iterator until it is exhausted (then
        returns None) or a record's processing handed back awaitables
        (asynchronous work still running below): it returns them after that
        record, and the caller waits for them and calls ``run`` again with
        the same iterator.  This is how a source emits a chunk of records.
        When every node below this one is synchronous it is the generated
        loop of :func:`rivermark.execution.graphcode.compile_loop` (the
        whole graph written out inside one ``for`` loop); otherwise a loop
        calling :meth:`_emit`.  Take it again after awaiting: a graph change
        retires the generated loop (it then hands every record to
        :meth:`_emit`, which is correct but slower).
        """
        return plan.plan_of(self).record_loop(self)

    def emit(self, x: Any, asynchronous: bool = False, metadata: Metadata | None = None) -> Any:
        """Push ``x`` into the stream.

        In a purely synchronous graph this runs every downstream function in the
        calling thread and returns ``None``.  When the graph has asynchronous
        nodes, the emit runs on the graph's event loop; with
        ``asynchronous=True`` an awaitable is returned that finishes when all
        downstream work (the slowest branch) has finished.  A node created
        with ``asynchronous=True`` always returns such an awaitable (as in
        streamz: ``await source.emit(x)``).
        """
        return emitting.emit(self, x, asynchronous, metadata)

    # ------------------------------------------------------------------ errors
    #: the error that failed this node for good (see :meth:`_fail`); a Job stops on it
    failure: BaseException | None = None
    #: log such a failure at ERROR with its traceback; a Job sets this to False
    #: because it reports the failure itself, once, naming the node
    log_failures: bool = True

    def _fail(self, exc: BaseException) -> None:
        """Fail the node for good after an error in background work.

        Used where no caller can catch the error (a delayed, buffered or
        timed emit, an asynchronous call finishing later): the record being
        passed on stays incomplete (its references are not released, so a
        source never commits past it, and it stays in flight, so no
        checkpoint is taken past it), a running Job stops with the error,
        and the node refuses further records (:meth:`_raise_if_failed`).
        """
        if self.failure is not None:
            return
        self.failure = exc
        logger.log(
            logging.ERROR if self.log_failures else logging.DEBUG,
            "%s failed: %s: %s -- the record it was passing on is not completed (a source "
            "never commits past it) and a running Job stops; fix the cause, or give the node "
            "that raised on_error='skip' or a callable, then run again",
            self.display_name(),
            type(exc).__name__,
            str(exc).rstrip("."),
            exc_info=exc,
        )

    def _raise_if_failed(self) -> None:
        """Refuse a record after :meth:`_fail` (raises :class:`NodeFailedError`)."""
        if self.failure is not None:
            raise self._failed_error()

    def _failed_error(self) -> NodeFailedError:
        """The :class:`NodeFailedError` for a record refused after :meth:`_fail`."""
        exc = self.failure
        err = NodeFailedError(
            f"{self.display_name()} failed earlier ({type(exc).__name__}: {exc}) and takes "
            "no more records; fix the cause and run again (a checkpointed job resumes "
            "from its last checkpoint)"
        )
        err.__cause__ = exc
        return err

    def _user_error(self, x: Any, exc: BaseException, func: Any = None) -> None:
        """Apply the node's error policy to ``exc`` raised by ``func`` on record ``x``.

        Returns normally when the record is to be dropped (it then counts as
        completed); otherwise raises ``exc`` itself, with its own type (as
        streamz does), after attaching the node, the function and the record
        (:func:`~rivermark.errors.add_context`: ``exc.rivermark_context`` and
        a PEP 678 note).
        """
        if isinstance(exc, StateStoreError):
            raise exc  # the state store failed, not the record: no policy drops it
        self.error_count += 1
        self.last_error = (x, exc)
        policy = self.on_error
        if policy is None or policy == "raise":
            fname = function_name(func)
            context = ErrorContext(
                self.display_name(), str(fname), x, describe_origin() or None, stream=self
            )
            add_context(exc, context)
            raise exc
        if policy == "skip":
            self.errors_skipped += 1
            logger.debug("%s: skipped record after %r", self.display_name(), exc)
            return
        assert callable(policy)
        self.errors_handled += 1
        policy(x, exc)

    @property
    def records_out(self) -> int:
        """Records passed on to the downstreams so far, where this node counts them.

        Exact from any thread (see :mod:`rivermark.execution.counting`); 0 for a
        node that does not count (``derived_out``, a leaf, a root outside a
        job): :mod:`rivermark.observe.metrics` derives those.
        """
        return counting.passed(self.out_counter)

    def derive_records_out(self, records_in: list[int]) -> int:
        """Records passed on, for a node with ``derived_out`` (read by the metrics).

        ``records_in`` holds what each upstream passed on, in upstream order.
        The default is one record out per record in, less those whose user
        function failed.
        """
        return max(sum(records_in) - self.error_count, 0)

    def records_held(self) -> int | None:
        """Records this node holds (its backlog); None for a node that holds none.

        Asynchronous nodes report the records in flight, windowed nodes the
        records buffered in open windows.  Read by the metrics from any
        thread, so it only reads plain attributes.
        """
        return None

    def join_figures(self) -> JoinFigures | None:
        """The running figures of a join or a table (:mod:`rivermark.core.figures`);
        None for every other node.

        Read by the metrics from any thread, so it only reads plain attributes.
        """
        return None

    def emits_later(self) -> bool:
        """Whether this node holds records it will pass on by itself, without more input.

        True for a record waiting for a timer (``delay``, an open
        ``timed_window``, a ``partition`` with a timeout) or for a worker
        (``buffer``, ``latest``).  A job whose sources are exhausted waits
        until no node does (and no work is in flight) before its final
        checkpoint, so these records reach the output instead of that
        checkpoint.  Records that only more input releases (a partial
        ``partition``, a ``zip`` waiting for its other side) do not count.
        """
        return False

    # ------------------------------------------------------------------ state (checkpoints)
    def get_state(self) -> Any:
        """The node's checkpointed state (``None`` for a stateless node).

        The default collects :attr:`_state_attrs`.  The returned value must not
        share mutable objects that the node changes later; the checkpoint
        serialises it at once, during the barrier, so returning live
        containers is fine.
        """
        if not self._state_attrs:
            return None
        return {a: getattr(self, a) for a in self._state_attrs}

    def set_state(self, state: Any) -> None:
        """Restore what :meth:`get_state` returned (in a fresh process)."""
        if not self._state_attrs:
            return
        for a in self._state_attrs:
            setattr(self, a, state[a])

    @property
    def is_stateful(self) -> bool:
        """Whether this node takes part in checkpoints with state of its own."""
        return bool(self._state_attrs) or type(self).get_state is not Stream.get_state

    def state_signature(self) -> str:
        """A short description of the node's configuration, compared on restore."""
        return type(self).__name__

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start every source upstream of this node."""
        for up in self.upstreams:
            up.start()

    def stop(self) -> None:
        """Stop every source upstream of this node."""
        for up in self.upstreams:
            up.stop()

    # ------------------------------------------------------------------ helpers for subclasses
    def _retain_refs(self, metadata: Metadata | None, n: int = 1) -> None:
        retain_refs(metadata, n)

    def _release_refs(self, metadata: Metadata | None, n: int = 1) -> None:
        release_refs(metadata, n)

    def _emit_and_release(
        self, x: Any, metadata: Metadata | None, release: Metadata | None
    ) -> list[Awaitable[object]] | None:
        """Pass on ``x``, made of held records, and release ``release`` once it is done.

        For what a node builds from records it held (a window, a group, a
        tuple): ``metadata`` travels with ``x``, and the references in
        ``release`` (those of the records leaving the node with it) are
        released when the downstream work has finished, or at once if
        passing it on raised.
        """
        try:
            results = self._emit(x, metadata)
        except BaseException:
            release_refs(release)
            raise
        return self._release_after(results, release)

    def _release_after(
        self, results: list[Awaitable[object]] | None, metadata: Metadata | None
    ) -> list[Awaitable[object]] | None:
        """Release ``metadata`` now, or once the downstream awaitables finish."""
        if not metadata:
            return results
        if not results:
            release_refs(metadata)
            return None

        async def wait_then_release() -> None:
            try:
                await runtime.gather_results(results)
            finally:
                release_refs(metadata)

        return [asyncio.ensure_future(wait_then_release())]


def is_coroutine_function(func: Any) -> bool:
    """True for ``async def`` functions and Tornado ``@gen.coroutine`` functions."""
    # optional: set only by tornado.gen.coroutine
    return inspect.iscoroutinefunction(func) or bool(getattr(func, "__tornado_coroutine__", False))


def _wrap_user_update(update: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(update)
    def update_results(self: Stream, *args: Any, **kwargs: Any) -> Any:
        result = update(self, *args, **kwargs)
        if result is None or type(result) is list:
            return result
        return self._user_results(result)

    return update_results


def _emit_list(self: Stream, x: Any, metadata: Metadata | None = None) -> list[Awaitable[object]]:
    """``_emit`` of node classes written for streamz: a list, never ``None``."""
    return Stream._emit(self, x, metadata) or []


async def _awaited(awaitable: Awaitable[object]) -> Any:
    return await awaitable


setattr(Stream, "emit", plan.EmitMethod(Stream.emit))  # noqa: B010 - keeps mypy's view of a method
