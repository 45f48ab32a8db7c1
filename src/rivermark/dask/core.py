"""Scattered streams: records as Dask futures, work submitted to a cluster.

``Stream.scatter()`` turns a local stream into a :class:`DaskStream`, whose
records are :class:`distributed.Future` objects.  On a ``DaskStream``,
``map``, ``starmap`` and ``accumulate`` submit the user function to the
cluster (``client.submit``) and pass the resulting futures on without
waiting; the structural operators (``buffer``, ``zip``, ``combine_latest``,
``union``, ``partition``, ``sliding_window``, ``timed_window``, ``delay``,
``latest``, ``rate_limit``) are the local operators applied to futures.
``gather()`` brings the results back as local values, in order, with up to
``max_inflight`` futures outstanding at once (that is where the parallelism
comes from; a full window pushes back on the source).

Guarantees:

* *Completion.*  ``gather`` holds a record's references from the moment the
  future arrives until its value has been emitted downstream and the
  downstream work has finished; it counts outstanding futures in
  ``_inflight`` so a checkpoint barrier waits for them.
* *State on the cluster.*  The scattered ``accumulate`` keeps its state as a
  future; ``get_state()`` fetches the value (and restarts the task lineage
  from it), ``set_state()`` puts a value back.  Scattered windows and joins
  fetch the futures they hold in the same way.
* *Worker failures.*  ``scatter`` sends each record inside its task (not with
  ``client.scatter``), so every future can be recomputed from its lineage:
  when a worker process dies, Dask reruns the lost tasks and the output is the
  same.
* *Scheduler loss.*  A lost scheduler connection fails the ``gather`` node with
  :class:`~rivermark.dask.errors.DaskConnectionError` (its ``failure``);
  nothing in flight is marked complete.  A running :class:`~rivermark.Job`
  stops at once with a ``JobFailedError`` that names the node and the lost
  scheduler, even in the middle of a checkpoint barrier; its last checkpoint
  stays the one to resume from.

The client is the ``client=`` given to ``scatter`` or else
``distributed.default_client()``.  It must be a synchronous client (the
default ``Client(...)``) or an asynchronous one running on the graph's loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

try:
    import distributed
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rivermark.dask needs dask.distributed: pip install 'rivermark[dask]'"
    ) from _e

from ..core import delivery, runtime
from ..core.node import Stream, check_callable, check_positive_int
from ..core.refs import Metadata
from ..errors import ConfigurationError
from .errors import DaskConnectionError, DaskError, DaskWorkerLostError

logger = logging.getLogger(__name__)

__all__ = [
    "DaskStream",
    "DaskScatter",
    "DaskGather",
    "DaskMap",
    "DaskStarmap",
    "DaskAccumulate",
    "Remote",
    "scatter",
    "SCATTERED_OPERATORS",
]

_NO_DEFAULT: Any = object()


# ---------------------------------------------------------------------- worker-side helpers
def _value(x: Any) -> Any:
    """Identity run on a worker: makes a recomputable future out of a record."""
    return x


def _apply(func: Callable[..., Any], x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return func(x, *args, **kwargs)


def _apply_star(
    func: Callable[..., Any], x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    return func(*x, *args, **kwargs)


@dataclass(frozen=True)
class _Step:
    """What one scattered accumulate step produced (lives on the cluster)."""

    state: Any
    result: Any
    error: BaseException | None


def _accumulate_step(
    func: Callable[..., Any],
    previous: Any,
    x: Any,
    returns_state: bool,
    kwargs: dict[str, Any],
) -> _Step:
    # ``previous`` is the step before (so a record costs one scheduler hop on
    # the chain, not two) or, for the first step, the initial state itself.
    # A failing step keeps the previous state (as the local accumulate does
    # when the error policy drops the record); the error resurfaces in
    # ``_step_result`` so ``gather`` applies the node's policy to it.
    state = previous.state if type(previous) in _STEP_TYPES else previous
    try:
        out = func(state, x, **kwargs)
        if returns_state:
            new_state, result = out
        else:
            new_state = result = out
    except Exception as e:
        return _Step(state, None, e)
    return _Step(new_state, result, None)


@dataclass(frozen=True)
class _StepBatch:
    """What one batched accumulate task produced: the last state, a result or error per record."""

    state: Any
    results: list[Any]
    errors: list[BaseException | None]


def _accumulate_batch(
    func: Callable[..., Any],
    previous: Any,
    xs: list[Any],
    returns_state: bool,
    with_state: bool,
    kwargs: dict[str, Any],
) -> _StepBatch:
    # The records of one batch folded in order, exactly as one _accumulate_step
    # each would fold them (a failing record keeps the state before it).
    state = previous.state if type(previous) in _STEP_TYPES else previous
    results: list[Any] = []
    errors: list[BaseException | None] = []
    for x in xs:
        step = _accumulate_step(func, state, x, returns_state, kwargs)
        state = step.state
        results.append((state, step.result) if with_state else step.result)
        errors.append(step.error)
    return _StepBatch(state, results, errors)


_STEP_TYPES: tuple[type, ...] = (_Step, _StepBatch)


def _step_state(step: _Step) -> Any:
    return step.state


def _step_result(step: _Step) -> Any:
    if step.error is not None:
        raise step.error
    return step.result


# ---------------------------------------------------------------------- futures in state
@dataclass(frozen=True)
class Remote:
    """A value that was a Dask future when the checkpoint was taken.

    Scattered nodes store ``Remote(value)`` in their checkpointed state in
    place of each future, and turn it back into a future on restore.

    >>> Remote(3)
    Remote(value=3)
    """

    value: Any


def _futures_in(obj: Any, out: list[Any]) -> list[Any]:
    if isinstance(obj, distributed.Future):
        out.append(obj)
    elif isinstance(obj, (list, tuple, set, frozenset, deque)):
        for v in obj:
            _futures_in(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _futures_in(v, out)
    return out


def _rebuild(obj: Any, leaf: Callable[[Any], Any], kind: type) -> Any:
    """Copy ``obj`` with every instance of ``kind`` replaced by ``leaf(instance)``."""
    if isinstance(obj, kind):
        return leaf(obj)
    if isinstance(obj, deque):
        return deque((_rebuild(v, leaf, kind) for v in obj), maxlen=obj.maxlen)
    if isinstance(obj, list):
        return [_rebuild(v, leaf, kind) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_rebuild(v, leaf, kind) for v in obj)
    if isinstance(obj, dict):
        return {k: _rebuild(v, leaf, kind) for k, v in obj.items()}
    return obj


# ---------------------------------------------------------------------- client
def _find_client(node: Stream) -> Any:
    """The client given to an upstream ``scatter(client=...)``, else the default one."""
    # getattr, not the instance __dict__: touching that slows every later
    # attribute access on the node (CPython 3.11)
    cached = getattr(node, "dask_client", None)
    if cached is not None:
        return cached
    seen: set[int] = set()
    todo = list(node.upstreams)
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        c = getattr(n, "dask_client", None)
        if c is not None:
            node.dask_client = c  # type: ignore[attr-defined]
            return c
        todo.extend(n.upstreams)
    try:
        return distributed.default_client()
    except ValueError:
        raise ConfigurationError(
            f"{node.display_name()}: no Dask client found; start one first "
            f"(client = distributed.Client(cluster)) or pass scatter(client=client)"
        ) from None


def _check_client(node: Stream, client: Any) -> None:
    status = getattr(client, "status", "running")
    if status in ("closing", "closed", "failed"):
        raise DaskConnectionError(
            f"{node.display_name()}: the Dask client is {status!r} (the connection to the "
            f"scheduler at {_address(client)!r} was lost or closed); the job stops here and "
            f"resumes from its last checkpoint once a client is connected again"
        )


def _address(client: Any) -> str:
    try:
        return str(client.scheduler.address)
    except Exception:
        return "<unknown>"


def _fetch_sync(node: Stream, obj: Any) -> Any:
    """Gather the futures in ``obj`` from a thread that is not the client's loop."""
    futures = _futures_in(obj, [])
    if not futures:
        return obj
    client = futures[0].client
    _check_client(node, client)
    if client.loop.asyncio_loop is runtime.current_loop():
        raise DaskError(
            f"{node.display_name()}: cannot fetch state synchronously from an asynchronous "
            f"Dask client running on the graph's own loop; use a synchronous "
            f"distributed.Client(...) for checkpointed jobs"
        )
    values = client.gather(futures)
    by_key = {f.key: v for f, v in zip(futures, values)}
    return _rebuild(obj, lambda f: Remote(by_key[f.key]), distributed.Future)


