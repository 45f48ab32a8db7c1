"""An operator's per-record step is its ``update``: what generated graphs and the node path derive.

Each written-out node's code in a generated graph, and each node's
specialised update, is made from the class's own ``update`` method (a
:func:`rivermark.execution.step`): these tests look at what is derived and
check that it behaves as the method itself does.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from rivermark import Stream
from rivermark.execution import graph_fact, step
from rivermark.execution.plan import plan_of
from rivermark.execution.steps import step_of

from .helpers import node_by_node


def _loop_source(root: Stream) -> str:
    return root.record_loop().rivermark_source  # type: ignore[attr-defined]


def _update_source(node: Stream) -> str:
    update = plan_of(node).update_of(node)
    return update.__func__.rivermark_source  # type: ignore[attr-defined]


def test_every_common_operator_is_a_step() -> None:
    s, t = Stream(), Stream()
    nodes = [
        s.map(abs),
        s.starmap(max),
        s.filter(None),
        s.remove(bool),
        s.pluck(0),
        s.accumulate(max),
        s.sink(print),
        s.union(t),
        s.partition(3),
        s.sliding_window(2),
        s.zip(t),
        Stream(upstream=s),
    ]
    assert [type(n).__name__ for n in nodes if step_of(type(n).update) is None] == []


def test_a_graph_writes_the_steps_out_in_place() -> None:
    s = Stream()
    s.map(lambda x: x + 1).filter(lambda x: x % 2).accumulate(lambda a, x: a + x).sink(print)
    src = _loop_source(s)
    # each node's step is in the loop: its user function is held there (assigning
    # one rebuilds the loop) and called; the state is read from the node
    for attr in ("func", "predicate"):
        assert re.search(rf"= _{attr}\d+\n", src), attr
    assert re.search(r"= _node\d+\.state\n", src)
    # no node's update is called for an untracked record (only the first
    # record of an accumulate without start passes on node by node)
    assert "_update" not in src
    assert src.count("._emit(") == 2  # the loop's retired path, and that first record


def test_fixed_configuration_is_folded_into_the_specialised_update() -> None:
    s = Stream()
    plain = s.map(lambda x: x)
    with_args = s.map(lambda x, k, j=0: x + k + j, 1, j=2)
    assert "func(x)" in _update_source(plain)
    assert "func(x, 1, j=2)" in _update_source(with_args)
    assert "*" not in _update_source(plain)
    # and in a graph
    assert "func_1(x)\n" in _loop_source(s).replace(" ", " ")


def test_static_branches_keep_one_side() -> None:
    s = Stream()
    s.filter(bool).sink_to_list()
    s.remove(bool).sink_to_list()
    src = _loop_source(s)
    # the configuration is folded away: one test of the predicate's answer each
    assert "_invert" not in src and src.count("keep_") == 2 * 2
    assert s.record_loop()(iter([0, 1, 2])) is None
    assert s.downstreams[0].downstreams[0].L == [1, 2]  # filter
    assert s.downstreams[1].downstreams[0].L == [0]  # remove


def test_a_subclass_with_its_own_update_is_called_and_reaches_the_step() -> None:
    from rivermark.operators.transform import Map

    class Twice(Map):
        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            super().update(x, who, metadata)
            return Map.update(self, x, who, metadata)  # called on the class

    s = Stream()
    twice = Twice(s, lambda x: x + 1)
    out = twice.sink_to_list()
    s.emit(1)
    s.emit(2)
    assert out == [2, 2, 3, 3]
    assert re.search(r"_update\d+\(x, _who\d+, None\)", s.emit.rivermark_source)  # type: ignore[attr-defined]


def test_an_update_set_on_the_instance_is_called() -> None:
    s = Stream()
    node = s.map(lambda x: x)
    out = node.sink_to_list()
    node.update = lambda x, who=None, metadata=None: node._emit(-x, metadata)  # type: ignore[method-assign]
    s.emit(3)
    assert out == [-3]


class Clip(Stream):
    """The example of docs/architecture.md, "How to add an operator"."""

    def __init__(self, upstream: Stream, hi: int) -> None:
        self.hi = hi
        Stream.__init__(self, upstream)

    @step
    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        hi = self.hi
        return self._emit(x if x < hi else hi, metadata)


@pytest.mark.parametrize("path", ["update", "emit", "loop"])
def test_an_operator_written_as_a_step_runs_the_same_on_every_path(path: str) -> None:
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
            assert re.search(r"hi_\d+ = _node\d+\.hi\n", _loop_source(s))
        return out

    with node_by_node():
        expected = run("update")
    assert expected == [10, 30, 20, 40, 40]
    if path != "update":
        assert run(path) == expected


def test_a_step_is_checked_when_its_class_is_made() -> None:
    with pytest.raises(TypeError, match=r"Bad\.update .*: a step may not use Lambda"):

        class Bad(Stream):
            @step
            def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
                return self._emit((lambda v: v)(x), metadata)

    with pytest.raises(TypeError, match=r"may not use ListComp \(define a helper"):

        class Bad2(Stream):
            @step
            def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
                return self._emit([v for v in x], metadata)

    with pytest.raises(TypeError, match=r"may not assign its parameter 'x'"):

        class Bad3(Stream):
            @step
            def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
                x = x + 1
                return self._emit(x, metadata)

    with pytest.raises(TypeError, match=re.escape("must be (self, x, who=None, metadata=None)")):

        class Bad4(Stream):
            @step
            def update(self, x: Any) -> Any:  # type: ignore[override]
                return self._emit(x)


class EveryOther(Stream):
    """A step with a ``return`` inside a loop: called in graphs, not written out."""

    def __init__(self, upstream: Stream) -> None:
        self.seen = 0
        Stream.__init__(self, upstream)

    @step
    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        for _ in range(1):
            self.seen += 1
            if self.seen % 2:
                return self._emit(x, metadata)
        return None


def test_a_step_that_cannot_be_placed_is_called_with_the_same_result() -> None:
    s = Stream()
    out = EveryOther(s).map(lambda x: -x).sink_to_list()
    assert "_update" in _loop_source(s)
    assert s.record_loop()(iter(range(6))) is None
    assert out == [0, -2, -4]


class Sides(Stream):
    """A step that asks the graph's shape which upstream a record comes from."""

    def __init__(self, *ups: Stream) -> None:
        self.asked = 0
        Stream.__init__(self, upstreams=list(ups))

    @graph_fact
    def side(self, who: Any) -> int:
        self.asked += 1
        return self.upstreams.index(who)

    @step
    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        side = self.side(who)
        for i in (0, 1):
            if i == side:
                return self._emit((i, x), metadata)
        return None


