"""Savepoints: marked in the manifest, written whole, never pruned, restored exactly."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore, Manifest, ManifestError
from rivermark.checkpoint.errors import JobFailedError
from rivermark.checkpoint.stores.manifest import sha256_of
from rivermark.checkpoint.stores.signing import Keyring
from rivermark.cli import main
from rivermark.errors import ConfigurationError
from rivermark.testing import run_in_thread, wait_for

from .counting import count, records, reference

N = 60_000


def build(recs: list[int], out: Path, gate: threading.Event | None = None) -> tuple[Stream, Stream]:
    source = Stream.from_iterable(recs, name="keys")

    def seen(k: int) -> int:
        if gate is not None:
            gate.set()
        return k

    acc = source.map(seen).accumulate(count, start=KeyedState(), name="counts")
    acc.map(len).sink_to_textfile(str(out))
    return source, acc


def _manifest(savepoint: bool) -> Manifest:
    return Manifest(
        epoch=5,
        time=1.0,
        fingerprint={"counts": "Accumulate()"},
        state={"counts": {"file": "state/counts.pkl", "size": 1, "sha256": sha256_of(b"x")}},
        chains={"counts": {"parent": None, "base": 5}},
        savepoint=savepoint,
    )


def test_the_savepoint_mark_round_trips_and_is_covered_by_the_checksum() -> None:
    text = _manifest(True).to_json()
    assert json.loads(text)["savepoint"] is True
    assert Manifest.from_json(text).savepoint is True
    plain = _manifest(False).to_json()
    # an ordinary checkpoint's text is what it was before savepoints existed
    assert "savepoint" not in json.loads(plain) and Manifest.from_json(plain).savepoint is False
    # removing or adding the mark breaks the checksum
    d = json.loads(text)
    del d["savepoint"]
    with pytest.raises(ManifestError, match="checksum mismatch"):
        Manifest.from_json(json.dumps(d))
    d = json.loads(plain)
    d["savepoint"] = True
    with pytest.raises(ManifestError, match="checksum mismatch"):
        Manifest.from_json(json.dumps(d))
    d = json.loads(text)
    d["savepoint"] = "yes"
    with pytest.raises(ManifestError, match=re.escape("'savepoint' must be true")):
        Manifest.from_json(json.dumps(d))


def test_the_signature_covers_the_savepoint_mark() -> None:
    keyring = Keyring([b"k" * 32])
    m = Manifest.from_json(_manifest(True).to_json(keyring))
    assert keyring.check(m.canonical, m.signature) == "ok"
    # the mark removed and the checksum recomputed by whoever edited it: the HMAC fails
    d = json.loads(_manifest(True).to_json(keyring))
    del d["savepoint"], d["checksum"]
    body = {k: v for k, v in d.items() if k != "signature"}
    d["checksum"] = sha256_of(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    edited = Manifest.from_json(json.dumps(d))
    assert not edited.savepoint
    assert keyring.check(edited.canonical, edited.signature) == "bad-signature"


def test_a_savepoint_whose_state_is_a_delta_is_refused() -> None:
    m = _manifest(True)
    m.epoch = 6
    m.chains = {"counts": {"parent": 5, "base": 5}}
    with pytest.raises(ManifestError, match="a savepoint holds a base of every state"):
        Manifest.from_json(m.to_json())


def test_prunable_never_includes_a_savepoint(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path)
    for e in range(1, 7):
        store.write_checkpoint(Manifest(e, 0.0, {}, savepoint=e == 2), {"n": b"s"})
    assert store.prunable(store.list_epochs(), 1) == [1, 3, 4, 5]
    assert store.prune(1) == [1, 3, 4, 5]
    assert store.list_epochs() == [2, 6]


def test_savepoint_from_another_thread_survives_retention_and_restores_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = records(N)
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    gate = threading.Event()
    source, _ = build(recs, out, gate)
    job = Job(source, checkpoint=ckpt, every=None, every_batches=3000, keep=1, compact_every=3)
    got: list[int] = []
    t, raised = run_in_thread(job)
    assert gate.wait(60)
    wait_for(lambda: job.running, timeout=60)
    got.append(job.savepoint())
    t.join(120)
    assert not t.is_alive() and raised == [] and job.ended_by is None
    assert out.read_text() == reference(recs)[1]
    sp = got[0]
    assert job.last_savepoint == sp
    store = LocalDirectoryStore(ckpt)
    m = store.read_manifest(sp)
    assert m.savepoint and m.chains["counts"]["parent"] is None
    epochs = store.list_epochs()
    # keep=1 pruned the other checkpoints before the newest's base, not the savepoint
    assert sp in epochs and epochs[-1] > sp + 3 and len(epochs) < job.checkpoints_written
    assert any(c.kind == "savepoint" and c.epoch == sp for c in job.checkpoints)
    assert main(["checkpoints", "list", str(ckpt)]) == 0
    assert re.search(rf"^\s*{sp}\s.*\bsavepoint\b", capsys.readouterr().out, re.M)
    assert main(["checkpoints", "prune", str(ckpt), "--keep", "1"]) == 0
    capsys.readouterr()
    assert sp in store.list_epochs()
    # remove every newer checkpoint by hand: the next run resumes from the savepoint
    for e in store.list_epochs():
        if e > sp:
            store.delete(e)
    assert store.list_epochs()[-1] == sp
    source, acc = build(recs, out)
    job2 = Job(source, checkpoint=ckpt, every=None)
    job2.run()
    assert job2.restored_epoch == sp
    state, text = reference(recs)
    assert out.read_text() == text and dict(acc.state) == state


def test_stop_with_savepoint_makes_the_final_checkpoint_one(tmp_path: Path) -> None:
    root = Stream(name="manual")
    acc = root.accumulate(count, start=KeyedState(), name="counts")
    acc.sink_to_list()
    job = Job(root, checkpoint=tmp_path, every=None, keep=1)
    with pytest.raises(ConfigurationError, match=re.escape("Job.savepoint(): the job is not")):
        job.savepoint()
    t, raised = run_in_thread(job)
    wait_for(lambda: job.running, timeout=60)
    for x in records(500):
        root.emit(x)
    first = job.checkpoint()
    for x in records(50):
        root.emit(x)
    assert job.checkpoint() == first + 1  # a delta on ``first``
    job.stop(savepoint=True)
    t.join(60)
    assert not t.is_alive() and raised == [] and job.ended_by is None
    store = LocalDirectoryStore(tmp_path)
    last = store.list_epochs()[-1]
    assert job.last_savepoint == last == first + 2
    m = store.read_manifest(last)
    assert m.savepoint and m.chains["counts"] == {"parent": None, "base": last}
    assert store.list_epochs() == [last]
    # the savepoint alone restores the whole state
    root2 = Stream(name="manual")
    acc2 = root2.accumulate(count, start=KeyedState(), name="counts")
    acc2.sink_to_list()
    job2 = Job(root2, checkpoint=tmp_path, every=None)
    t, raised = run_in_thread(job2)
    wait_for(lambda: job2.running, timeout=60)
    assert dict(acc2.state) == reference(records(500) + records(50))[0]
    job2.stop()
    t.join(60)
    assert raised == []
    with pytest.raises(ConfigurationError, match="not running"):
        job2.savepoint()


def test_a_savepoint_call_the_job_ends_before_serving_is_refused(tmp_path: Path) -> None:
    root = Stream(name="manual")
    root.accumulate(count, start=KeyedState(), name="counts").sink_to_list()
    job = Job(root, checkpoint=tmp_path, every=None)
    t, raised = run_in_thread(job)
    wait_for(lambda: job.running, timeout=60)
    job.stop()
    t.join(60)
    assert raised == [] and job.last_savepoint is None
    # a request that reaches the loop after the end gets the reason, not an old epoch
    loop = job._loop
    assert loop is not None
    fut = asyncio.run_coroutine_threadsafe(job.savepoint_async(), loop)
    with pytest.raises(JobFailedError, match=re.escape("Job.savepoint(): the job ended before")):
        fut.result(30)


def test_the_docs_example_runs() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "checkpointing.md").read_text()
    section = doc.split("## Savepoints", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    exec(compile(code, "docs/checkpointing.md", "exec"), {})
