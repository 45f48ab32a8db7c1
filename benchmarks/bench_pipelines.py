"""The six pipeline shapes of the performance target, one million ints each.

(a) ``map(inc).filter(even).accumulate(add).sink(noop)``
(b) a chain of 10 ``map(inc)``
(c) ``sliding_window(10)``
(d) ``partition(100)``
(e) ``zip`` of two branches (``map(inc)`` and ``map(dec)``)
(f) ``union`` of two branches (``map(inc)`` and ``map(dec)``)

Each builder is written once against the streamz-compatible chaining API and
is run on both ``rivermark.Stream`` and ``streamz.Stream``.  Each plain loop
calls the same functions in the same order and hands the same values to the
sink.  The functions are module-level so that every contender pays the same
call cost.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from harness import Variant

Sink = Callable[[Any], Any]


def inc(x: int) -> int:
    return x + 1


def dec(x: int) -> int:
    return x - 1


def even(x: int) -> bool:
    return x % 2 == 0


def add(acc: int, x: int) -> int:
    return acc + x


# (a) ---------------------------------------------------------------------------
def build_a(S: Any, sink: Sink) -> Any:
    source = S()
    source.map(inc).filter(even).accumulate(add, start=0).sink(sink)
    return source


def plain_a(n: int, sink: Sink) -> None:
    acc = 0
    for x in range(n):
        y = inc(x)
        if even(y):
            acc = add(acc, y)
            sink(acc)


# (b) ---------------------------------------------------------------------------
def build_b(S: Any, sink: Sink) -> Any:
    source = S()
    node = source
    for _ in range(10):
        node = node.map(inc)
    node.sink(sink)
    return source


def plain_b(n: int, sink: Sink) -> None:
    for x in range(n):
        sink(inc(inc(inc(inc(inc(inc(inc(inc(inc(inc(x)))))))))))


# (c) ---------------------------------------------------------------------------
def build_c(S: Any, sink: Sink) -> Any:
    source = S()
    source.sliding_window(10).sink(sink)
    return source


def plain_c(n: int, sink: Sink) -> None:
    window: deque[int] = deque(maxlen=10)
    for x in range(n):
        window.append(x)
        sink(tuple(window))


# (d) ---------------------------------------------------------------------------
def build_d(S: Any, sink: Sink) -> Any:
    source = S()
    source.partition(100).sink(sink)
    return source


def plain_d(n: int, sink: Sink) -> None:
    buf: list[int] = []
    for x in range(n):
        buf.append(x)
        if len(buf) == 100:
            sink(tuple(buf))
            buf = []


# (e) ---------------------------------------------------------------------------
def build_e(S: Any, sink: Sink) -> Any:
    source = S()
    left = source.map(inc)
    right = source.map(dec)
    left.zip(right).sink(sink)
    return source


def plain_e(n: int, sink: Sink) -> None:
    for x in range(n):
        sink((inc(x), dec(x)))


# (f) ---------------------------------------------------------------------------
def build_f(S: Any, sink: Sink) -> Any:
    source = S()
    left = source.map(inc)
    right = source.map(dec)
    left.union(right).sink(sink)
    return source


def plain_f(n: int, sink: Sink) -> None:
    for x in range(n):
        sink(inc(x))
        sink(dec(x))


VARIANTS = [
    Variant(
        "a",
        "map.filter.accumulate.sink",
        build_a,
        plain_a,
        ("map", "filter", "accumulate", "sink"),
    ),
    Variant("b", "10 x map", build_b, plain_b, ("map", "sink")),
    Variant("c", "sliding_window(10)", build_c, plain_c, ("sliding_window", "sink")),
    Variant("d", "partition(100)", build_d, plain_d, ("partition", "sink")),
    Variant("e", "zip of 2 branches", build_e, plain_e, ("map", "zip", "sink")),
    Variant("f", "union of 2 branches", build_f, plain_f, ("map", "union", "sink")),
]
