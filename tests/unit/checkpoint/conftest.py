from __future__ import annotations

from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import Job


def total(acc: int, x: int) -> int:
    return acc + x


def build(n: int = 2000, out: list[Any] | None = None, stop_at: int | None = None) -> Any:
    """from_iterable(range(n)) -> accumulate(total) -> sink_to_list; optional self-stop."""
    source = Stream.from_iterable(list(range(n)), name="numbers")
    holder: dict[str, Job] = {}

    def maybe_stop(x: int) -> int:
        if stop_at is not None and x == stop_at:
            holder["job"].stop()
        return x

    acc = source.map(maybe_stop).accumulate(total, start=0, name="sum")
    results = acc.sink_to_list()
    return source, acc, results, holder


@pytest.fixture
def pipeline() -> Any:
    return build
