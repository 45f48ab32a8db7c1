"""A file sink's writer thread: every wait has the sink's deadline; a stuck thread is given up."""

from __future__ import annotations

import re
import threading
import time

import pytest

from rivermark.lake.worker import BackgroundWriter, NoAnswerError, abandoned
from rivermark.testing import wait_for


def test_a_call_that_does_not_return_in_time_gives_the_thread_up() -> None:
    bg = BackgroundWriter("to_parquet sink 'x'", deadline=0.2)
    assert bg.call(lambda: threading.current_thread().name) == "rivermark-lake to_parquet sink 'x'"
    answer = threading.Event()
    began = time.monotonic()
    with pytest.raises(NoAnswerError, match=re.escape("no answer within the timeout of 0.2 s")):
        bg.call(answer.wait)
    assert time.monotonic() - began < 5 and bg.stuck and abandoned() >= 1
    # every later call fails at once, and close does not wait for the stuck thread
    with pytest.raises(NoAnswerError):
        bg.submit(lambda: None)
    closed: list[str] = []
    bg.close(lambda: closed.append(threading.current_thread().name))
    wait_for(lambda: closed, timeout=30, what="the cleanup on a thread of its own")
    assert closed == ["rivermark-lake-close to_parquet sink 'x'"]
    answer.set()  # the store answers at last: the thread ends
    wait_for(lambda: abandoned() == 0, timeout=30, what="the stuck thread to end")


def test_without_a_deadline_calls_run_on_the_callers_thread_and_close_joins() -> None:
    bg = BackgroundWriter("to_delta sink 'y'")
    seen: list[str] = []
    bg.submit(lambda: seen.append(threading.current_thread().name))
    assert bg.call(lambda: threading.current_thread()) is threading.current_thread()
    assert seen == ["rivermark-lake to_delta sink 'y'"]  # the write in flight went first
    bg.close(lambda: seen.append("closed"))
    assert seen[-1] == "closed"
    assert not [t for t in threading.enumerate() if t.name.startswith("rivermark-lake")]


def test_a_store_known_down_is_not_waited_for_at_close() -> None:
    bg = BackgroundWriter("to_parquet sink 'z'", deadline=30)
    bg.call(lambda: None)
    release = threading.Event()
    began = time.monotonic()
    bg.close(release.wait, down=True)  # a cleanup that would block: not waited for
    assert time.monotonic() - began < 5
    release.set()
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("rivermark-lake")],
        timeout=30, what="the writer and cleanup threads to end",
    )  # fmt: skip
