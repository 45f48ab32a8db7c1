"""Tests of Stream.from_iterable."""

from __future__ import annotations

import re

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.sources.iterable import FromIterable
from rivermark.testing import wait_for

from .conftest import stop_and_wait


def test_emits_all_items_and_position_is_next_index() -> None:
    source = Stream.from_iterable([10, 20, 30])
    assert isinstance(source, FromIterable) and source.replayable
    assert source.position() == 0
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert out == [10, 20, 30] and source.position() == 3


def test_seek_skips_that_many_items() -> None:
    source = Stream.from_iterable(range(5))
    out = source.sink_to_list()
    source.seek(2)
    source.start()
    wait_for(lambda: source.finished)
    assert out == [2, 3, 4] and source.position() == 5


def test_stop_during_emit_leaves_position_after_last_emitted() -> None:
    source = Stream.from_iterable(range(100))
    out: list[int] = []

    def take(x: int) -> None:
        out.append(x)
        if x == 1:
            source.stop()

    source.sink(take)
    source.start()
    wait_for(lambda: source.finished)
    assert out == [0, 1] and source.position() == 2
    # resume where it stopped, as a restore would
    again = Stream.from_iterable(range(100))
    rest = again.sink_to_list()
    again.seek(source.position())
    again.start()
    wait_for(lambda: again.finished)
    assert out + rest == list(range(100))


def test_generator_is_not_replayable_and_restart_continues() -> None:
    gen = (i for i in range(4))
    source = Stream.from_iterable(gen)
    assert source.replayable is False
    out: list[int] = []

    def take(x: int) -> None:
        out.append(x)
        if x == 1:
            source.stop()

    source.sink(take)
    source.start()
    wait_for(lambda: source.finished)
    assert out == [0, 1]
    source.start()
    wait_for(lambda: source.finished and len(out) == 4)
    assert out == [0, 1, 2, 3]


def test_stop_of_a_long_iterable_ends_it() -> None:
    source = Stream.from_iterable(range(10**9))
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: len(out) > 10)
    stop_and_wait(source)
    n = len(out)
    assert out == list(range(n)) and source.position() == n


def test_bad_arguments() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("from_iterable: iterable must be iterable, got 5")
    ):
        Stream.from_iterable(5)
    with pytest.raises(
        ConfigurationError, match=re.escape("position must be an integer >= 0, got -1")
    ):
        Stream.from_iterable([1]).seek(-1)
