"""Property tests: random linear pipelines against a plain-Python model.

Each pipeline is a chain of map/filter/accumulate/sliding_window/partition/
flatten/pluck/unique over integers.  The model computes the expected output
with ordinary list code.  The same pipelines check completion tracking
(every reference is released at most once, and every record not parked in
a window has completed) and checkpoint state (cut the input anywhere, move
the state into a freshly built pipeline, and the output is unchanged).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rivermark import RefCounter, Stream

Op = tuple[Any, ...]


def _add(a: int, x: int) -> int:
    return (a + x) % 1009


def _pair(x: int) -> tuple[int, int]:
    return (x, x * 3 % 101)


MAPS: dict[str, Callable[[int], int]] = {
    "inc": lambda x: x + 1,
    "dbl": lambda x: x * 2 % 997,
    "mod": lambda x: x % 7,
}
PREDS: dict[str, Callable[[int], bool]] = {
    "even": lambda x: x % 2 == 0,
    "big": lambda x: x > 3,
}

ops = st.one_of(
    st.tuples(st.just("map"), st.sampled_from(sorted(MAPS))),
    st.tuples(st.just("filter"), st.sampled_from(sorted(PREDS))),
    st.tuples(st.just("accumulate"), st.booleans()),
    st.tuples(st.just("sliding_window"), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("partition"), st.integers(1, 4)),
    st.tuples(st.just("flatten"), st.integers(0, 3)),
    st.tuples(st.just("pluck"), st.sampled_from([0, 1, "both"])),
    st.tuples(st.just("unique"), st.sampled_from([None, 1, 3])),
)
pipelines = st.lists(ops, min_size=1, max_size=6)
inputs = st.lists(st.integers(-20, 50), max_size=40)


# ---------------------------------------------------------------------- model
def model(pipeline: list[Op], data: list[int]) -> list[int]:
    xs = list(data)
    for op in pipeline:
        kind = op[0]
        if kind == "map":
            xs = [MAPS[op[1]](x) for x in xs]
        elif kind == "filter":
            xs = [x for x in xs if PREDS[op[1]](x)]
        elif kind == "accumulate":
            out, acc, first = [], 0, not op[1]
            for x in xs:
                if first:  # no start: the first record is the state
                    acc, first = x, False
                else:
                    acc = _add(acc, x)
                out.append(acc)
            xs = out
        elif kind == "sliding_window":
            n, partial = op[1], op[2]
            out = []
            for i in range(len(xs)):
                if partial or i + 1 >= n:
                    out.append(sum(xs[max(0, i + 1 - n) : i + 1]))
            xs = out
        elif kind == "partition":
            n = op[1]
            xs = [sum(xs[i : i + n]) for i in range(0, len(xs) - len(xs) % n, n)]
        elif kind == "flatten":
            xs = [x + k for x in xs for k in range(op[1])]
        elif kind == "pluck":
            pairs = [_pair(x) for x in xs]
            xs = [a + b for a, b in pairs] if op[1] == "both" else [p[op[1]] for p in pairs]
        elif kind == "unique":
            size, out, seen = op[1], [], []  # seen: most recent first
            for x in xs:
                if x in seen:
                    seen.remove(x)
                    seen.insert(0, x)
                    continue
                seen.insert(0, x)
                if size:
                    del seen[size:]
                out.append(x)
            xs = out
    return xs


# ---------------------------------------------------------------------- rivermark
def build(pipeline: list[Op]) -> tuple[Stream, list[Stream], list[Any]]:
    source = Stream()
    s = source
    for op in pipeline:
        kind = op[0]
        if kind == "map":
            s = s.map(MAPS[op[1]])
        elif kind == "filter":
            s = s.filter(PREDS[op[1]])
        elif kind == "accumulate":
            s = s.accumulate(_add, start=0) if op[1] else s.accumulate(_add)
        elif kind == "sliding_window":
            s = s.sliding_window(op[1], return_partial=op[2]).map(sum)
        elif kind == "partition":
            s = s.partition(op[1]).map(sum)
        elif kind == "flatten":
            k = op[1]
            s = s.map(lambda x, k=k: [x + i for i in range(k)]).flatten()
        elif kind == "pluck":
            s = s.map(_pair)
            s = s.pluck([0, 1]).map(sum) if op[1] == "both" else s.pluck(op[1])
        elif kind == "unique":
            s = s.unique(maxsize=op[1])
    nodes: list[Stream] = []
    n = source
    while n.downstreams:
        n = n.downstreams[0]
        nodes.append(n)
    return source, nodes, s.sink_to_list()


class StrictRef(RefCounter):
    def __init__(self) -> None:
        super().__init__(callback=self._fire)
        self.fired = 0
        self.late = 0

    def _fire(self) -> None:
        self.fired += 1

    def release(self, n: int = 1) -> None:
        if self.done:
            self.late += 1
        super().release(n)


@settings(max_examples=150, deadline=None)
@given(pipelines, inputs)
def test_pipeline_matches_model(pipeline: list[Op], data: list[int]) -> None:
    source, _, out = build(pipeline)
    for x in data:
        source.emit(x)
    assert out == model(pipeline, data)


@settings(max_examples=150, deadline=None)
@given(pipelines, inputs)
def test_completion_tracking_in_pipelines(pipeline: list[Op], data: list[int]) -> None:
    source, _, out = build(pipeline)
    refs = []
    for x in data:
        ref = StrictRef()
        ref.retain()
        source.emit(x, metadata=[{"ref": ref}])
        ref.release()
        refs.append(ref)
    assert out == model(pipeline, data)
    assert all(r.late == 0 and r.fired <= 1 for r in refs)
    # only records parked in a window may still be pending: a window of n holds at
    # most n items, each carrying the references of up to `width` input records
    capacity, width = 0, 1
    for op in pipeline:
        if op[0] in ("partition", "sliding_window"):
            capacity += op[1] * width
            width *= op[1]
    assert sum(1 for r in refs if not r.fired) <= capacity


@settings(max_examples=150, deadline=None)
@given(pipelines, inputs, st.data())
def test_state_round_trip_in_pipelines(pipeline: list[Op], data: list[int], d: Any) -> None:
    cut = d.draw(st.integers(0, len(data)))
    s1, nodes1, out1 = build(pipeline)
    for x in data[:cut]:
        s1.emit(x)
    states = pickle.loads(pickle.dumps([n.get_state() for n in nodes1]))
    s2, nodes2, out2 = build(pipeline)
    assert [n.state_signature() for n in nodes1] == [n.state_signature() for n in nodes2]
    for n, st_ in zip(nodes2, states, strict=True):
        if n.is_stateful:
            n.set_state(st_)
    for x in data[cut:]:
        s2.emit(x)
    assert out1 + out2 == model(pipeline, data)
