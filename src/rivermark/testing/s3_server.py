"""A real S3 API server on loopback for the object-store tests (moto in server mode).

:func:`start_s3_server` runs ``python -m rivermark.testing.s3_server`` in a
subprocess: moto's S3 server on ``127.0.0.1`` and a free port, printed on
its first line of output.  The server exits when its standard input closes,
so it never outlives the test session that started it, and
:meth:`S3Server.kill` makes it unreachable at once (connections refused), as
a crashed or partitioned store would be.

Clients find it through the standard AWS variables of :meth:`S3Server.env`
(``AWS_ENDPOINT_URL`` and dummy credentials), which botocore, and therefore
s3fs and :class:`rivermark.checkpoint.stores.objectstore.ObjectStore`, read.

Needs ``moto[server]`` (the ``test`` extra).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["S3Server", "start_s3_server", "TcpProxy"]

_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "rivermark-test",
    "AWS_SECRET_ACCESS_KEY": "rivermark-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class S3Server:
    """A running moto S3 server (see the module docs)."""

    endpoint: str
    proc: subprocess.Popen[bytes] = field(repr=False)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default ``os.environ``) plus the variables that point clients here."""
        out = dict(os.environ if base is None else base)
        out.update(_CREDENTIALS)
        out["AWS_ENDPOINT_URL"] = self.endpoint
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            out.pop(k, None)
        return out

    def storage_options(self) -> dict[str, object]:
        """fsspec/s3fs options for this server (for clients in this process)."""
        return {
            "endpoint_url": self.endpoint,
            "key": _CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": _CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        }

    def filesystem(self) -> Any:
        import fsspec

        return fsspec.filesystem("s3", skip_instance_cache=True, **self.storage_options())

    def new_bucket(self, prefix: str = "rivermark") -> str:
        """Create a bucket with a unique name and return the name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.filesystem().mkdir(name)
        return name

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Stop the server at once (SIGKILL): later requests are refused."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def start_s3_server() -> S3Server:
    """Start moto's S3 server on loopback; returns once it accepts requests."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rivermark.testing.s3_server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.isdigit():
        proc.kill()
        proc.wait()
        raise RuntimeError(f"start_s3_server: the moto server did not start (said {line!r})")
    server = S3Server(f"http://127.0.0.1:{line}", proc)
    logger.info("S3 server (moto) at %s, pid %d", server.endpoint, proc.pid)
    return server


class TcpProxy:
    """Forward a loopback port (``port``, default a free one) to ``target`` (``host:port``).

    Put it between a job and the S3 server to make the store unreachable
    while the server keeps its data: :meth:`close` refuses new connections
    and cuts the open ones (as when the server is killed); :meth:`hang`
    keeps them open but forwards nothing more (a server that stops
    answering, a network partition).  A new proxy on the same port brings
    the store back at the same address:

    >>> with socket.create_server(("127.0.0.1", 0)) as upstream:
    ...     proxy = TcpProxy(f"127.0.0.1:{upstream.getsockname()[1]}")
    ...     proxy.close()
    ...     socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    Traceback (most recent call last):
    ...
    ConnectionRefusedError: [Errno 111] Connection refused
    """

    def __init__(self, target: str, port: int = 0) -> None:
        host, _, target_port = target.rpartition(":")
        self._target = (host, int(target_port))
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._hung = threading.Event()
        self._deaf = threading.Event()  # requests still reach the server, answers are dropped
        threading.Thread(target=self._accept, name="rivermark-tcp-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self._hung.is_set():  # accepted, never answered
                with self._lock:
                    if self._closed:
                        client.close()
                        return
                    self._sockets.append(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            for a, b, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(a, b, answers), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if not self._hung.is_set() and not (answers and self._deaf.is_set()):
                    dst.sendall(data)  # else dropped
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def hang(self, requests_too: bool = True) -> None:
        """Forward no answers: connections stay open (new ones are accepted) and get none.

        With ``requests_too=False`` the requests still reach the server, which
        acts on them: the client cannot know whether a write happened.
        """
        if requests_too:
            self._hung.set()
        self._deaf.set()

    def close(self) -> None:
        """Refuse new connections and cut the open ones (idempotent)."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def _serve() -> None:  # pragma: no cover - runs in the server subprocess
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    print(server.get_host_and_port()[1], flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or dies)
    os._exit(0)


if __name__ == "__main__":  # pragma: no cover
    _serve()