async def _guarded(coro: Awaitable[Any]) -> tuple[bool, Any]:
    try:
        return True, await coro
    except BaseException as e:  # noqa: BLE001 - reported to the gather node
        return False, e


def _label(func: Any) -> str:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return str(name or type(func).__name__).replace("<", "").replace(">", "").strip("_") or "task"


def _start_fetch(client: Any, x: Any) -> asyncio.Future[tuple[bool, Any]]:
    """Start gathering ``x`` on the client's loop; a future on the running loop."""
    loop = asyncio.get_running_loop()
    coro = _guarded(client.gather(x, asynchronous=True))
    client_loop = client.loop.asyncio_loop
    if client_loop is loop:
        return asyncio.ensure_future(coro)
    return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, client_loop), loop=loop)


# ---------------------------------------------------------------------- nodes
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

    @property
    def client(self) -> Any:
        """The Dask client this node submits to."""
        return _find_client(self)

    def _submit(self, func: Callable[..., Any], *args: Any, label: Any = None) -> Any:
        client = self.client
        _check_client(self, client)
        # keys name the user's function, so errors and the dashboard say what ran
        key = f"{_label(label if label is not None else func)}-{uuid.uuid4().hex}"
        return client.submit(func, *args, key=key, pure=False)


@Stream.register_api(attribute_name="scatter")
@DaskStream.register_api(attribute_name="scatter")
class DaskScatter(DaskStream):
    """Send each record to the cluster; emit a Dask future of it.

    The record travels inside a task, so its future can be recomputed if the
    worker that holds it dies.  ``client=`` picks the client for this and
    every scattered node downstream (default: ``distributed.default_client()``).

    >>> s = Stream()
    >>> type(s.scatter()).__name__
    'DaskScatter'
    """

    def __init__(self, upstream: Stream, client: Any = None, **kwargs: Any) -> None:
        if client is not None and not hasattr(client, "submit"):
            raise ConfigurationError(
                f"scatter: client must be a distributed.Client, got {client!r}; "
                f"pass client=distributed.Client(...) or leave it out to use the default client"
            )
        if client is not None:
            #: the client given to scatter(client=...), found by the nodes below
            self.dask_client = client
        DaskStream.__init__(self, upstream, **kwargs)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        ds = self.downstreams
        if ds and all(type(d) in _INLINE_CONSUMERS for d in ds):
            # Every consumer submits a task of its own: let the record travel
            # inside that task instead of in one more (half the scheduler work).
            return self._emit(_Inline(x), metadata)
        return self._emit(self._submit(_value, x), metadata)


