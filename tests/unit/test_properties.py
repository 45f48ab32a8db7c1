"""Property tests: random linear pipelines against a plain-Python model, random graphs across paths.

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

from rivermark import Stream
from rivermark.execution import graphcode as codegen
from rivermark.testing import examples

from .helpers import StrictRef, node_by_node

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
    st.tuples(st.just("pairwise")),
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
        elif kind == "pairwise":
            xs = [a * 7 + b for a, b in zip(xs, xs[1:])]
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
        elif kind == "pairwise":
            s = s.pairwise().starmap(lambda a, b: a * 7 + b)
    nodes: list[Stream] = []
    n = source
    while n.downstreams:
        n = n.downstreams[0]
        nodes.append(n)
    return source, nodes, s.sink_to_list()


@settings(max_examples=examples(150), deadline=None)
@given(pipelines, inputs)
def test_pipeline_matches_model(pipeline: list[Op], data: list[int]) -> None:
    source, _, out = build(pipeline)
    for x in data:
        source.emit(x)
    assert out == model(pipeline, data)


@settings(max_examples=examples(150), deadline=None)
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
        elif op[0] == "pairwise":
            capacity += width
            width *= 2
    assert sum(1 for r in refs if not r.fired) <= capacity


@settings(max_examples=examples(150), deadline=None)
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


# ---------------------------------------------------------------------- random graphs
# Random DAGs (fan-out, zip, union, windows, error policies, tracked records)
# run through the generated ``emit`` and through the node-by-node path (no
# generated code, no fusers): outputs, raised errors, every node's state and
# error count, and the completion of every tracked record must be the same
# after every emit, also after a graph change and after a restore.


def _num(v: Any) -> int:
    if isinstance(v, tuple):
        return sum(_num(x) for x in v)
    return int(v)


def _gacc(a: int, v: Any) -> int:
    n = _num(v)
    if n % 11 == 10:
        raise ValueError(n)
    return (a + n) % 1009


def _gacc_pair(a: int, v: Any) -> tuple[int, Any]:
    return _gacc(a, v), (a, _num(v))


def _gstar(*vs: Any) -> int:
    return _num(vs) + 1


def _gsink(out: list[Any]) -> Callable[[Any], None]:
    def sink(v: Any) -> None:
        if _num(v) % 13 == 12:
            raise ValueError(v)
        out.append(v)

    return sink


GMAPS: dict[str, Callable[[Any], Any]] = {
    "inc": lambda v: _num(v) + 1,
    "tri": lambda v: _num(v) * 3 % 101,
    "div": lambda v: 60 // (_num(v) % 5),  # raises on multiples of 5
}
GPREDS: dict[str, Callable[[Any], Any]] = {
    "even": lambda v: _num(v) % 2 == 0,
    "div": lambda v: 60 // (_num(v) % 7) > 4,  # raises on multiples of 7
}

_parent = st.integers(0, 1000)
_policy = st.sampled_from([None, "skip", "raise", "dlq"])
graph_ops = st.lists(
    st.one_of(
        st.tuples(st.just("map"), st.sampled_from(sorted(GMAPS)), _parent, _policy),
        st.tuples(
            st.just("filter"), st.sampled_from(sorted(GPREDS)), _parent, _policy, st.booleans()
        ),
        st.tuples(
            st.just("accumulate"),
            st.booleans(),
            _parent,
            _policy,
            st.sampled_from(["plain", "returns_state", "with_state"]),
        ),
        st.tuples(st.just("starmap"), _parent, _policy),
        st.tuples(st.just("sliding_window"), st.integers(1, 3), st.booleans(), _parent),
        st.tuples(st.just("partition"), st.integers(1, 3), _parent),
        st.tuples(st.just("zip"), _parent, _parent, st.integers(1, 3)),
        st.tuples(st.just("union"), _parent, _parent),
        st.tuples(st.just("pluck"), _parent, _policy, st.booleans()),
        st.tuples(st.just("flatten"), _parent, _policy),
        st.tuples(st.just("pairwise"), _parent),
        st.tuples(st.just("sink"), _parent, _policy),
    ),
    min_size=1,
    max_size=8,
)
#: (value, tracked, into the second source)
graph_inputs = st.lists(st.tuples(st.integers(-10, 40), st.booleans(), st.booleans()), max_size=30)


async def _aid(x: Any) -> Any:
    return x


#: configuration assigned after the first record: (at record, node index, value index)
Reconfig = tuple[int, int, int]


def _reconfigure(node: Stream, k: int) -> None:
    """Replace one piece of ``node``'s live configuration (a no-op for other nodes)."""
    kind = type(node).__name__
    if kind in ("Map", "Starmap", "Accumulate") and getattr(node, "func", None) is not None:
        if kind in ("Map", "Starmap"):
            node.func = GMAPS[sorted(GMAPS)[k % len(GMAPS)]]  # type: ignore[attr-defined]
        else:
            node.func = lambda a, v: (a * 2 + _num(v)) % 1009  # type: ignore[attr-defined]
    elif kind in ("Filter", "Remove"):
        node.predicate = GPREDS[sorted(GPREDS)[k % len(GPREDS)]]  # type: ignore[attr-defined]
    elif kind == "Partition":
        node.n = 1 + k % 3  # type: ignore[attr-defined]
    elif kind == "Zip":
        node.maxsize = 1 + k % 3  # type: ignore[attr-defined]


