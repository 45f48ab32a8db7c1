"""Configuration assigned after construction: live on every path, or refused."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.execution import graphcode as codegen

from ..helpers import node_by_node


def _run(
    build: Callable[[Stream], tuple[Stream, Callable[[], None]]], data: list[Any]
) -> list[Any]:
    """Emit ``data``; after the first record, apply the change ``build`` returned."""
    source = Stream()
    last, change = build(source)
    out = last.sink_to_list()
    for i, x in enumerate(data):
        if i == 1:
            change()
        source.emit(x)
    return out


CASES: dict[str, Callable[[Stream], tuple[Stream, Callable[[], None]]]] = {}


def _case(name: str) -> Callable[[Any], Any]:
    def register(f: Any) -> Any:
        CASES[name] = f
        return f

    return register


@_case("map.func")
def _map(s: Stream) -> tuple[Stream, Callable[[], None]]:
    m = s.map(lambda x: x + 1)
    return m, lambda: setattr(m, "func", lambda x: x * 100)


@_case("filter.predicate")
def _filter(s: Stream) -> tuple[Stream, Callable[[], None]]:
    f = s.filter(lambda x: x % 2 == 0)
    return f, lambda: setattr(f, "predicate", lambda x: x % 2 == 1)


@_case("accumulate.func")
def _acc(s: Stream) -> tuple[Stream, Callable[[], None]]:
    a = s.accumulate(lambda acc, x: acc + x, start=0)
    return a, lambda: setattr(a, "func", lambda acc, x: acc * 10 + x)


@_case("partition.n")
def _part(s: Stream) -> tuple[Stream, Callable[[], None]]:
    p = s.partition(2)
    return p, lambda: setattr(p, "n", 3)


@_case("zip.maxsize")
def _zip(s: Stream) -> tuple[Stream, Callable[[], None]]:
    z = s.map(lambda x: x).zip(s.map(lambda x: -x), maxsize=2)
    return z, lambda: setattr(z, "maxsize", 1)


@_case("sink.func")
def _sink(s: Stream) -> tuple[Stream, Callable[[], None]]:
    got: list[Any] = []
    m = s.map(lambda x: x)
    k = m.sink(got.append)
    return m, lambda: setattr(k, "func", lambda x: got.append(-x))


@pytest.mark.parametrize("case", sorted(CASES))
def test_live_configuration_takes_effect_on_every_path(case: str) -> None:
    data = list(range(12))
    with node_by_node():
        expected = _run(CASES[case], data)
    assert codegen.ENABLED
    assert _run(CASES[case], data) == expected
    # and from the next record on: the first record saw the old value
    if case == "map.func":
        assert expected[:3] == [1, 100, 200]


@pytest.mark.parametrize(
    ("make", "attr", "value"),
    [
        (lambda s: s.map(lambda x, k: x + k, 1), "args", (2,)),
        (lambda s: s.map(lambda x, k=0: x + k, k=1), "kwargs", {"k": 2}),
        (lambda s: s.filter(lambda x, k: x > k, 1), "args", (2,)),
        (lambda s: s.pluck(0), "pick", 1),
        (lambda s: s.accumulate(lambda a, x: (a, x), returns_state=True), "returns_state", False),
        (lambda s: s.accumulate(lambda a, x: a), "with_state", True),
        (lambda s: s.partition(3), "key", len),
        (lambda s: s.partition(3), "timeout", 1.0),
        (lambda s: s.sliding_window(3), "n", 4),
        (lambda s: s.sliding_window(3), "partial", False),
        (lambda s: s.zip(s, 7), "literals", []),
        (lambda s: s.sink(print), "args", (1,)),
    ],
)
def test_fixed_configuration_refuses_assignment(make: Any, attr: str, value: Any) -> None:
    node = make(Stream())
    before = getattr(node, attr)
    with pytest.raises(
        ConfigurationError,
        match=re.escape(f".{attr} is fixed when the node is created (got {value!r})"),
    ):
        setattr(node, attr, value)
    assert getattr(node, attr) == before