def test_graph_facts_are_answered_once_and_known_loops_unrolled() -> None:
    a = Stream()
    b = a.map(lambda x: x * 10)
    node = Sides(a, b)
    out = node.sink_to_list()
    run = a.record_loop()
    assert node.asked == 2  # once per upstream, while the code was written
    src = _loop_source(a)
    assert "for " not in src.split("for x in records:", 1)[1]  # unrolled
    assert run(iter([1, 2])) is None
    assert node.asked == 2
    with node_by_node():
        c = Stream()
        out2 = Sides(c, c.map(lambda x: x * 10)).sink_to_list()
        c.emit(1)
        c.emit(2)
    assert out == out2 == [(1, 10), (0, 1), (1, 20), (0, 2)]  # the map is c's first downstream


def test_one_definition_handles_tracked_and_untracked_records() -> None:
    # partition, sliding_window and zip keep tracked records in the same step
    # that a graph writes out for untracked ones
    from rivermark.operators.joins import Zip
    from rivermark.operators.windows import Partition, SlidingWindow

    for cls in (Partition, SlidingWindow, Zip):
        assert step_of(cls.update) is not None
        for name in ("_update_general", "_update_tracked", "_flush_now"):
            assert not hasattr(cls, name), (cls, name)


class LastOfTwo(Stream):
    """A step that reads its loop variable after an unrolled loop."""

    @step
    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        total = 0
        for i in (1, 2):
            total += i * x
        return self._emit((total, i), metadata)


def test_a_loop_variable_keeps_its_last_value_after_an_unrolled_loop() -> None:
    s = Stream()
    out = LastOfTwo(s).sink_to_list()
    assert s.record_loop()(iter([1, 10])) is None
    assert out == [(3, 2), (30, 2)]
    assert "for " not in _loop_source(s).split("for x in records:", 1)[1]


def test_planned_attributes_are_held_by_the_loop_and_assigning_one_rebuilds_it() -> None:
    s = Stream()
    part = s.partition(3)
    z = s.map(lambda x: x + 1).zip(s.map(lambda x: -x), maxsize=4)
    grouped, pairs = part.sink_to_list(), z.sink_to_list()
    src = _loop_source(s)
    # n, maxsize and the buffers are constants of the loop: no look-up on the node
    assert "< 3:" in src and "> 4:" in src
    assert not re.search(r"_node\d+\.(n|maxsize|_buffers?|_waiters|func)\b", src)
    seen: list[int] = []

    def reconfigure(x: int) -> None:
        seen.append(x)
        if x == 4:  # while the loop runs: the next record sees the new values
            part.n = 2
            z.upstreams[0].func = lambda x: x * 10

    s.sink(reconfigure)
    run = s.record_loop()
    assert run(iter(range(8))) is None
    assert seen == list(range(8))
    assert grouped == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert pairs == [(1, 0), (2, -1), (3, -2), (4, -3), (5, -4), (50, -5), (60, -6), (70, -7)]
    rebuilt = _loop_source(s)
    assert "< 2:" in rebuilt and rebuilt != src


def test_no_planned_or_fixed_attribute_hides_a_chaining_method() -> None:
    # a node attribute named like a registered operator (``partition(3).buffer``)
    # would hide the method: ``s.partition(3).buffer(5)`` must still chain
    import rivermark.dask  # noqa: F401  (registers the scattered operators)
    from rivermark.execution.fixed import Fixed

    api = {n for n in dir(Stream) if not n.startswith("_") and callable(getattr(Stream, n))}
    clashes = []
    for cls in _all_subclasses(Stream):
        for name, value in vars(cls).items():
            if isinstance(value, Fixed) and name in api:
                clashes.append(f"{cls.__qualname__}.{name}")
    assert clashes == []
    s = Stream()
    out = s.partition(3).buffer(5).sink_to_list()
    for i in range(7):
        s.emit(i)
    assert out == [(0, 1, 2), (3, 4, 5)]


def _all_subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    todo = [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_every_step_of_rivermark_parses() -> None:
    # rivermark's own steps are parsed when a graph first needs one: here, all of them
    import importlib
    import pkgutil

    import rivermark
    from rivermark.execution.steps import StepInfo

    for mod in pkgutil.walk_packages(rivermark.__path__, "rivermark."):
        importlib.import_module(mod.name)
    seen, todo = set(), [Stream]
    while todo:
        cls = todo.pop()
        todo.extend(c for c in cls.__subclasses__() if c not in seen)
        seen.add(cls)
    steps = [c for c in seen if c.__module__.startswith("rivermark.") and "update" in c.__dict__]
    parsed = [c for c in steps if hasattr(c.__dict__["update"], "__rivermark_step__")]
    assert len(parsed) >= 15, sorted(c.__qualname__ for c in parsed)
    for cls in parsed:
        assert isinstance(step_of(cls.__dict__["update"]), StepInfo), cls
