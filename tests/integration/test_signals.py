"""SIGINT/SIGTERM on ``rivermark run``: the first stops gracefully, a second at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing import wait_for

RIVERMARK = str(Path(sys.executable).parent / "rivermark")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_second_signal_stops_at_once_and_keeps_the_last_checkpoint(
    tmp_path: Path, signum: int
) -> None:
    marker = tmp_path / "stuck"
    app = tmp_path / "app.py"
    # record 50 blocks (a stuck user function): a graceful stop cannot finish
    app.write_text(
        textwrap.dedent(
            f"""\
            import time
            from rivermark import Stream

            def work(x):
                if x == 50:
                    open({str(marker)!r}, "w").close()
                    time.sleep(600)
                return x

            source = Stream.from_iterable(list(range(1000)), name="numbers")
            source.map(work).accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
            """
        )
    )
    ckpt = tmp_path / "ckpt"
    log = tmp_path / "stderr.txt"
    with log.open("w") as errfile:
        proc = subprocess.Popen(
            [RIVERMARK, "run", f"{app}:source", "--checkpoint", str(ckpt), "--every", "none"],
            stderr=errfile,
        )
    try:
        wait_for(marker.exists, timeout=120)
        store = LocalDirectoryStore(ckpt)
        before = store.list_epochs()
        assert before == [1]  # the checkpoint at start
        proc.send_signal(signum)
        # the first signal was handled: its graceful stop waits for record 50
        wait_for(lambda: "stopping with a final checkpoint" in log.read_text(), timeout=60)
        assert proc.poll() is None
        proc.send_signal(signum)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert rc == 128 + signum, err
    assert "Traceback" not in err
    assert "stopping at once without a final checkpoint" in err, err
    # no final checkpoint; the last one is intact
    assert store.list_epochs() == before
    store.verify(before[-1])
