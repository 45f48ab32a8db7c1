"""The object store goes away while ``to_parquet`` / ``to_delta`` write to it.

The job (``apps/lake_app.py``) writes to ``s3://`` on a real S3 server
(moto) through a TCP proxy on loopback, its checkpoints in a local
directory.  Cutting the proxy makes the store unreachable for the job while
the server keeps its data: either connections are cut and refused (as when
the server is killed) or they stay open and get no answer (a frozen server,
a network partition), or the requests in flight and later ones still reach
the server but no answer comes back (the job cannot know whether a publish
or a Delta commit happened: the rerun resolves it).  Either way the job must stop within the sink's
``timeout`` (plus the time to exit) with one line naming the sink, the
endpoint and the remedy, and no traceback; its checkpoints stay intact; with
the store back at the same address, a rerun resumes exactly: the final
dataset or table equals an uninterrupted run's.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rivermark import Job, Stream
from rivermark.checkpoint.stores.store import LocalDirectoryStore
from rivermark.errors import ConfigurationError
from rivermark.lake.files import LakeSinkError, sink_digest
from rivermark.testing import wait_for
from rivermark.testing.s3_server import S3Server, TcpProxy

from .lakeread import delta_rows, lake_cmd, lake_env, parquet_rows
from .outage import run_into_outage

APP = str(Path(__file__).parents[1] / "apps" / "lake_app.py")
N = 3000
EXPECTED = [(i, f"k{i % 37}", i, i % 3) for i in range(N)]
#: the sinks' timeout in these tests (seconds)
TIMEOUT = 5.0
#: what the job may take beyond its timeout to stop: retries of refused connections, exiting
SLACK = 15.0


def _rows(kind: str, url: str, s3: S3Server) -> list[tuple[Any, ...]]:
    return parquet_rows(url, s3) if kind == "parquet" else delta_rows(url, "append")


@pytest.mark.parametrize("how", ["killed", "frozen", "answers lost"])
@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_store_down_mid_run_stops_the_job_and_a_rerun_resumes_exactly(
    kind: str, how: str, s3_server: S3Server, s3_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")  # deltalake in this process: moto speaks http
    url = f"s3://{s3_server.new_bucket()}/data/out"
    ckpt = tmp_path / "ckpt"
    proxy = TcpProxy(s3_server.endpoint.removeprefix("http://"))
    env = lake_env(kind, url, "append", N, work=3000, base=s3_server.env())
    env.update(AWS_ENDPOINT_URL=proxy.endpoint, AWS_ALLOW_HTTP="true",
               RIVERMARK_LAKE_TIMEOUT=str(TIMEOUT))  # fmt: skip
    cmd = lake_cmd(APP, str(ckpt))
    store = LocalDirectoryStore(ckpt, create=False)

    def cut() -> None:
        if how == "killed":
            proxy.close()  # connections cut and refused; the server keeps its data
        else:  # connections open, no answer; the server may act on the requests it gets
            proxy.hang(requests_too=how == "frozen")

    try:
        stopped = run_into_outage(
            cmd, env,
            lambda: len(store.list_epochs()) >= 3 and len(_rows(kind, url, s3_server)) > 0,
            cut, what="three checkpoints and rows in the output", exit_timeout=TIMEOUT + 120,
        )  # fmt: skip
    finally:
        proxy.close()
    rc, took, err, lines = stopped.returncode, stopped.seconds, stopped.stderr, stopped.said()
    assert rc == 2 and took < TIMEOUT + SLACK, (rc, took, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    sink = "to_parquet sink 'rows'" if kind == "parquet" else "to_delta sink 'rows'"
    assert re.match(
        rf"rivermark: {sink}: .* failed: the object store at 127\.0\.0\.1:{proxy.port} did not answer",
        lines[0],
    ), lines[0]  # fmt: skip
    assert lines[0].endswith(
        "the job stopped with its last checkpoint intact: start the store (check the network "
        f"and the endpoint; the sink waits timeout={TIMEOUT:g} s for an answer) and run again "
        "to resume"
    ), lines[0]
    assert "rivermark-test" not in err  # the credentials
    # the checkpoints are intact, the last one short of the end
    epochs = store.list_epochs()
    assert epochs and all(store.verify(e).epoch == e for e in epochs)
    assert 0 < store.read_manifest(epochs[-1]).positions["numbers"] < N
    # the store back at the same address: a rerun resumes exactly
    back = TcpProxy(s3_server.endpoint.removeprefix("http://"), port=proxy.port)
    try:
        res = subprocess.run(cmd, env=dict(env, RIVERMARK_APP_WORK="0"), capture_output=True,
                             timeout=180)  # fmt: skip
    finally:
        back.close()
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert _rows(kind, url, s3_server) == EXPECTED  # every record once
    if kind == "parquet":  # no in-progress file left behind
        fs = s3_server.filesystem()
        home = f"{url.removeprefix('s3://')}/_rivermark/{sink_digest('rows')}"
        assert [p for p in fs.find(home) if "/inprogress/" in p] == []


@pytest.mark.parametrize("how", ["killed", "frozen"])
@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_store_down_at_start_is_one_line_within_the_timeout(
    kind: str, how: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    proxy = TcpProxy("127.0.0.1:9")
    if how == "killed":
        proxy.close()  # nothing listens there: connections are refused
    else:
        proxy.hang()  # connections accepted, never answered
    src = Stream.from_iterable([{"id": 1}])
    if kind == "parquet":
        src.to_parquet("s3://nowhere/out", name="out", timeout=TIMEOUT,
                       storage_options={"endpoint_url": proxy.endpoint})  # fmt: skip
    else:
        src.to_delta("s3://nowhere/out", name="out", timeout=TIMEOUT,
                     storage_options={"AWS_ENDPOINT_URL": proxy.endpoint,
                                      "AWS_ALLOW_HTTP": "true"})  # fmt: skip
    label = "to_parquet sink 'out'" if kind == "parquet" else "to_delta sink 'out'"
    began = time.monotonic()
    with pytest.raises(LakeSinkError, match=re.escape(
        f"{label}: taking the sink's lock failed: the object store at 127.0.0.1:{proxy.port} "
        "did not answer ("
    )) as info:  # fmt: skip
        Job(src, checkpoint=str(tmp_path / "ckpt"), every=None).run()
    took = time.monotonic() - began
    text = str(info.value)
    proxy.close()
    # the thread given up on ends once the store's connections are gone
    wait_for(lambda: not _writer_threads(), timeout=60, what="the sink's threads to end")
    assert "\n" not in text and took < TIMEOUT + SLACK, (took, text)
    if how == "frozen":
        assert f"(NoAnswerError: no answer within the timeout of {TIMEOUT:g} s)" in text
    assert text.endswith("start the store (check the network and the endpoint; the sink waits "
                         f"timeout={TIMEOUT:g} s for an answer) and run again to resume")  # fmt: skip


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_timeout_must_be_a_positive_number(kind: str) -> None:
    src = Stream.from_iterable([{"id": 1}])
    with pytest.raises(ConfigurationError, match=re.escape(
        f"to_{kind}: timeout must be a positive number, got 0"
    )):  # fmt: skip
        if kind == "parquet":
            src.to_parquet("s3://bucket/out", timeout=0)
        else:
            src.to_delta("s3://bucket/out", timeout=0)


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rivermark-lake")]
