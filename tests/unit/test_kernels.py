"""Generated code reaches a node only through the fields its class declares.

The same holds for a node's own ``update`` where the class derives it from
its kernel: one definition of the per-record step, two compiled forms.
"""

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


def _declared(node: Stream) -> set[str]:
    cls = type(node)
    return set(cls._kernel_fields) | set(cls._state_attrs)


def _node_attributes(fn: Callable[..., Any]) -> list[tuple[Stream, str]]:
    tree = ast.parse(fn.rivermark_source)  # type: ignore[attr-defined]
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
        undeclared = [(type(n).__name__, a) for n, a in used if a not in _declared(n)]
        assert undeclared == []


def test_a_kernel_reaching_an_undeclared_field_is_refused() -> None:
    node = Stream().map(lambda x: x)
    with pytest.raises(
        TypeError, match=re.escape("kernel for Map uses '_args', which the class does not declare")
    ):
        Codegen().field(node, "_args")
    with pytest.raises(TypeError, match=re.escape("kernel for Map uses '_args'")):
        Codegen(node=node).field(node, "_args")


def _derived_nodes() -> list[Stream]:
    s = Stream()
    t = Stream()
    return [
        s.map(lambda x, k: x + k, 1),
        s.map(lambda x, k=0: x + k, k=1),
        s.starmap(lambda a, b: a + b),
        s.filter(None),
        s.remove(lambda x, k: x > k, 1),
        s.pluck(0),
        s.pluck([0, 1]),
        s.accumulate(lambda a, x: a + x),
        s.accumulate(lambda a, x, k: (a, x), start=0, returns_state=True, with_state=True, k=1),
        s.sink(print),
        _sink_to_list_node(s),
        s.union(t),
        s.partition(3),
        s.sliding_window(2),
        s.sliding_window(3, return_partial=False),
        s.zip(t),
        Stream(upstream=s),  # the base node: passes records on
    ]


def _sink_to_list_node(s: Stream) -> Stream:
    s.sink_to_list()
    return s.downstreams[-1]


@pytest.mark.parametrize("index", range(17))
def test_a_nodes_own_update_is_its_kernel_using_only_declared_fields(index: int) -> None:
    node = _derived_nodes()[index]
    update = node.update
    source = update.__func__.rivermark_source
    assert source.startswith("def update(self, x, who=None, metadata=None):")
    used = {
        n.attr
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }
    # ``_emit`` passes a record on (Codegen.push_down): the node's push, counting included
    assert used - {"_emit"} <= _declared(node)
    # compiled once per node: later look-ups find the same function
    assert node.update is update


def test_a_configuration_without_a_kernel_has_the_general_method_as_its_update() -> None:
    # partition with a key, zip with literals: the method is the update, no call between
    node = Stream().partition(2, key=len)
    assert node.update.__func__ is type(node)._update_general
    s = Stream()
    zipped = s.zip(Stream(), "literal")
    assert zipped.update.__func__ is type(zipped)._update_general


def test_a_subclass_with_its_own_update_keeps_it_and_reaches_the_derived_one() -> None:
    from rivermark.operators.transform import Map

    class Twice(Map):
        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            super().update(x, who, metadata)
            return Map.update(self, x, who, metadata)  # called on the class

    s = Stream()
    out = Twice(s, lambda x: x + 1).sink_to_list()
    s.emit(1)
    s.emit(2)
    assert out == [2, 2, 3, 3]


def test_an_operator_written_as_a_kernel_alone_runs_the_same_on_every_path() -> None:
    # the example of docs/architecture.md, "How to add an operator"
    from rivermark.fastpath.codegen import derived_update

    from .helpers import node_by_node

    def _clip_kernel(cg: Codegen, node: Any, who: Any, x: str) -> bool:
        hi = cg.read(node, "hi")
        y = cg.value(f"{x} if {x} < {hi} else {hi}")
        cg.push_down(node, y)
        return True

    class Clip(Stream):
        _kernel_fields = frozenset({"hi"})
        update = derived_update(_clip_kernel)

        def __init__(self, upstream: Stream, hi: int) -> None:
            self.hi = hi
            Stream.__init__(self, upstream)

    def run(path: str) -> list[Any]:
        s = Stream()
        clip = Clip(s, 3)
        out = clip.map(lambda v: v * 10).sink_to_list()
        for i, x in enumerate([1, 5, 2, 9, 4]):
            if i == 3:
                clip.hi = 4  # live configuration: from the next record on
            if path == "loop":
                assert s.record_loop()(iter([x])) is None
            else:
                s.emit(x)
        if path == "loop":  # written out in the generated loop, not called
            src = s.record_loop().rivermark_source  # type: ignore[attr-defined]
            assert re.search(r" = _node\d+\.hi\n", src)
        return out

    with node_by_node():
        expected = run("update")
    assert expected == [10, 30, 20, 40, 40]
    assert run("emit") == expected
    assert run("loop") == expected


def test_a_kernel_cannot_hand_its_own_node_a_record_in_the_nodes_update() -> None:
    # the node's update is the function being written: every case is written
    # out in the kernel or handed to a declared method
    source = Stream()
    node = source.map(lambda x: x)
    cg = Codegen(node=node)
    with pytest.raises(TypeError, match="hands the record to the node's own update"):
        cg.fallback(node, source, "x")
    with pytest.raises(TypeError, match="kernel for Map uses '_undeclared'"):
        cg.delegate(node, "_undeclared")
