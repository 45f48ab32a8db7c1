"""Network sources on asyncio: ``Stream.from_tcp`` and ``Stream.from_http_server``.

Both listen only while started.  ``stop()`` closes the listening socket and
every open connection, so the port is free again once the source finished.
Neither can replay what was sent before a crash (``replayable = False``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.errors import ConfigurationError
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["FromTcp", "FromHttpServer"]

_STOP_POLL = 0.02
_MAX_HEADER = 64 * 1024


def _check_port(kind: str, port: Any) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(
            f"{kind}: port must be an integer from 0 to 65535, got {port!r}; "
            "pass e.g. port=4567 (0 picks a free port, see .bound_port)"
        )


class _Refused(Exception):
    """A request refused with ``code`` before its body is read."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(code, reason)
        self.code, self.reason = code, reason


def _parse_head(head: bytes) -> tuple[str, str, bool, int]:
    """``(method, target, close, content_length)`` of an HTTP/1 request head.

    >>> _parse_head(b"POST /in HTTP/1.1\\r\\nContent-Length: 3\\r\\n\\r\\n")
    ('POST', '/in', False, 3)
    >>> _parse_head(b"POST /in HTTP/1.1\\r\\n\\r\\n")
    Traceback (most recent call last):
    ...
    rivermark.sources.network._Refused: (411, 'Length Required')
    """
    if len(head) > _MAX_HEADER:
        raise _Refused(431, "Request Header Fields Too Large")
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise _Refused(400, "Bad Request") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
    length_text = headers.get("content-length")
    if length_text is None:
        if "transfer-encoding" in headers or method == "POST":
            raise _Refused(411, "Length Required")
        return method, target, close, 0
    try:
        return method, target, close, int(length_text)
    except ValueError:
        raise _Refused(400, "Bad Request") from None


class _Server(Source[None]):
    """Shared lifecycle: listen while running, track connections, close all on stop."""

    def _init_server(self, port: int, server_kwargs: dict[str, Any] | None) -> None:
        self.port = port
        self.server_kwargs = dict(server_kwargs or {})
        self.server: asyncio.base_events.Server | None = None
        #: the port actually listened on (useful with ``port=0``)
        self.bound_port: int | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._emit_lock: asyncio.Lock | None = None

    async def run(self) -> None:
        self._emit_lock = asyncio.Lock()
        kwargs = dict(self.server_kwargs)
        host = kwargs.pop("host", None)
        self.server = await asyncio.start_server(self._connection, host, self.port, **kwargs)
        sockets = self.server.sockets or ()
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port
        logger.info("%s: listening on port %s", self.display_name(), self.bound_port)
        try:
            while not self.stopped:
                await asyncio.sleep(_STOP_POLL)
            # stopped while a connection was emitting: let that record finish first
            async with self._emit_lock:
                pass
        finally:
            self.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _emit_one(self, x: Any) -> bool:
        """Emit ``x``; concurrent connections take turns. False if the source has stopped."""
        assert self._emit_lock is not None
        async with self._emit_lock:
            if self.stopped:
                return False
            await self._emit_record(x)
            return True

    def close(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.close()
            logger.info("%s: closed port %s", self.display_name(), self.bound_port)
        for w in list(self._writers):
            w.close()
        self._writers.clear()
        current = asyncio.current_task() if _loop_running() else None
        for t in list(self._handlers):
            if t is not current:
                t.cancel()
        self._handlers.clear()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@Stream.register_api(staticmethod, attribute_name="from_tcp")
class FromTcp(_Server):
    """Listen on TCP ``port``; emit the incoming bytes split on ``delimiter``.

    Each record keeps its delimiter at the end (as in streamz); bytes after
    the last delimiter of a closed connection are dropped.  ``server_kwargs``
    go to :func:`asyncio.start_server` (``host=`` among them).

    >>> import socket
    >>> from rivermark.testing import wait_for
    >>> source = Stream.from_tcp(0, server_kwargs={"host": "127.0.0.1"})
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: source.bound_port)
    >>> with socket.create_connection(("127.0.0.1", source.bound_port)) as c:
    ...     c.sendall(b"hello\\nworld\\n")
    >>> wait_for(lambda: len(L) == 2); source.stop(); L
    [b'hello\\n', b'world\\n']
    """

    def __init__(
        self,
        port: int,
        delimiter: bytes = b"\n",
        server_kwargs: dict[str, Any] | None = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        _check_port("from_tcp", port)
        if not isinstance(delimiter, bytes) or not delimiter:
            raise ConfigurationError(
                f"from_tcp: delimiter must be non-empty bytes, got {delimiter!r}; "
                "pass e.g. delimiter=b'\\n'"
            )
        self.delimiter = delimiter
        self._init_server(port, server_kwargs)
        super().__init__(**kwargs)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not self.stopped:
            try:
                data = await reader.readuntil(self.delimiter)
            except asyncio.IncompleteReadError:
                return
            except asyncio.LimitOverrunError as e:
                logger.warning(
                    "%s: record too long, closing connection: %s", self.display_name(), e
                )
                return
            await self._emit_one(data)

    def state_signature(self) -> str:
        return "FromTcp()"


@Stream.register_api(staticmethod, attribute_name="from_http_server")
class FromHttpServer(_Server):
    """Listen for HTTP POSTs on ``port``; emit each request's body (bytes).

    A minimal HTTP/1.1 receiver: requests whose path matches the regular
    expression ``path`` are answered ``200 OK`` once the body has been
    emitted and the downstream work finished; other paths get ``404``,
    other methods ``405``, bodies without ``Content-Length`` ``411``, and a
    request arriving while the source stops ``503``.

    >>> import urllib.request
    >>> from rivermark.testing import wait_for
    >>> source = Stream.from_http_server(0, server_kwargs={"host": "127.0.0.1"})
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: source.bound_port)
    >>> url = f"http://127.0.0.1:{source.bound_port}/data"
    >>> with urllib.request.urlopen(url, data=b"payload") as answer:
    ...     answer.status
    200
    >>> source.stop(); L
    [b'payload']
    """

    def __init__(
        self,
        port: int,
        path: str = "/.*",
        server_kwargs: dict[str, Any] | None = None,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        _check_port("from_http_server", port)
        try:
            self._path_re = re.compile(path)
        except (TypeError, re.error) as e:
            raise ConfigurationError(
                f"from_http_server: path must be a regular expression, got {path!r} ({e}); "
                "pass e.g. path='/.*'"
            ) from None
        self.path = path
        self._init_server(port, server_kwargs)
        super().__init__(**kwargs)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not self.stopped:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            except asyncio.LimitOverrunError:
                await self._reply(writer, 431, "Request Header Fields Too Large", close=True)
                return
            try:
                method, target, close, length = _parse_head(head)
            except _Refused as e:
                await self._reply(writer, e.code, e.reason, close=True)
                return
            body = await reader.readexactly(length) if length else b""
            if method != "POST":
                await self._reply(writer, 405, "Method Not Allowed", close)
            elif not self._path_re.fullmatch(target.split("?", 1)[0]):
                await self._reply(writer, 404, "Not Found", close)
            elif await self._emit_one(body):
                await self._reply(writer, 200, "OK", close)
            else:
                await self._reply(writer, 503, "Service Unavailable", close=True)
                return
            if close:
                return

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, code: int, reason: str, close: bool) -> None:
        body = reason.encode()
        head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        if close:
            head += "Connection: close\r\n"
        writer.write(head.encode("latin-1") + b"\r\n" + body)
        await writer.drain()

    def state_signature(self) -> str:
        return f"FromHttpServer(path={self.path!r})"