class _Inline:
    """A record on its way from ``scatter`` into the task of the node right after it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _arg(x: Any) -> Any:
    return x.value if type(x) is _Inline else x


def scatter(upstream: Stream, **kwargs: Any) -> DaskScatter:
    """``upstream.scatter(**kwargs)``: the entry point used by ``Stream.scatter``.

    >>> s = Stream()
    >>> isinstance(scatter(s), DaskStream)
    True
    """
    return DaskScatter(upstream, **kwargs)


@DaskStream.register_api(attribute_name="map")
class DaskMap(DaskStream):
    """Submit ``func(x, *args, **kwargs)`` for every future; emit the result's future.

    >>> s = Stream()
    >>> type(s.scatter().map(abs)).__name__
    'DaskMap'
    """

    _worker_call: ClassVar[Callable[..., Any]] = staticmethod(_apply)

    def __init__(
        self, upstream: Stream, func: Callable[..., Any], *args: Any, **kwargs: Any
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
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
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

    _worker_call: ClassVar[Callable[..., Any]] = staticmethod(_apply_star)


@DaskStream.register_api(attribute_name="scan")
@DaskStream.register_api(attribute_name="accumulate")
class DaskAccumulate(DaskStream):
    """A running ``state = func(state, x)`` computed on the cluster.

    Parameters are those of the local ``accumulate``: ``start`` (the first
    record is the initial state when omitted, and is emitted as it is),
    ``returns_state`` (``func`` returns ``(state, result)``), ``with_state``
    (emit ``(state, result)``).  The state is a future; ``get_state()``
    fetches its value for a checkpoint and restarts the chain of tasks from
    that value, so the scheduler can forget the steps before it (without
    checkpoints the lineage, which makes worker failures recoverable, grows
    by two small tasks per record).  A step whose ``func`` raises keeps the
    previous state; ``gather`` applies the error policy to its result.

    When every consumer is a ``gather``, the records that arrive in one turn
    of the graph's loop (at most half of ``gather``'s window) are folded in
    one task, in order, with a result or an error per record: a running
    state then costs one scheduler hop per batch instead of two tasks per
    record.

    ``scan`` is the same node (streamz's other name for it).

    >>> s = Stream()
    >>> acc = s.scatter().accumulate(lambda a, b: a + b, start=0)
    >>> acc.get_state()
    {'state': 0}
    >>> type(s.scatter().scan(lambda a, b: a + b)).__name__
    'DaskAccumulate'
    """

    def __init__(
        self,
        upstream: Stream,
        func: Callable[..., Any],
        start: Any = _NO_DEFAULT,
        returns_state: bool = False,
        with_state: bool = False,
        stream_name: str | None = None,
        name: str | None = None,
        on_error: Any = None,
        **kwargs: Any,
    ) -> None:
        check_callable("accumulate", "func", func)
        self.func = func
        self.state: Any = start
        self.returns_state = returns_state
        self.with_state = with_state
        self.kwargs = kwargs
        self._open: _OpenBatch | None = None
        DaskStream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        if self.state is _NO_DEFAULT:
            if type(x) is _Inline:
                x = self._submit(_value, x.value)
            self.state = x
            out = (x, x) if self.with_state else x
            return self._emit(out, metadata)
        if self._batched():
            return self._emit(self._add_to_batch(_arg(x)), metadata)
        step = self._submit(
            _accumulate_step,
            self.func,
            self.state,
            _arg(x),
            self.returns_state,
            self.kwargs,
            label=self.func,
        )
        self.state = step
        result = self._submit(_step_result, step, label=self.func)
        if self.with_state:
            state = self._submit(_step_state, step, label="accumulate-state")
            return self._emit((state, result), metadata)
        return self._emit(result, metadata)

    def _batched(self) -> bool:
        """Fold records in batches: every consumer is a ``gather`` (it reads a _Part)."""
        ds = self.downstreams
        return bool(ds) and all(type(d) is DaskGather for d in ds)

    def _add_to_batch(self, x: Any) -> _Part:
        batch = self._open
        if batch is None:
            batch = self._open = _OpenBatch(self)
            loop = runtime.current_loop()
            if loop is not None:
                # the records that arrive before the loop turns share one task
                loop.call_soon(self._submit_batch)
        batch.records.append(x)
        part = _Part(batch, len(batch.records) - 1)
        if runtime.current_loop() is None or len(batch.records) >= self._batch_cap():
            # called from plain code (nothing to wait for), or half a window
            # is in this batch: submit it so that two batches overlap
            self._submit_batch()
        return part

    def _batch_cap(self) -> int:
        return max(1, int(min(d.max_inflight for d in self.downstreams)) // 2)  # type: ignore[attr-defined]

    def _submit_batch(self) -> None:
        batch, self._open = self._open, None
        if batch is None:
            return
        try:
            step = self._submit(
                _accumulate_batch,
                self.func,
                self.state,
                batch.records,
                self.returns_state,
                self.with_state,
                self.kwargs,
                label=self.func,
            )
        except BaseException as e:  # noqa: BLE001 - reported by gather for each record
            batch.set_failed(e)
            return
        self.state = step
        batch.set_future(step)

    def get_state(self) -> Any:
        if self.state is _NO_DEFAULT:
            return {"state": None, "started": False}
        self._submit_batch()
        value = _fetch_sync(self, self.state)
        if isinstance(value, Remote):
            value = value.value
            if type(value) in _STEP_TYPES:
                value = value.state
            # Cut the task lineage: later steps depend on this fresh future,
            # so the scheduler can forget the steps before the checkpoint.
            self.state = self._submit(_value, value)
        return {"state": value}

    def set_state(self, state: Any) -> None:
        if state.get("started", True):
            # a plain value is a valid argument to client.submit
            self.state = state["state"]
        else:
            self.state = _NO_DEFAULT

    def state_signature(self) -> str:
        return (
            f"DaskAccumulate(func={getattr(self.func, '__qualname__', repr(self.func))}, "
            f"returns_state={self.returns_state}, with_state={self.with_state})"
        )


class _OpenBatch:
    """Records given to a scattered accumulate in one turn of the loop; one task folds them.

    ``future`` is that task's Dask future once submitted (at the end of the
    turn); ``fetch()`` gathers it once for all the records' ``_Part`` handles.
    """

    __slots__ = ("node", "records", "future", "error", "_waiters", "_fetch")

    def __init__(self, node: DaskAccumulate) -> None:
        self.node = node
        self.records: list[Any] = []
        self.future: Any = None
        self.error: BaseException | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._fetch: asyncio.Future[tuple[bool, Any]] | None = None

    def set_future(self, future: Any) -> None:
        self.future = future
        self._wake()

    def set_failed(self, error: BaseException) -> None:
        self.error = error
        self._wake()

    def _wake(self) -> None:
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()

    async def fetch(self) -> tuple[bool, Any]:
        if self.future is None and self.error is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        if self.error is not None:
            return False, self.error
        if self._fetch is None:
            self._fetch = _start_fetch(self.future.client, self.future)
        return await asyncio.shield(self._fetch)


class _Part:
    """Record ``index`` of an accumulate batch, as a scattered record on its way to ``gather``."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: _OpenBatch, index: int) -> None:
        self.batch = batch
        self.index = index

    def __repr__(self) -> str:
        return f"{self.batch.records[self.index]!r} (record {self.index} of an accumulate batch)"

    async def value(self) -> tuple[bool, Any]:
        ok, out = await self.batch.fetch()
        if not ok:
            return False, out
        error = out.errors[self.index]
        if error is not None:
            return False, _PartError(error)
        return True, out.results[self.index]


