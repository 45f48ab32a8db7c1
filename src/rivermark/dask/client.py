"""The Dask client of a scattered stream: finding it, checking it, and fetching futures' values."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

import distributed

from rivermark.core.node import Stream
from rivermark.dask.errors import DaskConnectionError
from rivermark.errors import ConfigurationError

T = TypeVar("T")


# ---------------------------------------------------------------------- futures in a value
def _futures_in(
    obj: object, out: list[distributed.Future[object]]
) -> list[distributed.Future[object]]:
    if isinstance(obj, distributed.Future):
        out.append(obj)
    elif isinstance(obj, (list, tuple, set, frozenset, deque)):
        for v in obj:
            _futures_in(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _futures_in(v, out)
    return out


def _rebuild(obj: object, leaf: Callable[[T], object], kind: type[T]) -> object:
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
def _default_client(node: Stream) -> distributed.Client:
    """``distributed.default_client()``; one line naming ``node`` when there is none."""
    try:
        client: distributed.Client = distributed.default_client()
        return client
    except ValueError:
        raise ConfigurationError(
            f"{node.display_name()}: no Dask client found; start one first "
            f"(client = distributed.Client(cluster)) or pass scatter(client=client)"
        ) from None


def _check_client(node: Stream, client: distributed.Client) -> None:
    # optional: a user's client-like object may not report a status
    status = getattr(client, "status", "running")
    if status in ("closing", "closed", "failed"):
        raise DaskConnectionError(
            f"{node.display_name()}: the Dask client is {status!r} (the connection to the "
            f"scheduler at {_address(client)!r} was lost or closed); the job stops here and "
            f"resumes from its last checkpoint once a client is connected again"
        )


def _address(client: distributed.Client | None) -> str:
    try:
        return str(client.scheduler.address)  # type: ignore[union-attr]  # else: unknown
    except Exception:
        return "<unknown>"


async def _guarded(coro: Awaitable[object]) -> tuple[bool, object]:
    try:
        return True, await coro
    except BaseException as e:  # noqa: BLE001 - reported to the gather node
        return False, e


def _label(func: object) -> str:
    # optional: a callable object has neither name
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return str(name or type(func).__name__).replace("<", "").replace(">", "").strip("_") or "task"


def _start_fetch(client: distributed.Client, x: object) -> asyncio.Future[tuple[bool, object]]:
    """Start gathering ``x`` on the client's loop; a future on the running loop."""
    loop = asyncio.get_running_loop()
    coro = _guarded(client.gather(x, asynchronous=True))
    client_loop = client.loop.asyncio_loop  # type: ignore[union-attr]  # a running client's
    if client_loop is loop:
        return asyncio.ensure_future(coro)
    return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, client_loop), loop=loop)
