"""Generated code reaches a node only through the fields its class declares."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

import pytest

from rivermark import Stream
from rivermark.fastpath.codegen import Codegen


def _graphs() -> list[Stream]:
    a = Stream()
    a.map(lambda x: x + 1).filter(lambda x: x % 2).accumulate(lambda s, x: s + x).sink(print)
    b = Stream()
    b.remove(lambda x: x > 3).map(lambda x: (x, x)).pluck(0).sink_to_list()
    c = Stream()
    c.partition(3).sliding_window(2).sink(print)
    d = Stream()
    d.map(lambda x: x).zip(d.map(lambda x: -x)).union(d.map(lambda x: (x, x))).sink_to_list()
    e = Stream.from_iterable([])
    e.accumulate(lambda s, x: (s, x), start=0, returns_state=True).partition(2).sink_to_list()
    return [a, b, c, d, e]


def _node_attributes(fn: Callable[..., Any]) -> list[tuple[Stream, str]]:
    tree = ast.parse(fn._rivermark_source)  # type: ignore[attr-defined]
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = fn.__globals__.get(node.value.id)
            if isinstance(target, Stream) and node.value.id != "_self":
                used.append((target, node.attr))
    return used


@pytest.mark.parametrize("index", range(5))
def test_generated_code_uses_only_declared_fields(index: int) -> None:
    root = _graphs()[index]
    fns = [root.record_loop()]
    if type(root) is Stream:
        fns.append(root.emit)
    for fn in fns:
        used = _node_attributes(fn)
        assert used, "the graph was written out"
        # records_out is every node's one counter (rivermark.core.counting), which
        # generated code increments for the metrics
        undeclared = [
            (type(n).__name__, a)
            for n, a in used
            if a not in type(n)._kernel_fields | {"records_out"}
        ]
        assert undeclared == []


def test_a_kernel_reaching_an_undeclared_field_is_refused() -> None:
    node = Stream().map(lambda x: x)
    with pytest.raises(
        TypeError, match=re.escape("kernel for Map uses '_args', which the class does not declare")
    ):
        Codegen().field(node, "_args")
