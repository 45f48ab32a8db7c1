"""Checkpoints in S3 on a real S3 API server (moto on loopback, a bucket per test).

The kill loop of the acceptance pipeline on S3 is in tests/integration/test_crash_recovery.py;
here: the store contract, inspection by URL, the lease's expiry and take-over, a store
that becomes unreachable while the job runs, and a savepoint whose files are copied from a
directory to S3 and back.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import CheckpointLockedError, Job, Manifest, ObjectStoreError
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.stores.objectstore import ObjectStore
from rivermark.cli import main
from rivermark.testing import wait_for
from rivermark.testing.crash import run_uncrashed
from rivermark.testing.s3_server import S3Server, TcpProxy

APP = Path(__file__).parent.parent / "apps" / "pipeline_app.py"
LEASE_APP = Path(__file__).parent.parent / "apps" / "lease_app.py"
N = 100_000


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("s3")
    with open(d / "in.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({"v": i}) + "\n")
    return d


@pytest.fixture(scope="module")
def reference(workdir: Path) -> bytes:
    out = workdir / "reference.txt"
    run_uncrashed(_cmd(str(workdir / "ref-ckpt")), env=_env(workdir, out, os.environ))
    return out.read_bytes()


def _cmd(ckpt: str) -> list[str]:
    return [
        sys.executable, "-m", "rivermark.cli", "run", f"{APP}:source",
        "--checkpoint", ckpt, "--every", "0.2s", "--keep", "3",
    ]  # fmt: skip


def _env(workdir: Path, out: Path, base: Any, work: int = 0) -> dict[str, str]:
    env = dict(base)
    env["RIVERMARK_APP_INPUT"] = str(workdir / "in.jsonl")
    env["RIVERMARK_APP_OUTPUT"] = str(out)
    env["RIVERMARK_APP_WORK"] = str(work)
    return env


def _lease(store: ObjectStore) -> dict[str, Any] | None:
    try:
        return dict(json.loads(store.fs.cat_file(f"{store.root}/LEASE")))
    except FileNotFoundError:
        return None


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.communicate()


def _write(store: ObjectStore, epoch: int, blob: bytes = b"abc") -> None:
    store.write_checkpoint(
        Manifest(epoch, 1.0, {"acc": "A()"}, positions={"s": epoch}), {"acc": blob}
    )


def test_store_contract_on_s3(bucket: str) -> None:
    store = ObjectStore(f"s3://{bucket}/jobs/contract")
    for e in (1, 2, 3):
        _write(store, e, bytes([e]) * 10)
    root = f"{bucket}/jobs/contract/checkpoints"
    # a torn write: a state object without a manifest is no checkpoint
    store.fs.pipe_file(f"{root}/000000000004/state/acc.0.pkl", b"half")
    assert store.list_epochs() == [1, 2, 3]
    assert [p.name for p in store.list_incomplete()] == ["000000000004"]
    assert store.verify(3).positions == {"s": 3} and store.read_state(2, "acc") == b"\x02" * 10
    _write(store, 5)
    assert store.prune(keep=2) == [1, 2]
    assert store.list_epochs() == [3, 5]
    store.fs.invalidate_cache()
    names = sorted(n.split("checkpoints/")[1] for n in store.fs.find(root))
    assert names == sorted(
        f"{e:012d}/{f}" for e in (3, 5) for f in ("manifest.json", _file(store, e))
    )


class _CountedFS:
    """An fsspec file system that counts the calls made through it (by method name)."""

    def __init__(self, fs: Any) -> None:
        self._fs, self.calls = fs, {}  # type: ignore[var-annotated]

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._fs, name)
        if not callable(real):
            return real

        def counted(*args: Any, **kwargs: Any) -> Any:
            path = str(args[0]) if args else ""
            key = f"{name} shared" if "/shared" in path else name
            self.calls[key] = self.calls.get(key, 0) + 1
            return real(*args, **kwargs)

        return counted


def test_retention_on_s3_reads_no_manifest_and_deletes_a_checkpoint_in_two_requests(
    bucket: str,
) -> None:
    # each request is a round trip (and, on S3, a charge): after every checkpoint,
    # retention lists the checkpoints and deletes the oldest, nothing more
    store = ObjectStore(f"s3://{bucket}/jobs/requests")
    counted = _CountedFS(store.fs)
    store.fs = counted  # type: ignore[assignment]
    nodes = {"a": "A()", "b": "A()", "c": "A()"}
    for e in range(1, 9):
        store.write_checkpoint(Manifest(e, 1.0, nodes), {n: bytes([e]) * 10 for n in nodes})
        store.prune(keep=3)
    assert store.list_epochs() == [6, 7, 8]
    calls = counted.calls
    assert "cat_file" not in calls  # no manifest read back
    assert calls.get("find shared") == 1  # the shared area listed once (empty)
    # five checkpoints deleted: each its manifest, then its three state objects in one request
    assert calls.get("rm_file") == 5 and calls.get("rm") == 5
    store.fs.invalidate_cache()
    root = f"{bucket}/jobs/requests/checkpoints"
    assert sorted({n.split("checkpoints/")[1][:12] for n in store.fs.find(root)}) == [
        f"{e:012d}" for e in (6, 7, 8)
    ]


def _add(acc: int, x: int) -> int:
    return acc + x


def test_nodes_named_anything_keep_their_state_objects_under_the_prefix_on_s3(
    bucket: str,
) -> None:
    names = ["../../../x", "clicks/per-minute", "n" * 300]
    url = f"s3://{bucket}/jobs/names"
    for items in ([1, 2, 3], [1, 2, 3, 4]):
        src = Stream.from_iterable(items, name="src")
        outs = [src.accumulate(_add, start=i, name=n) for i, n in enumerate(names)]
        Job(src, checkpoint=url, every=None).run()
    assert [o.state for o in outs] == [10, 11, 12]  # the second run resumed every node
    store = ObjectStore(url)
    store.fs.invalidate_cache()
    keys = [str(k) for k in store.fs.find(bucket)]
    assert keys and all(k.startswith(f"{bucket}/jobs/names/") for k in keys)
    for k in keys:  # no part of a key is '..' or '.', and each fits in 255 bytes
        parts = k.split("/")
        assert not {"..", ".", ""} & set(parts) and max(len(p.encode()) for p in parts) < 255
    m = store.verify(store.list_epochs()[-1])
    assert sorted(m.state) == sorted(names)
    assert all(m.state[n]["file"].count("/") == 1 for n in names)


def test_a_second_writer_never_replaces_a_checkpoint_on_s3(bucket: str) -> None:
    url = f"s3://{bucket}/jobs/two-writers"
    first, second = ObjectStore(url), ObjectStore(url)
    _write(first, 5, b"first")
    with pytest.raises(CheckpointLockedError, match="checkpoint 5 was written by another job"):
        _write(second, 5, b"second")
    assert first.verify(5).epoch == 5 and first.read_state(5, "acc") == b"first"


def _file(store: ObjectStore, epoch: int, node: str = "acc") -> str:
    return str(store.read_manifest(epoch).state[node]["file"])


def _graph(n: int) -> tuple[Stream, list[int]]:
    source = Stream.from_iterable(list(range(n)), name="numbers")
    out = source.accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
    return source, out


def test_damaged_newest_falls_back_on_s3(bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    url = f"s3://{bucket}/jobs/damaged"
    source, _ = _graph(300)
    Job(source, checkpoint=url, every=None, every_batches=100).run()
    store = ObjectStore(url)
    epochs = store.list_epochs()
    newest = (
        f"{bucket}/jobs/damaged/checkpoints/{epochs[-1]:012d}/{_file(store, epochs[-1], 'sum')}"
    )
    blob = bytearray(store.fs.cat_file(newest))
    blob[-2] ^= 1  # same size, one bit flipped
    store.fs.pipe_file(newest, bytes(blob))
    with caplog.at_level(logging.WARNING):
        source2, results = _graph(300)
        job = Job(source2, checkpoint=url, every=None)
        job.run()
    assert job.restored_epoch == epochs[-2]
    assert "skipping damaged checkpoint" in caplog.text and "checksum mismatch" in caplog.text
    assert results[-1] == sum(range(300))


def test_cli_on_an_s3_url(bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"s3://{bucket}/jobs/cli"
    source, _ = _graph(500)
    Job(source, checkpoint=url, every=None, every_batches=100).run()
    epochs = ObjectStore(url).list_epochs()
    assert main(["checkpoints", "list", url]) == 0
    listed = capsys.readouterr().out
    assert all(str(e) in listed for e in epochs) and "bytes" in listed
    assert main(["checkpoints", "show", url]) == 0
    assert "position numbers = 500" in capsys.readouterr().out
    assert main(["checkpoints", "diff", url, str(epochs[0]), str(epochs[-1])]) == 0
    assert "position numbers: moved +500 items (0 -> 500)" in capsys.readouterr().out
    assert main(["checkpoints", "verify", url]) == 0
    store = ObjectStore(url)
    newest = _file(store, epochs[-1], "sum")
    store.fs.pipe_file(f"{bucket}/jobs/cli/checkpoints/{epochs[-1]:012d}/{newest}", b"x")
    assert main(["checkpoints", "verify", url]) == 1
    assert "DAMAGED" in capsys.readouterr().out
    assert main(["checkpoints", "list", f"s3://{bucket}/jobs/none"]) == 2
    assert f"no checkpoints at 's3://{bucket}/jobs/none'" in capsys.readouterr().err


def test_lease_refuses_a_second_store_in_process(bucket: str) -> None:
    url = f"s3://{bucket}/jobs/twice"
    first = ObjectStore(url)
    first.lock()
    try:
        with pytest.raises(CheckpointLockedError, match=f"pid={os.getpid()} host="):
            ObjectStore(url).lock()
    finally:
        first.unlock()
    assert _lease(first) is None  # released with a conditional delete
    again = ObjectStore(url)
    again.lock()
    again.unlock()


def test_frozen_holder_loses_its_lease_after_expiry(
    bucket: str, procs: list[subprocess.Popen[bytes]], s3_env: dict[str, str]
) -> None:
    url = f"s3://{bucket}/jobs/frozen"
    store = ObjectStore(url, lease=False)
    n = 20_000
    env = dict(s3_env, RIVERMARK_APP_N=str(n), RIVERMARK_APP_WORK="300")
    env["RIVERMARK_LEASE_TTL"] = "6"
    cmd = [
        sys.executable, "-m", "rivermark.cli", "run", f"{LEASE_APP}:source",
        "--checkpoint", url, "--every", "0.2s", "--keep", "3",
    ]  # fmt: skip
    first = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    procs.append(first)
    wait_for(
        lambda: (_lease(store) or {}).get("holder", {}).get("pid") == first.pid, what="the lease"
    )
    wait_for(lambda: len(store.list_epochs()) >= 2, what="two checkpoints")
    first.send_signal(signal.SIGSTOP)  # alive, but cannot renew (a long pause, a partition)
    frozen_at = store.list_epochs()[-1]
    assert store.read_manifest(frozen_at).positions["numbers"] < n

    # while the lease has not expired (renewed every 2 s, ttl 6 s), another job is refused
    with pytest.raises(CheckpointLockedError, match=f"pid={first.pid} .*lease expires in"):
        ObjectStore(url).lock()
    wait_for(lambda: (_lease(store) or {"expires": 0})["expires"] < time.time(), 30, "expiry")

    # after expiry it is taken over: the second job resumes and finishes the input
    run_uncrashed(cmd, env={**env, "RIVERMARK_APP_WORK": "0"}, timeout=120)
    final = store.list_epochs()
    assert final[-1] > frozen_at
    assert store.read_manifest(final[-1]).positions["numbers"] == n
    assert codec.loads(store.read_state(final[-1], "sum")) == {"state": sum(range(n))}

    # the first job wakes up, finds its lease gone, and stops without a checkpoint
    first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 2, err.decode()
    assert "lost its lease" in err.decode()
    assert store.list_epochs() == final
    assert codec.loads(store.read_state(final[-1], "sum")) == {"state": sum(range(n))}


def test_unreachable_store_stops_the_job_and_keeps_the_last_checkpoint(
    bucket: str,
    workdir: Path,
    reference: bytes,
    s3_server: S3Server,
    procs: list[subprocess.Popen[bytes]],
    s3_env: dict[str, str],
) -> None:
    url = f"s3://{bucket}/jobs/unreachable"
    store = ObjectStore(url, lease=False)  # direct to the server
    out = workdir / "unreachable.txt"
    proxy = TcpProxy(s3_server.endpoint.removeprefix("http://"))
    env = _env(workdir, out, s3_env, work=60)
    env["AWS_ENDPOINT_URL"] = proxy.endpoint
    job = subprocess.Popen(_cmd(url), env=env, stderr=subprocess.PIPE)
    procs.append(job)
    try:
        wait_for(lambda: len(store.list_epochs()) >= 3, what="three checkpoints")
    finally:
        proxy.close()  # the store is gone for the job; the server keeps its data
    _, err = job.communicate(timeout=120)
    text = err.decode()
    assert job.returncode == 1, text  # a job that failed at run time (not a usage error)
    # the store's own one-line error, inside the job's "checkpoint N could not be written"
    assert f"ObjectStore({url!r}): could not " in text
    assert "run the job again to resume from the last complete checkpoint" in text
    assert "Traceback" not in text
    # the last checkpoint is intact ...
    epochs = store.list_epochs()
    assert epochs and all(store.verify(e).epoch == e for e in epochs)
    assert 0 < store.read_manifest(epochs[-1]).positions["lines"] < N
    # ... and the job resumes from it once the store is back
    run_uncrashed(
        _cmd(url),
        env={**env, "AWS_ENDPOINT_URL": s3_server.endpoint, "RIVERMARK_APP_WORK": "0"},
        timeout=120,
    )
    assert out.read_bytes() == reference


def test_an_unreachable_store_at_start_is_one_clear_error(s3_env: dict[str, str]) -> None:
    proxy = TcpProxy("127.0.0.1:9")
    proxy.close()
    store = ObjectStore("s3://nowhere/jobs/x", storage_options={"endpoint_url": proxy.endpoint})
    source, _ = _graph(10)
    with pytest.raises(ObjectStoreError, match=r"could not take the lease \(.*(Connect|connect)"):
        Job(source, checkpoint=store, every=None).run()


def test_a_missing_bucket_is_one_clear_error(s3_env: dict[str, str]) -> None:
    source, _ = _graph(10)
    url = "s3://rivermark-no-such-bucket/jobs/x"
    with pytest.raises(
        ObjectStoreError, match=re.escape(f"ObjectStore({url!r}): could not take the lease")
    ) as info:
        Job(source, checkpoint=url, every=None).run()
    assert "does the bucket exist?" in str(info.value)


def test_a_lease_that_cannot_be_renewed_is_lost_after_its_ttl(
    bucket: str, s3_server: S3Server
) -> None:
    url = f"s3://{bucket}/jobs/cut-off"
    proxy = TcpProxy(s3_server.endpoint.removeprefix("http://"))
    store = ObjectStore(url, storage_options={"endpoint_url": proxy.endpoint}, lease_ttl=5)
    store.lock()
    try:
        _write(store, 1)
        proxy.close()  # renewals fail from now on
        lease = store.lease
        assert lease is not None
        wait_for(lambda: not lease.held, what="the lease to count as lost")
        with pytest.raises(CheckpointLockedError, match="not renewed for more than its ttl"):
            _write(store, 2)
    finally:
        store.unlock()
    # the server kept checkpoint 1; the expired lease is taken over by the next job
    other = ObjectStore(url)
    other.lock()
    assert other.list_epochs() == [1]
    other.unlock()


def test_a_lease_that_does_not_parse_is_taken_over_only_after_the_lease_period(
    bucket: str,
) -> None:
    url = f"s3://{bucket}/jobs/torn-lease"
    probe = ObjectStore(url)
    lease_key = f"{probe.root}/LEASE"
    probe.fs.pipe_file(lease_key, b"{not json")
    written = probe.fs.info(lease_key)["LastModified"].timestamp()
    ttl = 10  # long enough that a loaded machine asks within it
    store = ObjectStore(url, lease_ttl=ttl)
    with pytest.raises(CheckpointLockedError, match="does not parse"):
        store.lock()
    deadline = time.monotonic() + 60
    while True:  # the refusal lasts until the object is ttl s old by its own time
        age = time.time() - written
        try:
            store.lock()
            break
        except CheckpointLockedError as e:
            assert "does not parse" in str(e)
            assert age < ttl, f"refused at age {age:.1f} s, past the lease period"
            assert time.monotonic() < deadline
            time.sleep(0.2)
    try:
        assert time.time() - written >= ttl
        assert _lease(store)["ttl"] == ttl
    finally:
        store.unlock()


def _counting(items: list[int], stop_at: int | None, jobs: list[Job]) -> tuple[Stream, list[Any]]:
    """Running counts of ``x % 37`` in a KeyedState; the job stops with a savepoint at ``stop_at``."""

    def count(acc: KeyedState, x: int) -> tuple[KeyedState, str]:
        acc[x % 37] = acc.get(x % 37, 0) + 1
        return acc, f"{x % 37}:{acc[x % 37]}"

    source = Stream.from_iterable(items, name="numbers")
    out = source.accumulate(count, start=KeyedState(), returns_state=True, name="counts")
    seen = out.sink_to_list(name="out")
    source.sink(lambda x: x == stop_at and jobs[0].stop(savepoint=True))
    return source, seen


def _run_to(stop_at: int | None, checkpoint: str, from_savepoint: str | None = None) -> int | None:
    """Run the counting job (to ``stop_at``, or the end); the epoch of its last savepoint."""
    jobs: list[Job] = []
    source, _ = _counting(list(range(1000)), stop_at, jobs)
    jobs.append(Job(source, checkpoint=checkpoint, every=None, from_savepoint=from_savepoint))
    jobs[0].run()
    return jobs[0].last_savepoint


def test_a_savepoint_copied_from_a_directory_to_s3_and_back_restores_exactly(
    bucket: str, tmp_path: Path
) -> None:
    import fsspec

    s3 = fsspec.filesystem("s3")
    # a savepoint in a local directory, its files copied to S3 as any tool copies files
    first = _run_to(300, str(tmp_path / "one"))
    assert first is not None
    part = f"checkpoints/{first:012d}"
    for f in (tmp_path / "one" / part).rglob("*"):
        if f.is_file():
            s3.put_file(str(f), f"{bucket}/moved/{f.relative_to(tmp_path / 'one')}")
    # a job starts from the copy into a location in S3, and stops with a savepoint there
    second = _run_to(700, f"s3://{bucket}/job", from_savepoint=f"s3://{bucket}/moved@{first}")
    assert second is not None
    # that savepoint's objects copied back to a directory: a job starts from it and ends
    part = f"checkpoints/{second:012d}"
    for key in s3.find(f"{bucket}/job/{part}"):
        local = tmp_path / "back" / key.removeprefix(f"{bucket}/job/")
        local.parent.mkdir(parents=True, exist_ok=True)
        s3.get_file(key, str(local))
    jobs: list[Job] = []
    source, seen = _counting(list(range(1000)), None, jobs)
    jobs.append(
        Job(
            source,
            checkpoint=tmp_path / "three",
            every=None,
            from_savepoint=f"{tmp_path / 'back'}@{second}",
        )
    )
    jobs[0].run()
    counts: dict[int, int] = {}
    reference = []
    for x in range(1000):
        counts[x % 37] = counts.get(x % 37, 0) + 1
        reference.append(f"{x % 37}:{counts[x % 37]}")
    assert seen == reference  # the sink's list came along with the savepoints too


def test_an_endpoint_that_drops_every_connection_is_one_line_without_tracebacks(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    """botocore retries each dropped request; the aborted attempts print nothing."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    dropped = []

    def drop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            dropped.append(1)
            conn.close()

    threading.Thread(target=drop, daemon=True).start()
    try:
        app = tmp_path / "app.py"
        app.write_text(
            "from rivermark import Stream\n"
            "source = Stream.from_iterable(range(10), name='n')\n"
            f"source.sink_to_textfile({str(tmp_path / 'out')!r})\n"
        )
        env = {**s3_env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{listener.getsockname()[1]}"}
        res = subprocess.run(
            [sys.executable, "-m", "rivermark.cli", "run", f"{app}:source",
             "--checkpoint", "s3://bucket/jobs/x"],
            capture_output=True, text=True, timeout=300, env={**os.environ, **env},
        )  # fmt: skip
    finally:
        listener.close()
    assert len(dropped) > 1  # the request was tried again
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "never retrieved" not in res.stderr, res.stderr
    assert res.stderr.splitlines() == [res.stderr.strip()], res.stderr
    # botocore names a dropped connection or a refused one (the listener closed
    # between retries) by class: either is the endpoint failing, in one line
    assert re.match(
        r"rivermark: ObjectStore\('s3://bucket/jobs/x'\): could not take the lease "
        r"\((Connection\w*|EndpointConnectionError)",
        res.stderr,
    ), res.stderr
