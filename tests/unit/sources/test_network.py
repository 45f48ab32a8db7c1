"""Tests of Stream.from_tcp and Stream.from_http_server (on real local sockets)."""

from __future__ import annotations

import http.client
import re
import socket

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.sources.network import FromHttpServer, FromTcp
from rivermark.testing import wait_for

from .conftest import leftover_tasks, stop_and_wait

LOCAL = {"host": "127.0.0.1"}


def started(source: FromTcp | FromHttpServer) -> int:
    source.start()
    wait_for(lambda: source.bound_port)
    assert source.bound_port is not None
    return source.bound_port


def assert_port_closed(port: int) -> None:
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_tcp_splits_on_delimiter_across_packets_and_connections() -> None:
    source = Stream.from_tcp(0, delimiter=b"|", server_kwargs=LOCAL)
    assert isinstance(source, FromTcp) and not source.replayable
    out = source.sink_to_list()
    port = started(source)
    with socket.create_connection(("127.0.0.1", port)) as c1:
        c1.sendall(b"ab")
        c1.sendall(b"c|d|tail-without-delimiter")
        wait_for(lambda: len(out) == 2)
        with socket.create_connection(("127.0.0.1", port)) as c2:
            c2.sendall(b"second|")
            wait_for(lambda: len(out) == 3)
    stop_and_wait(source)
    assert out == [b"abc|", b"d|", b"second|"]


def test_tcp_stop_closes_port_and_open_connections() -> None:
    source = Stream.from_tcp(0, server_kwargs=LOCAL)
    out = source.sink_to_list()
    port = started(source)
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(b"x\n")
    wait_for(lambda: out == [b"x\n"])
    stop_and_wait(source)
    assert_port_closed(port)
    client.settimeout(2)
    assert client.recv(10) == b""  # the server side of the connection was closed
    client.close()
    server_tasks = ("_Server", "_connection", "Source._main", "start_server")
    wait_for(lambda: not [t for t in leftover_tasks() if any(k in t for k in server_tasks)])


def test_tcp_bad_arguments() -> None:
    with pytest.raises(
        ConfigurationError,
        match=re.escape("from_tcp: port must be an integer from 0 to 65535, got 'x'"),
    ):
        Stream.from_tcp("x")
    with pytest.raises(
        ConfigurationError,
        match=re.escape("from_tcp: delimiter must be non-empty bytes, got '\\n'"),
    ):
        Stream.from_tcp(0, delimiter="\n")


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_http_server_emits_post_bodies_and_answers() -> None:
    source = Stream.from_http_server(0, path="/in/.*", server_kwargs=LOCAL)
    assert isinstance(source, FromHttpServer)
    out = source.sink_to_list()
    port = started(source)
    assert request(port, "POST", "/in/a", b"first") == (200, b"OK")
    assert out == [b"first"]  # emitted before the reply
    assert request(port, "POST", "/in/b?q=1", b"") == (200, b"OK")
    assert request(port, "GET", "/in/a")[0] == 405
    assert request(port, "POST", "/other", b"no")[0] == 404
    assert out == [b"first", b""]
    stop_and_wait(source)
    assert_port_closed(port)


def test_http_keep_alive_connection_serves_several_requests() -> None:
    source = Stream.from_http_server(0, server_kwargs=LOCAL)
    out = source.sink_to_list()
    port = started(source)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for body in (b"1", b"22"):
        conn.request("POST", "/", body=body)
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b"OK"
    conn.close()
    stop_and_wait(source)
    assert out == [b"1", b"22"]


def test_http_bad_arguments() -> None:
    with pytest.raises(
        ConfigurationError,
        match=re.escape("from_http_server: path must be a regular expression, got '('"),
    ):
        Stream.from_http_server(0, path="(")
    with pytest.raises(
        ConfigurationError,
        match=re.escape("from_http_server: port must be an integer from 0 to 65535, got 70000"),
    ):
        Stream.from_http_server(70000)


def test_tcp_stop_from_inside_an_emit_finishes_that_record_only() -> None:
    source = Stream.from_tcp(0, server_kwargs=LOCAL)
    out: list[bytes] = []

    def take(x: bytes) -> None:
        out.append(x)
        source.stop()

    source.sink(take)
    port = started(source)
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"a\nb\nc\n")
        wait_for(lambda: source.finished)
    assert out == [b"a\n"]
    assert_port_closed(port)
