"""Whom a real ``rivermark run --ui`` job answers, and to whom the CLI sends its token.

A page in the operator's browser that rebinds its DNS name to the loopback
reaches the job's server with its own name in ``Host``: every route refuses
it.  After the job ends, its ``job.json`` still names its port: a process
that took the port (an impostor, a redirecting server, another run) never
receives the control token from ``rivermark savepoint DIR`` or ``stop DIR``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rivermark.observe.control import identity_proof
from rivermark.testing import wait_for, wait_value

from .controlapp import write_sum_app

RIVERMARK = str(Path(sys.executable).parent / "rivermark")
TOKEN = "a-control-token-of-test-0123456789"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIVERMARK_CONTROL")}
    env["RIVERMARK_CONTROL_TOKEN"] = TOKEN
    return env


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RIVERMARK, *args], capture_output=True, text=True, timeout=300, env=_env()
    )


def _raw(port: int, request: bytes) -> bytes:
    """Send ``request`` as it is; the whole answer (the server closes after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and b"text/event-stream" in chunks[0]:
                break  # /events streams on: its head is enough
    return b"".join(chunks)


def _status(port: int, method: str, path: str, host: str) -> int:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
    if method == "POST":
        head += f"Authorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n"
    answer = _raw(port, (head + "\r\n").encode())
    return int(answer.split(b" ", 2)[1])


@contextmanager
def _job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    app = write_sum_app(tmp_path)
    ckpt = tmp_path / "ckpt"
    with (tmp_path / "stderr.txt").open("w") as err:
        proc = subprocess.Popen(
            [RIVERMARK, "run", f"{app}:source", "-c", str(ckpt), "--ui", "0", "--every", "1s"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_env(),
        )
    try:
        url = wait_value(
            lambda: (
                json.loads((ckpt / "job.json").read_text()).get("control")
                if (ckpt / "job.json").exists()
                else None
            ),
            timeout=120,
            what="the job's control address in job.json",
        )
        port = urlsplit(url).port
        assert port is not None
        wait_for(lambda: _status(port, "GET", "/readyz", f"127.0.0.1:{port}") == 200, timeout=120)
        yield proc, ckpt, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with ``self.server.answer(handler)``; records what it got."""

    server: Any

    def _any(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        status, headers, body = self.server.answer(self)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _any

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Seen(list[tuple[str, str, dict[str, str]]]):
    """The requests a server got (method, path, headers), and its port."""

    port: int


@contextmanager
def _server(
    port: int, answer: Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]
) -> Iterator[_Seen]:
    """A plain HTTP server on ``127.0.0.1:port`` answering with ``answer``."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Recorder)
    seen = _Seen()
    seen.port = server.server_address[1]
    server.seen = seen  # type: ignore[attr-defined]
    server.answer = answer  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def _json(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


def _one_line(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    for n in needles:
        assert n in res.stderr, (n, res.stderr)


def _no_token(seen: _Seen) -> None:
    for _, _, headers in seen:
        assert not any(k.lower() == "authorization" for k in headers), headers
        assert TOKEN not in json.dumps(headers)


def test_every_route_refuses_a_host_that_is_not_the_server(tmp_path: Path) -> None:
    with _job(tmp_path) as (proc, ckpt, port):
        routes = [
            ("GET", "/"), ("GET", "/graph.json"), ("GET", "/events"), ("GET", "/healthz"),
            ("GET", "/readyz"), ("GET", "/api/job"), ("GET", "/api/checkpoints"),
            ("GET", "/api/identity?nonce=" + "0" * 32), ("POST", "/api/checkpoint"),
            ("POST", "/api/savepoint"), ("POST", "/api/stop"), ("GET", "/no-such-page"),
        ]  # fmt: skip
        for method, path in routes:
            for host in ["evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"]:
                assert _status(port, method, path, host) == 421, (method, path, host)
        answer = _raw(
            port,
            f"GET /api/job HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n".encode(),
        )
        assert b"store" not in answer and b"positions" not in answer
        for host in [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"]:
            assert _status(port, "GET", "/api/job", host) == 200, host
            assert _status(port, "GET", "/", host) == 200, host
        assert proc.poll() is None  # refused requests did not stop it
        assert _cli("stop", str(ckpt)).returncode == 0
        assert proc.wait(timeout=120) == 0
    log = (tmp_path / "stderr.txt").read_text()
    assert log.count("refused requests for host") == 3, log
    assert "Traceback" not in log


def test_malformed_requests_leave_no_traceback_in_the_job_log(tmp_path: Path) -> None:
    with _job(tmp_path) as (proc, ckpt, port):
        for garbage in [
            b"GARBAGE \x01\x02 nonsense\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
        ]:
            answer = _raw(port, garbage)
            assert (
                answer.startswith(b"HTTP/1.")
                and b" 400 " in answer.split(b"\r\n")[0]
                or (b" 414 " in answer.split(b"\r\n")[0] or b" 505 " in answer.split(b"\r\n")[0])
            ), answer[:200]
        assert _status(port, "GET", "/healthz", "127.0.0.1") == 200
        assert _cli("stop", str(ckpt)).returncode == 0
        assert proc.wait(timeout=120) == 0
    log = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in log and "Error handling request" not in log, log


def test_the_token_goes_only_to_the_run_that_proves_it_is_the_job(tmp_path: Path) -> None:
    with _job(tmp_path) as (proc, ckpt, port):
        res = _cli("savepoint", str(ckpt))
        assert res.returncode == 0 and res.stdout.startswith("savepoint "), res.stderr
        run = json.loads((ckpt / "job.json").read_text())["control_run"]
        assert len(run) == 32
        assert _cli("stop", str(ckpt)).returncode == 0
        assert proc.wait(timeout=120) == 0
    # the job ended; its job.json still names its port, which another process now holds

    def impostor(h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if h.path.startswith("/api/identity"):
            return _json({"run": run, "proof": "0" * 64})
        return _json({"epoch": 99, "savepoint": True})

    with _server(port, impostor) as seen:
        _one_line(
            _cli("savepoint", str(ckpt)),
            f"the process at http://127.0.0.1:{port}/ could not prove that it holds your "
            "control token, so the token was not sent",
            "if the job has ended, another program holds its port",
        )
        _one_line(_cli("stop", f"http://127.0.0.1:{port}"), "could not prove")
    assert [(m, p.partition("?")[0]) for m, p, _ in seen] == [("GET", "/api/identity")] * 2
    _no_token(seen)

    def plain(h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        return 404, {"Content-Type": "text/html"}, b"<h1>not here</h1>"

    with _server(port, plain) as seen:
        _one_line(_cli("stop", str(ckpt)), "answered 404 to the identity check")
    _no_token(seen)

    # another run that holds the same token (another job on the port): not this store's job
    def other_run(h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        nonce = parse_qs(urlsplit(h.path).query)["nonce"][0]
        return _json({"run": "f" * 32, "proof": identity_proof(TOKEN, "f" * 32, nonce)})

    with _server(port, other_run) as seen:
        _one_line(_cli("stop", str(ckpt)), "it is another run than the one job.json names")
    _no_token(seen)


def test_a_redirect_is_never_followed_with_the_token(tmp_path: Path) -> None:
    with _job(tmp_path) as (proc, ckpt, port):
        assert _cli("stop", str(ckpt)).returncode == 0
        assert proc.wait(timeout=120) == 0

    with _server(0, lambda h: _json({"epoch": 7, "savepoint": True})) as elsewhere:
        far = elsewhere.port
        for status in (301, 302, 303, 307, 308):

            def redirect(
                h: BaseHTTPRequestHandler, status: int = status
            ) -> tuple[int, dict[str, str], bytes]:
                return status, {"Location": f"http://localhost:{far}{h.path}"}, b""

            with _server(port, redirect) as seen:
                _one_line(
                    _cli("savepoint", str(ckpt)),
                    f"it answered {status}, a redirect to 'http://localhost:{far}/api/identity",
                    "never followed",
                    "the control token was not sent",
                )
            assert len(seen) == 1
            _no_token(seen)
    assert elsewhere == []
