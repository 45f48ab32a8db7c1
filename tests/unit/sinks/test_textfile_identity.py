"""A textfile sink restores only its own file, and holds it while a job runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointMismatchError, Job
from rivermark.errors import ChangedFileError, FileInUseError
from rivermark.testing import wait_for

UNRELATED = "precious line that is not the job's output\n" * 50


def job_writing(out: Path, ckpt: Path, n: int = 200) -> Job:
    source = Stream.from_iterable(list(range(n)), name="numbers")
    source.map(str).sink_to_textfile(str(out))
    return Job(source, checkpoint=ckpt, every=None)


def test_changed_sink_path_does_not_truncate_an_unrelated_file(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    job_writing(tmp_path / "a.txt", ckpt).run()
    other = tmp_path / "b.txt"
    other.write_text(UNRELATED)
    with pytest.raises(CheckpointMismatchError) as info:
        job_writing(other, ckpt).run()
    msg = str(info.value)
    assert "changed: sinktotextfile-" in msg and "b.txt" in msg and "a.txt" in msg
    assert other.read_text() == UNRELATED


def test_restore_refuses_a_handle_of_another_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    s = Stream()
    sink = s.sink_to_textfile(a, mode="w")
    s.emit("x")
    handle = sink.pre_commit(1)
    sink.close()
    b.write_text(UNRELATED)
    other = Stream().sink_to_textfile(b)
    with pytest.raises(ChangedFileError, match=re.escape(f"output file is {str(a)!r}")):
        other.restore(handle)
    other.close()
    assert b.read_text() == UNRELATED


def test_restore_refuses_a_replaced_file_of_the_same_name(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    s = Stream()
    sink = s.sink_to_textfile(path, mode="w")
    for i in range(100):
        s.emit(f"line {i}")
    handle = sink.pre_commit(1)
    sink.close()
    path.write_text(UNRELATED)  # longer than the handle's length, other bytes
    assert path.stat().st_size > handle["length"]
    again = Stream().sink_to_textfile(path)
    with pytest.raises(ChangedFileError, match="bytes before position"):
        again.restore(handle)
    again.close()
    assert path.read_text() == UNRELATED


def test_restore_accepts_a_copy_with_the_same_bytes(tmp_path: Path) -> None:
    # identity is by content, not inode: a file restored from a backup resumes
    path = tmp_path / "out.txt"
    s = Stream()
    sink = s.sink_to_textfile(path, mode="w")
    s.emit("kept")
    handle = sink.pre_commit(1)
    s.emit("after")
    sink.close()
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    again = Stream().sink_to_textfile(path)
    again.restore(handle)
    again.close()
    assert path.read_text() == "kept\n"


def test_two_sinks_of_one_job_on_one_file_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    source = Stream.from_iterable([1, 2, 3], name="numbers")
    source.sink_to_textfile(str(out))
    source.map(str).sink_to_textfile(str(out))
    with pytest.raises(FileInUseError, match=re.escape(f"pid {os.getpid()}")):
        Job(source, checkpoint=tmp_path / "ckpt", every=None).run()
    # the refused job released everything: the file can be written by a new job
    job_writing(out, tmp_path / "ckpt2", n=3).run()
    assert out.read_text() == "0\n1\n2\n"


def test_a_second_job_writing_the_same_file_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    out, marker, release = tmp_path / "out.txt", tmp_path / "running", tmp_path / "release"
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            f"""\
            import os, time
            from rivermark import Stream

            def hold(x):
                if x == 5:
                    open({str(marker)!r}, "w").close()
                    while not os.path.exists({str(release)!r}):
                        time.sleep(0.01)
                return x

            source = Stream.from_iterable(list(range(10)), name="numbers")
            source.map(hold).sink_to_textfile({str(out)!r})
            """
        )
    )
    rivermark = str(Path(sys.executable).parent / "rivermark")
    proc = subprocess.Popen(
        [rivermark, "run", f"{app}:source", "--checkpoint", str(tmp_path / "c1")],
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: marker.exists() or proc.poll() is not None, timeout=120)
        assert proc.poll() is None
        before = out.read_bytes()
        with pytest.raises(FileInUseError) as info:
            job_writing(out, tmp_path / "c2").run()
        assert f"pid {proc.pid}" in str(info.value) and "rivermark run" in str(info.value)
        assert out.read_bytes() == before
    finally:
        release.touch()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert out.read_text() == "".join(f"{i}\n" for i in range(10))


def test_dev_null_is_neither_checked_nor_locked(tmp_path: Path) -> None:
    # many jobs may write to /dev/null at once
    sources = [Stream.from_iterable([1, 2], name="numbers") for _ in range(2)]
    sinks = [s.sink_to_textfile(os.devnull) for s in sources]
    handles = []
    for sink in sinks:
        sink.restore(None)
        handles.append(sink.pre_commit(1))
    for sink, handle in zip(sinks, handles):
        sink.restore(handle)
        sink.close()


def test_a_checkpoint_from_before_sinks_were_fingerprinted_still_resumes(tmp_path: Path) -> None:
    import dataclasses

    from rivermark.checkpoint import LocalDirectoryStore

    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    job_writing(out, ckpt, n=10).run()
    # a newer checkpoint without the sink in its fingerprint, as an older version wrote it
    store = LocalDirectoryStore(ckpt)
    last = store.read_manifest(store.list_epochs()[-1])
    fingerprint = {k: v for k, v in last.fingerprint.items() if not k.startswith("sinktotext")}
    assert fingerprint != last.fingerprint
    states = {nid: store.read_state(last.epoch, nid) for nid in last.state}
    older = dataclasses.replace(last, epoch=last.epoch + 1, fingerprint=fingerprint, state={})
    store.write_checkpoint(older, states)
    job = job_writing(out, ckpt, n=10)
    job.run()
    assert job.restored_epoch == last.epoch + 1
    assert out.read_text() == "".join(f"{i}\n" for i in range(10))
