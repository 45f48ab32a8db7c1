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
  ``in_flight`` so a checkpoint barrier waits for them.
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

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

try:
    import distributed
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rivermark.dask needs dask.distributed: pip install 'rivermark[dask]'"
    ) from _e

from rivermark.core import runtime
from rivermark.core.node import Stream, check_callable
from rivermark.core.refs import Metadata
from rivermark.dask.batches import _OpenBatch, _Part
from rivermark.dask.client import _check_client, _futures_in
from rivermark.dask.client import _rebuild as _rebuild
from rivermark.dask.errors import DaskError
from rivermark.dask.gather import DaskGather as DaskGather
from rivermark.dask.stream import DaskMap as DaskMap
from rivermark.dask.stream import DaskStarmap as DaskStarmap
from rivermark.dask.stream import DaskStream as DaskStream
from rivermark.dask.stream import _arg, _Inline
from rivermark.dask.tasks import (
    _STEP_TYPES,
    _accumulate_batch,
    _accumulate_step,
    _Step,
    _step_result,
    _step_state,
    _value,
)
from rivermark.errors import ConfigurationError
from rivermark.statedata import register_state_class

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

_NO_DEFAULT: object = object()


# ---------------------------------------------------------------------- futures in state
# (checkpoints pickle Remote by this module's name: it stays here)
@dataclass(frozen=True)
class Remote:
    """A value that was a Dask future when the checkpoint was taken.

    Scattered nodes store ``Remote(value)`` in their checkpointed state in
    place of each future, and turn it back into a future on restore.

    >>> Remote(3)
    Remote(value=3)
    """

    value: Any


def _fetch_sync(node: Stream, obj: object) -> object:
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


# ---------------------------------------------------------------------- nodes
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

    def __init__(
        self, upstream: Stream, client: distributed.Client | None = None, **kwargs: Any
    ) -> None:
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
        self, x: object, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        ds = self.downstreams
        if ds and all(type(d) in _INLINE_CONSUMERS for d in ds):
            # Every consumer submits a task of its own: let the record travel
            # inside that task instead of in one more (half the scheduler work).
            return self._emit(_Inline(x), metadata)
        return self._emit(self._submit(_value, x), metadata)


def scatter(upstream: Stream, **kwargs: Any) -> DaskScatter:
    """``upstream.scatter(**kwargs)``: the entry point used by ``Stream.scatter``.

    >>> s = Stream()
    >>> isinstance(scatter(s), DaskStream)
    True
    """
    return DaskScatter(upstream, **kwargs)


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
        func: Callable[..., object],
        start: object = _NO_DEFAULT,
        returns_state: bool = False,
        with_state: bool = False,
        stream_name: str | None = None,
        name: str | None = None,
        on_error: Any = None,
        **kwargs: object,
    ) -> None:
        check_callable("accumulate", "func", func)
        self.func = func
        self.state: object = start
        self.returns_state = returns_state
        self.with_state = with_state
        self.kwargs = kwargs
        self._open: _OpenBatch | None = None
        DaskStream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    def update(
        self, x: object, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
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

    def _add_to_batch(self, x: object) -> _Part:
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
        windows = [d.max_inflight for d in self.downstreams if isinstance(d, DaskGather)]
        return max(1, min(windows) // 2)

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

    def get_state(self) -> dict[str, object]:
        if self.state is _NO_DEFAULT:
            return {"state": None, "started": False}
        self._submit_batch()
        value = _fetch_sync(self, self.state)
        if isinstance(value, Remote):
            value = value.value
            if type(value) in _STEP_TYPES:
                value = cast("_Step", value).state
            # Cut the task lineage: later steps depend on this fresh future,
            # so the scheduler can forget the steps before the checkpoint.
            self.state = self._submit(_value, value)
        return {"state": value}

    def set_state(self, state: Mapping[str, object]) -> None:
        if state.get("started", True):
            # a plain value is a valid argument to client.submit
            self.state = state["state"]
        else:
            self.state = _NO_DEFAULT

    def state_signature(self) -> str:
        # optional: a callable object or a functools.partial has no __qualname__
        return (
            f"DaskAccumulate(func={getattr(self.func, '__qualname__', repr(self.func))}, "
            f"returns_state={self.returns_state}, with_state={self.with_state})"
        )


#: node types that take a record from ``scatter`` as a plain value inside their own task
_INLINE_CONSUMERS: frozenset[type] = frozenset({DaskMap, DaskStarmap, DaskAccumulate})


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

    def get_state(self) -> object:
        state = super().get_state()  # type: ignore[misc]
        return _fetch_sync(self, state)  # type: ignore[arg-type]

    def set_state(self, state: object) -> None:
        submit = self._submit  # type: ignore[attr-defined]  # from the DaskStream it is mixed into

        def put_back(r: Remote) -> distributed.Future[object]:
            future: distributed.Future[object] = submit(_value, r.value)
            return future

        super().set_state(_rebuild(state, put_back, Remote))  # type: ignore[misc]

    def state_signature(self) -> str:
        return "Dask" + str(super().state_signature())  # type: ignore[misc]


def _local_class(streamz_name: str) -> type[Stream] | None:
    attr = Stream.__dict__.get(streamz_name)
    # optional: only a wrapped function has __wrapped__
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


# a scattered node's state holds Remote in place of each future: checkpoints write it as data
register_state_class(Remote, ("value",))
