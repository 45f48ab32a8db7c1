"""RocksDB state handed from one process to another on the same machine (one ``state_dir``).

A job that ended released its checkpoint store, but its process may still
have the database open (its state stays readable after ``run()``), and
RocksDB goes on flushing and compacting it.  The next owner of the store
(another process, e.g. the new owner of a Kafka partition) restores from the
same local checkpoint directory: neither may remove or replace a file the
other's database uses.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job
from rivermark.testing import wait_value

APP = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rivermark import KeyedState, Stream
    from rivermark.checkpoint import Job

    def count(acc, w):
        acc[w] = acc.get(w, 0) + 1
        return acc

    ckpt, state_dir, ready, stop = sys.argv[1:5]
    src = Stream.from_iterable([i % 3000 for i in range(9000)], name="words")
    counts = src.accumulate(count, start=KeyedState(), name="counts")
    Job(src, checkpoint=ckpt, every=None, state="rocksdb", state_dir=state_dir,
        state_cache="8MiB").run()
    Path(ready).write_text("ended")
    # the job ended and released its store; this process still holds its
    # database (readable) and keeps it busy: writes, flushes, compactions
    db, i = counts.state.db, 0
    while not Path(stop).exists():
        for _ in range(200):
            db[("after", i).__repr__().encode()] = b"x" * 64
            i += 1
        db.flush(True)
        db.compact_range(None, None)
    print(i, flush=True)
    """
)


def count(acc: KeyedState, w: int) -> KeyedState:
    acc[w] = acc.get(w, 0) + 1
    return acc


def test_a_new_owner_and_the_database_of_the_previous_one_do_not_touch_each_others_files(
    tmp_path: Path,
) -> None:
    ckpt, sd = tmp_path / "ckpt", tmp_path / "state"
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    script = tmp_path / "first.py"
    script.write_text(APP)
    first = subprocess.Popen(
        [sys.executable, str(script), str(ckpt), str(sd), str(ready), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_value(lambda: ready.exists() or first.poll() is not None, 120, "the first job ended")
        assert first.poll() is None, first.communicate()[1][-3000:]
        # the first process compacts its database all along; this one resumes the
        # store from the local checkpoint and checkpoints several times meanwhile
        home = sd / "counts" / "state"
        for rnd in range(1, 4):
            items = [i % 3000 for i in range(9000 + 3000 * rnd)]  # resumes after the first's
            src = Stream.from_iterable(items, name="words")
            counts = src.accumulate(count, start=KeyedState(), name="counts")
            job = Job(
                src,
                checkpoint=str(ckpt),
                every=0.02,
                state="rocksdb",
                state_dir=sd,
                state_cache="8MiB",
            )
            job.run()
            assert job.state_backend.restores["counts"].local  # nothing downloaded
            assert len(counts.state) == 3000
            assert {counts.state[k] for k in (0, 1500, 2999)} == {3 + rnd}
            # the first process's live directory and this one's
            assert len(list(home.glob("db-*"))) == 2
    finally:
        stop.write_text("stop")
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err[-3000:]
    assert int(out.split()[-1]) > 0  # it did write and compact while the others ran
    # the first process exited: the next open removes its live directory
    src = Stream.from_iterable([i % 3000 for i in range(21000)], name="words")
    counts = src.accumulate(count, start=KeyedState(), name="counts")
    Job(src, checkpoint=str(ckpt), every=None, state="rocksdb", state_dir=sd).run()
    assert counts.state[5] == 7
    assert [p.name for p in home.glob("db*")] == [Path(counts.state.path).name]
