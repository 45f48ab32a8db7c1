"""Tests of Stream.from_periodic and Stream.from_q."""

from __future__ import annotations

import queue
import re
from typing import Any

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.core import runtime
from rivermark.sources.periodic import FromPeriodic
from rivermark.sources.queue import FromQ
from rivermark.testing import wait_for

from .conftest import stop_and_wait


def test_periodic_emits_callback_values() -> None:
    counter = iter(range(1000))
    source = Stream.from_periodic(lambda: next(counter), poll_interval=0.001)
    assert isinstance(source, FromPeriodic)
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: len(out) >= 5)
    stop_and_wait(source)
    n = len(out)
    assert out == list(range(n)) and source.position() == n


def test_periodic_accepts_coroutine_callback() -> None:
    async def cb() -> str:
        return "tick"

    source = Stream.from_periodic(cb, poll_interval="1ms")
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: len(out) >= 2)
    stop_and_wait(source)
    assert set(out) == {"tick"}


def test_periodic_callback_error_with_skip_goes_on() -> None:
    calls: list[int] = []

    def cb() -> int:
        calls.append(1)
        if len(calls) % 2:
            raise RuntimeError("odd")
        return len(calls)

    source = Stream.from_periodic(cb, poll_interval=0.001, on_error="skip")
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: len(out) >= 2)
    stop_and_wait(source)
    assert all(x % 2 == 0 for x in out) and source.error_count >= 2


def test_periodic_callback_error_with_raise_ends_source() -> None:
    def cb() -> Any:
        raise RuntimeError("broken sensor")

    source = Stream.from_periodic(cb, poll_interval=0.001)
    source.start()
    wait_for(lambda: source.finished)
    assert source.error
    with pytest.raises(RuntimeError, match="broken sensor"):
        runtime.run_sync(source.loop, source.wait_finished(), timeout=30)


def test_periodic_bad_arguments() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("from_periodic: callback must be callable, got 3")
    ):
        Stream.from_periodic(3)
    with pytest.raises(
        ConfigurationError, match=re.escape("from_periodic: poll_interval must be a positive")
    ):
        Stream.from_periodic(lambda: 1, poll_interval=0)


def test_q_emits_items_in_order() -> None:
    q: queue.Queue[Any] = queue.Queue()
    source = Stream.from_q(q, sleep_time=0.001)
    assert isinstance(source, FromQ)
    out = source.sink_to_list()
    source.start()
    for i in range(20):
        q.put(i)
    wait_for(lambda: len(out) == 20)
    stop_and_wait(source)
    assert out == list(range(20)) and source.position() == 20
    q.put("late")
    assert q.get_nowait() == "late"  # nothing reads the queue after stop


def test_q_bad_arguments() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("from_q: q must be a queue.Queue-like object")
    ):
        Stream.from_q([1, 2])
    with pytest.raises(
        ConfigurationError, match=re.escape("from_q: sleep_time must be a positive")
    ):
        Stream.from_q(queue.Queue(), sleep_time=-1)
