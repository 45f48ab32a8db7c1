"""Tests of Stream.from_process, and that stopped sources let a script exit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.sources.process import FromProcess
from rivermark.testing import wait_for

from .conftest import stop_and_wait

PY = sys.executable


def test_process_lines_and_finish() -> None:
    source = Stream.from_process([PY, "-c", "print('a'); print('b', end='')"], with_end=False)
    assert isinstance(source, FromProcess)
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert out == [b"a\n"]  # with_end=False drops a last line without newline
    assert source.process is not None and source.process.returncode == 0


def test_process_with_end_and_stderr() -> None:
    code = "import sys; print('out', flush=True); sys.stderr.write('err\\n'); sys.stderr.flush(); sys.stdout.write('end')"
    source = Stream.from_process([PY, "-c", code], with_stderr=True, with_end=True)
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert out == [b"out\n", b"err\n", b"end"]
    assert source.position() == 3


def test_process_string_command() -> None:
    source = Stream.from_process(f"{PY} -c \"print('hi there')\"")
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert out == [b"hi there\n"]


def test_stop_terminates_the_child() -> None:
    code = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)"
    source = Stream.from_process([PY, "-c", code])
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: out == [b"ready\n"])
    assert source.process is not None
    pid = source.process.pid
    stop_and_wait(source)
    assert source.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_process_bad_arguments() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("from_process: cmd must be a non-empty command")
    ):
        Stream.from_process("")
    with pytest.raises(ConfigurationError, match=re.escape("got [1, 2]")):
        Stream.from_process([1, 2])


SCRIPT = """
import os, socket, sys, threading, time
from rivermark import Stream
from rivermark.core import runtime
from rivermark.testing import wait_for

tmp = sys.argv[1]
open(os.path.join(tmp, "in.txt"), "w").write("a\\n")
sources = [
    Stream.from_tcp(0, server_kwargs={"host": "127.0.0.1"}),
    Stream.from_http_server(0, server_kwargs={"host": "127.0.0.1"}),
    Stream.from_process([sys.executable, "-c", "import time; print('x', flush=True); time.sleep(60)"]),
    Stream.from_textfile(os.path.join(tmp, "in.txt"), poll_interval=0.01),
    Stream.filenames(tmp, poll_interval=0.01),
    Stream.from_periodic(lambda: 1, poll_interval=0.01),
    Stream.from_iterable(iter(range(10**9))),
]
import queue
q = queue.Queue()
sources.append(Stream.from_q(q))
outs = [s.sink_to_list() for s in sources]
for s in sources:
    s.start()
wait_for(lambda: sources[0].bound_port and sources[1].bound_port)
wait_for(lambda: all(outs[2:7]))
ports = [sources[0].bound_port, sources[1].bound_port]
for s in sources:
    s.stop()
wait_for(lambda: all(s.finished for s in sources))
for port in ports:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        pass
    else:
        sys.exit("port still open")
assert sources[2].process.returncode is not None, "child still running"

async def pending():
    import asyncio
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me]
left = runtime.run_sync(runtime.background_loop(), pending())
assert not left, left
others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
assert not others, others
print("clean")
"""


def test_script_that_starts_and_stops_sources_exits(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    data = tmp_path / "data"
    data.mkdir()
    proc = subprocess.run([PY, str(script), str(data)], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "clean"
