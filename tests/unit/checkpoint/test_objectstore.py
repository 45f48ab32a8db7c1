"""The fsspec object store on ``file://`` (the S3 runs are in tests/integration/objectstore)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rivermark.checkpoint import (
    CheckpointLockedError,
    Job,
    LocalDirectoryStore,
    Manifest,
    open_store,
)
from rivermark.checkpoint.stores.objectstore import ObjectStore
from rivermark.cli import main
from rivermark.errors import ConfigurationError

from .conftest import build


def _write(store: ObjectStore, epoch: int, blob: bytes = b"abc") -> None:
    store.write_checkpoint(
        Manifest(epoch, 1.0, {"acc": "A()"}, positions={"s": epoch}), {"acc": blob}
    )


def test_layout_is_the_directory_layout(tmp_path: Path) -> None:
    store = ObjectStore(f"file://{tmp_path}")
    _write(store, 42)
    d = tmp_path / "checkpoints" / "000000000042"
    entry = json.loads((d / "manifest.json").read_text())["state"]["acc"]
    assert re.fullmatch(r"state/acc\.[0-9a-f]{8}\.pkl", entry["file"]) and entry["size"] == 3
    assert (d / entry["file"]).read_bytes() == b"abc"
    # the same files are a valid directory store, and the other way round
    assert LocalDirectoryStore(tmp_path).verify(42).positions == {"s": 42}
    assert store.verify(42).epoch == 42 and store.read_state(42, "acc") == b"abc"
    assert not list(tmp_path.rglob("*.tmp"))


def test_torn_write_is_no_checkpoint_and_is_pruned(tmp_path: Path) -> None:
    store = ObjectStore(f"file://{tmp_path}")
    _write(store, 1)
    torn = tmp_path / "checkpoints" / "000000000002"
    (torn / "state").mkdir(parents=True)
    (torn / "state" / "acc.pkl").write_bytes(b"half")
    assert store.list_epochs() == [1]
    assert [p.name for p in store.list_incomplete()] == ["000000000002"]
    _write(store, 3)
    store.prune(keep=10)
    assert not torn.exists()
    assert store.list_epochs() == [1, 3]


def test_a_second_writer_never_replaces_a_checkpoint(tmp_path: Path) -> None:
    first, second = ObjectStore(f"file://{tmp_path}"), ObjectStore(f"file://{tmp_path}")
    _write(first, 5, b"first")
    with pytest.raises(CheckpointLockedError, match="checkpoint 5 was written by another job"):
        _write(second, 5, b"second")
    # its state objects have their own names: the first writer's checkpoint is intact
    assert first.verify(5).epoch == 5 and first.read_state(5, "acc") == b"first"
    assert len(list((tmp_path / "checkpoints" / "000000000005" / "state").iterdir())) == 2
    assert not list(tmp_path.rglob("*.tmp"))


def test_retention_keeps_the_newest(tmp_path: Path) -> None:
    store = ObjectStore(f"file://{tmp_path}")
    for e in range(1, 6):
        _write(store, e)
    assert store.prune(keep=2) == [1, 2, 3]
    assert store.list_epochs() == [4, 5]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "000000000004",
        "000000000005",
    ]


@pytest.mark.parametrize("damage", ["checksum", "missing", "truncated", "manifest", "epoch"])
def test_damaged_newest_falls_back_with_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"file://{tmp_path}"
    source, acc, results, _ = build(300)
    Job(source, checkpoint=url, every=None, every_batches=100).run()
    store = ObjectStore(url)
    epochs = store.list_epochs()
    newest = tmp_path / "checkpoints" / f"{epochs[-1]:012d}"
    state = newest / store.read_manifest(epochs[-1]).state["sum"]["file"]
    if damage == "checksum":
        state.write_bytes(b"\x80\x04K\x00.")
    elif damage == "missing":
        state.unlink()
    elif damage == "truncated":
        state.write_bytes(state.read_bytes()[:-1])
    elif damage == "manifest":
        (newest / "manifest.json").write_text("{not json")
    else:
        m = json.loads((newest / "manifest.json").read_text())
        m["epoch"] += 100
        (newest / "manifest.json").write_text(json.dumps(m))
    with caplog.at_level(logging.WARNING):
        source2, acc2, results2, _ = build(300)
        job = Job(source2, checkpoint=url, every=None)
        job.run()
    assert job.restored_epoch == epochs[-2]
    assert "skipping damaged checkpoint" in caplog.text
    assert results2[-1] == sum(range(300))


def test_job_resumes_from_a_file_url(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/job"
    source, _, results, holder = build(1000, stop_at=400)
    job = Job(source, checkpoint=url, every=None, every_batches=50)
    holder["job"] = job
    job.run()
    done = len(results)
    assert 0 < done < 1000
    source2, _, results2, _ = build(1000)
    job2 = Job(source2, checkpoint=url, every=None)
    job2.run()
    assert job2.restored_epoch is not None
    # sink_to_list's list is checkpointed state: the resumed list is the whole output
    expected = [sum(range(i + 1)) for i in range(1000)]
    assert results2 == expected and results == expected[:done]
    # the job id names the location, not the working directory
    assert job2.job_id == job.job_id and job2.job_id.startswith("job-")


def test_cli_inspects_a_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"file://{tmp_path}"
    source, *_ = build(500)
    Job(source, checkpoint=url, every=None, every_batches=100).run()
    epochs = ObjectStore(url).list_epochs()
    assert main(["checkpoints", "list", url]) == 0
    listed = capsys.readouterr().out
    assert all(str(e) in listed for e in epochs)
    assert main(["checkpoints", "show", url]) == 0
    assert "position numbers = 500" in capsys.readouterr().out
    assert main(["checkpoints", "diff", url, str(epochs[0]), str(epochs[-1])]) == 0
    assert "position numbers: moved +500 items (0 -> 500)" in capsys.readouterr().out
    assert main(["checkpoints", "verify", url]) == 0
    newest = ObjectStore(url).read_manifest(epochs[-1]).state["sum"]["file"]
    (tmp_path / "checkpoints" / f"{epochs[-1]:012d}" / newest).write_bytes(b"x")
    assert main(["checkpoints", "verify", url]) == 1
    assert "DAMAGED" in capsys.readouterr().out


def test_cli_missing_location(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"file://{tmp_path}/nothing"
    assert main(["checkpoints", "list", url]) == 2
    assert f"no checkpoints at {url!r}" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()


def test_open_store_factory(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path / "d"), LocalDirectoryStore)
    assert isinstance(open_store(str(tmp_path / "d")), LocalDirectoryStore)
    s = open_store(f"file://{tmp_path}/o")
    assert isinstance(s, ObjectStore) and s.location() == f"file://{tmp_path}/o"
    assert open_store(s) is s
    with pytest.raises(ConfigurationError, match=re.escape("got 42")):
        open_store(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["s3://", "s3:///", "nothing-here", ""])
def test_bad_url(url: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"got {url!r}")):
        ObjectStore(url)


def test_unknown_scheme_names_the_package() -> None:
    with pytest.raises(ConfigurationError, match=r"fsspec cannot open 'nosuchfs' URLs"):
        ObjectStore("nosuchfs://bucket/prefix")


def test_lease_ttl_must_be_positive(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("got 0")):
        ObjectStore(f"file://{tmp_path}", lease_ttl=0)
    monkeypatch.setenv("RIVERMARK_LEASE_TTL", "soon")
    with pytest.raises(ConfigurationError, match=re.escape("RIVERMARK_LEASE_TTL must be")):
        ObjectStore(f"file://{tmp_path}")
    monkeypatch.setenv("RIVERMARK_LEASE_TTL", "7.5")
    assert ObjectStore(f"file://{tmp_path}").lease_ttl == 7.5


def test_scheme_without_a_lease_is_refused_unless_disabled() -> None:
    url = f"memory://rivermark-test/{uuid.uuid4().hex}"
    with pytest.raises(ConfigurationError, match=re.escape("lease=False")):
        ObjectStore(url).lock()
    store = ObjectStore(url, lease=False)
    store.lock()
    _write(store, 1)
    assert store.list_epochs() == [1]
    store.unlock()


def test_second_store_is_refused_with_the_holder(tmp_path: Path) -> None:
    first = ObjectStore(f"file://{tmp_path}")
    first.lock()
    try:
        with pytest.raises(CheckpointLockedError, match=f"pid={os.getpid()} host="):
            ObjectStore(f"file://{tmp_path}").lock()
    finally:
        first.unlock()
    second = ObjectStore(f"file://{tmp_path}")
    second.lock()  # released: free again
    second.unlock()
    assert not (tmp_path / "LEASE").exists()


def test_lease_of_a_killed_process_is_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"file://{tmp_path}"
    code = (
        "import os, signal, sys\n"
        "from rivermark.checkpoint.stores.objectstore import ObjectStore\n"
        "ObjectStore(sys.argv[1]).lock()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, url])
    assert proc.wait(timeout=60) == -9
    held = json.loads((tmp_path / "LEASE").read_text())
    # not expired: taken over because its holder, a process of this host, is gone
    assert held["holder"]["pid"] == proc.pid and held["expires"] > time.time() + 5
    store = ObjectStore(url)
    with caplog.at_level(logging.WARNING):
        store.lock()
    assert f"took over the lease of pid={proc.pid} " in caplog.text
    assert "its process has exited" in caplog.text
    assert store.lease is not None and store.lease.held
    store.unlock()


def test_expired_lease_of_another_host_is_taken_over(tmp_path: Path) -> None:
    stale = {
        "holder": {"pid": 1, "host": "elsewhere", "pidns": "", "started": "then"},
        "token": "t",
        "ttl": 30.0,
        "expires": 1.0,
    }
    (tmp_path / "LEASE").write_text(json.dumps(stale))
    store = ObjectStore(f"file://{tmp_path}")
    store.lock()
    assert json.loads((tmp_path / "LEASE").read_text())["holder"]["pid"] == os.getpid()
    store.unlock()


def test_live_lease_of_another_host_is_refused(tmp_path: Path) -> None:
    live = {
        "holder": {"pid": 1, "host": "elsewhere", "pidns": "", "started": "then"},
        "token": "t",
        "ttl": 30.0,
        "expires": time.time() + 600,
    }
    (tmp_path / "LEASE").write_text(json.dumps(live))
    with pytest.raises(CheckpointLockedError, match=r"pid=1 host=elsewhere .* expires in"):
        ObjectStore(f"file://{tmp_path}").lock()


def test_lost_lease_stops_the_checkpoint_before_the_manifest(tmp_path: Path) -> None:
    store = ObjectStore(f"file://{tmp_path}")
    store.lock()
    _write(store, 1)
    # another job takes over (as after this one was frozen longer than the ttl)
    (tmp_path / "LEASE").write_text(
        json.dumps({"holder": {}, "token": "x", "ttl": 1, "expires": 0})
    )
    with pytest.raises(CheckpointLockedError, match="lost its lease"):
        _write(store, 2)
    assert store.list_epochs() == [1]
    store.unlock()
    # the other job's lease is left alone
    assert json.loads((tmp_path / "LEASE").read_text())["token"] == "x"


def test_the_docs_example_runs() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "checkpointing.md").read_text()
    section = doc.split("## Checkpoints in object storage", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    exec(compile(code, "docs/checkpointing.md", "exec"), {})


def test_of_racing_contenders_for_an_expired_lease_exactly_one_wins(tmp_path: Path) -> None:
    import threading

    stale = {"holder": {"pid": 1, "host": "elsewhere"}, "token": "t", "ttl": 1.0, "expires": 1.0}
    (tmp_path / "LEASE").write_text(json.dumps(stale))
    stores = [ObjectStore(f"file://{tmp_path}") for _ in range(8)]
    won: list[ObjectStore] = []
    refused: list[str] = []
    barrier = threading.Barrier(len(stores))

    def contend(store: ObjectStore) -> None:
        barrier.wait()
        try:
            store.lock()
            won.append(store)
        except CheckpointLockedError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=contend, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(won) == 1 and len(refused) == 7
    assert all(f"pid={os.getpid()} " in r for r in refused)
    won[0].unlock()
