"""A write RocksDB stalls never holds the process: it waits with the GIL released, then one line.

RocksDB stalls a write while its memtables cannot be flushed (a full disk);
rocksdict holds the GIL while RocksDB works, so a stalled write used to
stop every thread of the job for ever.  The stall here is real: a write
buffer manager allowed to stall, with a budget of one byte, stalls every
write (what a flush that never finishes does), and raising the budget ends
the stall.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.rocks import writes
from rivermark.checkpoint.state.rocks.mapping import META_CF, RocksKeyedState, RocksSettings
from rivermark.checkpoint.state.rocks.writes import write
from rivermark.errors import StateStoreError


def _stalling_db(path: Path) -> tuple[Any, Any, Any]:
    """A database with the job's options whose writes all stall, its write options, the manager."""
    settings = RocksSettings(cache=8 << 20)
    manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
        1, True, rocksdict.Cache(1 << 20)
    )

    def options() -> Any:
        o = settings.options()
        o.set_write_buffer_manager(manager)
        return o

    db = rocksdict.Rdict(str(path), options(), column_families={META_CF: options()})
    return db, settings.write_options(), manager


class _Ticker:
    """A thread that counts while it gets the GIL."""

    def __init__(self) -> None:
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.ticks += 1

    def __enter__(self) -> _Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def stalled(tmp_path: Path) -> Iterator[tuple[Any, Any, Any]]:
    db, options, manager = _stalling_db(tmp_path / "db")
    try:
        yield db, options, manager
    finally:
        manager.set_buffer_size(64 << 20)  # let the close flush
        db.close()


def test_a_stalled_write_releases_the_gil_and_stops_with_one_line(
    stalled: tuple[Any, Any, Any],
) -> None:
    db, options, _ = stalled
    started = time.monotonic()
    with _Ticker() as ticker, pytest.raises(StateStoreError) as raised:
        write(db, lambda batch: batch.put(b"k", b"v"), options, "/s/db", timeout=1.0)
    took = time.monotonic() - started
    assert re.fullmatch(
        re.escape(
            "the RocksDB state in '/s/db' cannot be written: RocksDB stalled a write for 1 s: "
            "its memtables are full and cannot be flushed (a disk that does not accept "
            "writes?); fix the cause (free disk space, restore write permission), or give the "
            "job another state_dir (Job(state_dir=...), --state-dir) and run again: the job "
            "resumes from its last complete checkpoint"
        ),
        str(raised.value),
    )
    assert 1.0 <= took < 30, took
    # the other threads ran meanwhile: the GIL was released between the tries
    assert ticker.ticks >= 20, ticker.ticks


def test_a_write_goes_through_once_the_stall_ends(stalled: tuple[Any, Any, Any]) -> None:
    db, options, manager = stalled
    tries: list[int] = []

    def fill(batch: Any) -> None:
        tries.append(1)  # called again for each try: rocksdict consumes a refused batch
        batch.put(b"k", b"v")
        batch.put(b"j", b"w")

    threading.Timer(0.3, manager.set_buffer_size, args=(64 << 20,)).start()
    write(db, fill, options, "/s/db", timeout=60)
    assert len(tries) >= 2
    assert db[b"k"] == b"v" and db[b"j"] == b"w"


def test_the_mapping_stops_with_one_line_when_its_database_stalls(
    stalled: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, options, _ = stalled
    monkeypatch.setattr(writes, "STALL_TIMEOUT", 0.5)
    state = RocksKeyedState(db, "/s/db", 4096, codec.reader(), options)
    state["a"] = 1
    with pytest.raises(StateStoreError, match=re.escape("RocksDB stalled a write for 0.5 s")):
        state.flush()