class _PartError(Exception):
    """The user function raised on one record of a batch (the batch task itself succeeded)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


#: node types that take a record from ``scatter`` as a plain value inside their own task
_INLINE_CONSUMERS: frozenset[type] = frozenset({DaskMap, DaskStarmap, DaskAccumulate})


@dataclass
class _Pending:
    record: Any
    metadata: Metadata | None
    fetch: asyncio.Future[tuple[bool, Any]]


@DaskStream.register_api(attribute_name="gather")
class DaskGather(Stream):
    """Wait for the futures of a scattered stream and emit their values, in order.

    Up to ``max_inflight`` futures are outstanding at once; while the window
    is full, ``update`` returns an awaitable, so the source waits
    (backpressure).  Values are emitted in arrival order of the futures.
    A record is complete once its value has been emitted and the downstream
    work has finished.  ``await node.wait_drained()`` (or ``node.flush()``
    from another thread) waits until nothing is in flight and raises the
    node's failure, if any.

    A synchronous ``source.emit(x)`` (and an awaited
    ``source.emit(x, asynchronous=True)``) returns once the values of the
    futures it produced have been emitted here, as in streamz (the node is a
    :class:`~rivermark.core.delivery.DeferredDelivery`); sources keep up to
    ``max_inflight`` futures outstanding.

    >>> s = Stream()
    >>> g = s.scatter().gather(max_inflight=4)
    >>> g.max_inflight, g._inflight
    (4, 0)
    """

    _is_async = True
    _graphviz_fillcolor: ClassVar[str] = "lightblue"
    str_list: ClassVar[list[str]] = ["max_inflight"]

    def __init__(
        self,
        upstream: Stream,
        max_inflight: int = 32,
        stream_name: str | None = None,
        name: str | None = None,
        on_error: Any = None,
    ) -> None:
        check_positive_int("gather", "max_inflight", max_inflight)
        self.max_inflight = max_inflight
        self._inflight = 0
        #: records accepted by ``update`` and passed on (or dropped) so far
        self._accepted = 0
        self._delivered = 0
        self._pending: deque[_Pending] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._progress = delivery.ProgressSignal()
        self.failure: BaseException | None = None
        Stream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    # ------------------------------------------------------------ data flow
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        if self.failure is not None:
            raise self.failure
        if runtime.current_loop() is None:
            # called outside any loop (a direct update() call): hop onto ours
            runtime.run_sync(self.loop, self._update_and_wait(x, metadata))
            return None
        part = type(x) is _Part
        futures = [] if part else _futures_in(x, [])
        if futures:
            # the futures know their client; a record without any passes through in order
            _check_client(self, futures[0].client)
        elif part:
            _check_client(self, x.batch.node.client)
        self._retain_refs(metadata)
        self._inflight += 1
        self._accepted += 1
        fetch: asyncio.Future[tuple[bool, Any]]
        try:
            if part:
                fetch = asyncio.ensure_future(x.value())
            elif futures:
                fetch = _start_fetch(futures[0].client, x)
            else:
                fetch = asyncio.get_running_loop().create_future()
                fetch.set_result((True, x))
        except Exception as e:
            fetch = asyncio.get_running_loop().create_future()
            fetch.set_result((False, e))
        self._pending.append(_Pending(x, metadata, fetch))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        if len(self._pending) >= self.max_inflight:
            return [self._wait_room()]
        return None

    async def _update_and_wait(self, x: Any, metadata: Metadata | None) -> None:
        await runtime.gather_results(self.update(x, None, metadata))

    def _notify(self) -> None:
        self._progress.notify()

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        await self._progress.wait_until(done, lambda: self.failure)

    async def _wait_room(self) -> None:
        await self._wait_for(lambda: len(self._pending) < self.max_inflight)

    def accepted_count(self) -> int:
        """Records accepted so far (:class:`~rivermark.core.delivery.DeferredDelivery`)."""
        return self._accepted

    async def wait_delivered(self, count: int) -> None:
        """Wait until the first ``count`` accepted records were emitted (or dropped)."""
        await self._wait_for(lambda: self._delivered >= count)

    async def wait_drained(self) -> None:
        """Wait until nothing is in flight here or in the asynchronous nodes upstream.

        Upstream nodes (``buffer``, ``delay``, ...) count their held records in
        ``_inflight``; they are polled, this node is awaited.
        """
        while True:
            busy = [n for n in self._upstream_nodes() if getattr(n, "_inflight", 0)]
            if not busy:
                await self._wait_for(lambda: self._inflight == 0)
                if not any(getattr(n, "_inflight", 0) for n in self._upstream_nodes()):
                    return
            else:
                if self.failure is not None:
                    raise self.failure
                await asyncio.sleep(0.001)

    def _upstream_nodes(self) -> list[Stream]:
        seen: set[int] = set()
        out: list[Stream] = []
        todo = list(self.upstreams)
        while todo:
            n = todo.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            out.append(n)
            todo.extend(n.upstreams)
        return out

    def flush(self, timeout: float | None = None) -> None:
        """Block (from a thread other than the graph's loop) until drained."""
        runtime.run_sync(self.loop, self.wait_drained(), timeout)

    async def _drain(self) -> None:
        while self._pending and self.failure is None:
            p = self._pending[0]
            try:
                ok, value = await p.fetch
                if ok:
                    results = self._emit(value, p.metadata)
                    if results:
                        await runtime.gather_results(results)
                else:
                    self._fetch_failed(p, value)  # returns only if the record is dropped
            except BaseException as e:  # noqa: BLE001 - the node fails, the job stops
                self.failure = e
                logger.error("%s failed: %s", self.display_name(), e)
                self._notify()
                if not isinstance(e, Exception):
                    raise
                return
            self._pending.popleft()
            self._inflight -= 1
            self._delivered += 1
            self._release_refs(p.metadata)
            self._notify()

    def _fetch_failed(self, p: _Pending, exc: BaseException) -> None:
        if isinstance(exc, _PartError):
            self._user_error(p.record, exc.error, p.record.batch.node.func)
            return
        if type(p.record) is _Part:
            if exc is p.record.batch.error:
                raise exc  # submitting the batch failed (e.g. the client closed): say so as is
            batch_future = p.record.batch.future
            futures = [batch_future] if batch_future is not None else []
        else:
            futures = _futures_in(p.record, [])
        client = futures[0].client if futures else None
        if isinstance(exc, KilledWorker):
            raise DaskWorkerLostError(
                f"{self.display_name()}: Dask gave up on a task after its workers died "
                f"repeatedly ({exc}); check the workers' memory and logs, or raise "
                f"distributed.scheduler.allowed-failures"
            ) from exc
        if isinstance(exc, DaskError):
            # raised by rivermark's own code on a worker (e.g. reading a Kafka
            # range): not the user's function, so no error policy drops it
            raise DaskError(
                f"{self.display_name()}: a task of {p.record!r} failed on a worker: {exc}"
            ) from exc
        erred = [f for f in futures if f.status == "error"]
        if erred and isinstance(exc, Exception):
            self._user_error(p.record, exc, _TaskName(erred[0].key))
            return
        reason = getattr(exc, "reason", None)
        lost = (
            isinstance(exc, OSError)
            or reason == "scheduler-connection-lost"
            or (client is not None and client.status != "running")
        )
        if lost:
            raise DaskConnectionError(
                f"{self.display_name()}: lost the connection to the Dask scheduler at "
                f"{_address(client)!r} while waiting for {p.record!r} "
                f"({type(exc).__name__}: {exc}; reason {reason!r}); the job stops, its last "
                f"checkpoint is intact; restart it once the scheduler is reachable"
            ) from exc
        if isinstance(exc, FutureCancelledError):
            raise DaskError(
                f"{self.display_name()}: the Dask future of {p.record!r} was cancelled "
                f"(reason {reason!r}) while the scheduler at {_address(client)!r} is still "
                f"connected; something cancelled it (client.cancel, client.restart); the job "
                f"stops, its last checkpoint is intact; run it again to resume from there"
            ) from exc
        raise DaskError(
            f"{self.display_name()}: gathering {p.record!r} failed with "
            f"{type(exc).__name__}: {exc}; the job stops, its last checkpoint is intact"
        ) from exc

    def state_signature(self) -> str:
        return f"DaskGather(max_inflight={self.max_inflight})"


class _TaskName:
    """Names a Dask task in error messages (its key) where a function would be named."""

    def __init__(self, key: Any) -> None:
        self.__qualname__ = f"task {key!r}"


# ---------------------------------------------------------------------- structural operators
#: streamz names of the local operators that a scattered stream reuses as they are
SCATTERED_OPERATORS: tuple[str, ...] = (
    "buffer",
    "zip",
    "combine_latest",
    "union",
    "partition",
    "sliding_window",
    "timed_window",
    "delay",
    "latest",
    "rate_limit",
)


class _RemoteState:
    """Mixin for scattered versions of stateful local nodes: futures in state become values."""

    def get_state(self) -> Any:
        state = super().get_state()  # type: ignore[misc]
        return _fetch_sync(self, state)  # type: ignore[arg-type]

    def set_state(self, state: Any) -> None:
        submit = self._submit  # type: ignore[attr-defined]  # from the DaskStream it is mixed into

        def put_back(r: Remote) -> Any:
            return submit(_value, r.value)

        super().set_state(_rebuild(state, put_back, Remote))  # type: ignore[misc]

    def state_signature(self) -> str:
        return "Dask" + str(super().state_signature())  # type: ignore[misc]


def _local_class(streamz_name: str) -> type[Stream] | None:
    attr = Stream.__dict__.get(streamz_name)
    cls = getattr(attr, "__wrapped__", None)
    if isinstance(cls, type) and issubclass(cls, Stream) and not issubclass(cls, DaskStream):
        return cls
    return None


def _camel(streamz_name: str) -> str:
    return "".join(part.capitalize() for part in streamz_name.split("_"))


def _register_scattered() -> dict[str, type]:
    """Build ``DaskBuffer``, ``DaskZip``, ... from the local operators registered now."""
    made: dict[str, type] = {}
    for streamz_name in SCATTERED_OPERATORS:
        base = _local_class(streamz_name)
        if base is None:
            logger.debug(
                "no local %r operator registered; DaskStream.%s not added",
                streamz_name,
                streamz_name,
            )
            continue
        # the operator class's declared state fields (see docs/architecture.md)
        declared = base._state_attrs  # noqa: SLF001
        stateful = bool(declared) or base.get_state is not Stream.get_state
        bases: tuple[type, ...] = (
            (_RemoteState, DaskStream, base) if stateful else (DaskStream, base)
        )
        cls = type(
            "Dask" + _camel(streamz_name),
            bases,
            {
                "__module__": __name__,
                "__doc__": (
                    f"``{streamz_name}`` on a scattered stream: the local "
                    f":class:`{base.__module__}.{base.__name__}` applied to Dask futures."
                ),
            },
        )
        DaskStream.register_api(attribute_name=streamz_name)(cls)
        made[streamz_name] = cls
    return made