def run_graph(
    ops: list[Op],
    root_policy: Any,
    data: list[tuple[int, bool, bool]],
    change: tuple[int, int] | None = None,
    states: list[Any] | None = None,
    mode: str = "emit",
    reconfig: Reconfig | None = None,
) -> tuple[list[Any], list[Any]]:
    """Build the graph, emit ``data``; return per-emit observations and the final outputs.

    ``mode``: ``"emit"`` calls each source's ``emit``; ``"loop"`` passes the
    untracked records through the source's record loop (the path sources take,
    one record per call here so that every step can be observed); ``"async"``
    puts an asynchronous identity node (``map_async``) right after each source,
    which makes the whole graph run on the event loop.
    """
    dlq: list[Any] = []
    outs: list[list[Any]] = []

    def policy(p: Any) -> Any:
        if p == "dlq":
            return lambda rec, exc: dlq.append((rec, type(exc).__name__))
        return p

    source = Stream(on_error=policy(root_policy))
    source2 = Stream(on_error=policy(root_policy))
    if mode == "async":
        heads = [source.map_async(_aid), source2.map_async(_aid)]
    else:
        heads = [source, source2]
    nodes: list[Stream] = list(heads)
    for op in ops:
        kind = op[0]
        pick = lambda i: nodes[i % len(nodes)]  # noqa: E731
        if kind == "map":
            node = pick(op[2]).map(GMAPS[op[1]], on_error=policy(op[3]))
        elif kind == "filter":
            up = pick(op[2])
            make = up.remove if op[4] else up.filter
            node = make(GPREDS[op[1]], on_error=policy(op[3]))
        elif kind == "accumulate":
            kw: dict[str, Any] = {"start": 0} if op[1] else {}
            if op[4] == "returns_state":
                node = pick(op[2]).accumulate(
                    _gacc_pair, on_error=policy(op[3]), returns_state=True, **kw
                )
            else:
                kw["with_state"] = op[4] == "with_state"
                node = pick(op[2]).accumulate(_gacc, on_error=policy(op[3]), **kw)
        elif kind == "starmap":  # an int record raises (not iterable): the error policy
            node = pick(op[1]).starmap(_gstar, on_error=policy(op[2]))
        elif kind == "sliding_window":
            node = pick(op[3]).sliding_window(op[1], return_partial=op[2])
        elif kind == "partition":
            node = pick(op[2]).partition(op[1])
        elif kind == "zip":
            node = pick(op[1]).zip(pick(op[2]), maxsize=op[3])
        elif kind == "union":
            node = pick(op[1]).union(pick(op[2]))
        elif kind == "pluck":
            node = pick(op[1]).pluck([0] if op[3] else 0, on_error=policy(op[2]))
        elif kind == "flatten":
            node = pick(op[1]).flatten(on_error=policy(op[2]))
        elif kind == "pairwise":
            node = pick(op[1]).pairwise()
        else:
            out: list[Any] = []
            outs.append(out)
            node = pick(op[1]).sink(_gsink(out), on_error=policy(op[2]))
        nodes.append(node)
    for n in list(nodes):
        if not n.downstreams and type(n).__name__ != "Sink":
            outs.append(n.sink_to_list())
    emits = (source.emit, source2.emit)
    if mode != "async":
        assert all(hasattr(e, "rivermark_source") is codegen.ENABLED for e in emits)
    if states is not None:  # a restore, after the emit function was taken
        for n, state in zip(nodes, states, strict=True):
            if n.is_stateful:
                n.set_state(state)
    steps: list[Any] = []
    refs: list[StrictRef] = []
    for i, (x, tracked, second) in enumerate(data):
        emit = emits[second]
        if change is not None and i == change[0]:
            outs.append(nodes[change[1] % len(nodes)].sink_to_list())
        if reconfig is not None and i == reconfig[0]:
            _reconfigure(nodes[reconfig[1] % len(nodes)], reconfig[2])
        try:
            if mode == "loop" and not tracked:
                run = (source, source2)[second].record_loop()
                assert hasattr(run, "rivermark_source") is codegen.ENABLED
                assert run(iter([x])) is None
            elif tracked:
                ref = StrictRef()
                refs.append(ref)
                ref.retain()
                try:
                    emit(x, metadata=[{"ref": ref}])
                finally:
                    ref.release()
            else:
                emit(x)
            raised = None
        except Exception as e:  # a user function's own exception, with its context
            raised = f"{type(e).__name__}: {e} {getattr(e, '__notes__', None)}"
        snapshot = pickle.loads(pickle.dumps([n.get_state() for n in nodes]))
        done = [(r.fired, r.late) for r in refs]  # which tracked records completed so far
        steps.append((raised, snapshot, [n.error_count for n in nodes], done, list(dlq)))
    return steps, [list(o) for o in outs]


@settings(max_examples=examples(150), deadline=None)
@given(graph_ops, st.sampled_from([None, "skip", "dlq"]), graph_inputs, st.data())
def test_all_paths_agree_with_config_changes_after_the_first_record(
    ops: list[Op], root_policy: Any, data: list[tuple[int, bool, bool]], d: Any
) -> None:
    """Node by node, generated emit, the sources' generated loop, and an asynchronous graph.

    Outputs, raised errors, every node's state and error count and every
    tracked record's completion after every record agree, also when a live
    configuration value (a map's or accumulate's ``func``, a filter's
    ``predicate``, a partition's ``n``, a zip's ``maxsize``) is replaced after
    the first record.
    """
    change = d.draw(st.none() | st.tuples(st.integers(0, 30), _parent))
    reconfig = d.draw(st.none() | st.tuples(st.integers(1, 30), _parent, st.integers(0, 5)))
    with node_by_node():
        expected = run_graph(ops, root_policy, data, change, reconfig=reconfig)
    for mode in ("emit", "loop"):
        assert run_graph(ops, root_policy, data, change, mode=mode, reconfig=reconfig) == expected
    # in an asynchronous graph a raised error fails the node for good (background
    # work, nobody to raise to), and a full zip buffer makes the emit wait for the
    # other side (backpressure) instead of growing: compared where every error is
    # skipped or sent aside, without zip
    if root_policy is not None and not any("raise" in op or op[0] == "zip" for op in ops):
        got_async = run_graph(ops, root_policy, data, change, mode="async", reconfig=reconfig)
        assert got_async == expected


@settings(max_examples=examples(150), deadline=None)
@given(graph_ops, st.sampled_from([None, "skip", "dlq"]), graph_inputs, st.data())
def test_generated_emit_matches_node_by_node(
    ops: list[Op], root_policy: Any, data: list[tuple[int, bool, bool]], d: Any
) -> None:
    change = d.draw(st.none() | st.tuples(st.integers(0, 30), _parent))
    with node_by_node():
        expected = run_graph(ops, root_policy, data, change)
    assert run_graph(ops, root_policy, data, change) == expected
    # restore the states at a cut into fresh graphs: both paths go on alike
    cut = d.draw(st.integers(0, len(data)))
    if cut:
        states = expected[0][cut - 1][1]
        with node_by_node():
            expected2 = run_graph(ops, root_policy, data[cut:], None, states)
        assert run_graph(ops, root_policy, data[cut:], None, states) == expected2
