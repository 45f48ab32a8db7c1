"""Prototypes: collapse runs of ``map`` nodes; a cheaper synchronous ``emit``.

Run:  .venv/bin/python benchmarks/proto_fusion.py [-n 1000000]

1. Chain fusion.

Today (``rivermark.operators.fused``) every fused ``Map`` is its own closure
that calls the user function and then the next closure, so a chain of k maps
costs 2k Python calls per record.  This prototype registers, for this process
only, a ``Map`` fuser that walks down a linear run of exact ``Map`` nodes
(one downstream each, no extra args) and returns a single closure looping over
``(func, on_error)`` pairs: k + 1 calls per record.  Error policy and error
counts stay per node (each pair carries its own node's ``_user_error``), and
graph changes still invalidate the fused path because every push is rebuilt
when the graph clock moves.  It prints events/s for the plain loop, the
current fuser and the prototype, measured in the same run, and checks that
outputs and the per-node error policy are unchanged.

2. Fast emit.  ``Stream.emit`` is a method with two keyword defaults and two
attribute checks before it reaches the fused push; on a one-node graph that
costs about as much as the push itself.  The prototype replaces ``emit`` on
the source *instance* by a closure that compares the graph clock with the
version its push was built for and otherwise falls back to ``Stream.emit``
(which rebuilds), so graph changes are still honoured.

Not a test and not used by the library.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import bench_pipelines as bp
from harness import noop

from rivermark import Stream
from rivermark.core import fusion
from rivermark.core import node as node_module
from rivermark.core.fusion import Push
from rivermark.operators.transform import Map
from rivermark.sinks.basic import Sink


def chain_fuser(node: Stream, who: Stream, nxt: Push) -> Push:
    """A Map fuser that folds the maps below ``node`` into the same closure."""
    pairs = []
    cur: Stream = node
    while True:
        assert isinstance(cur, Map)
        if cur.args or cur.kwargs:
            break
        pairs.append((cur.func, cur._user_error))
        ds = cur.downstreams
        if (
            len(ds) != 1
            or type(ds[0]) is not Map
            or ds[0].__dict__.get("update") is not None
            or ds[0].args
            or ds[0].kwargs
        ):
            break
        cur = ds[0]
    if not pairs:
        return ORIGINAL(node, who, nxt)
    tail = cur._downstream_push() if cur is not node else nxt
    steps = tuple(pairs)
    ds = cur.downstreams
    sink = ds[0] if len(ds) == 1 else None
    if (
        isinstance(sink, Sink)
        and type(sink) is Sink
        and sink.__dict__.get("update") is None
        and not sink._is_async
        and not sink.args
        and not sink.kwargs
    ):
        # fold the sink into the same closure as well
        sfunc, serr, after = sink.func, sink._user_error, sink._after_call

        def push_to_sink(x: Any, metadata: Any) -> Any:
            for func, on_err in steps:
                try:
                    y = func(x)
                except Exception as e:
                    on_err(x, e, func)
                    return None
                x = y
            try:
                r = sfunc(x)
            except Exception as e:
                serr(x, e, sfunc)
                return None
            if r is not None:
                return after(x, r, metadata)
            return None

        return push_to_sink
    if len(pairs) == 1:
        return ORIGINAL(node, who, nxt)

    def push(x: Any, metadata: Any) -> Any:
        for func, on_err in steps:
            try:
                y = func(x)
            except Exception as e:
                on_err(x, e, func)
                return None
            x = y
        return tail(x, metadata)

    return push


ORIGINAL = fusion._FUSERS[Map]
REPEAT = 7


def install_fast_emit(source: Stream) -> None:
    """Give ``source`` an instance-level ``emit`` that skips the method layer."""
    clock = node_module._GraphClock
    source._downstream_push()
    version = clock.version
    push = source._push
    slow = Stream.emit

    def emit(x: Any, asynchronous: bool = False, metadata: Any = None) -> Any:
        if clock.version == version and not asynchronous:
            return push(x, metadata)
        return slow(source, x, asynchronous, metadata)

    source.emit = emit  # type: ignore[method-assign]


def rate(build: Any, n: int, repeat: int = 3, fast_emit: bool = False) -> float:
    best = float("inf")
    for _ in range(repeat):
        source = build(Stream, noop)
        if fast_emit:
            source.emit(0)  # let Stream.emit mark the graph synchronous
            install_fast_emit(source)
        emit = source.emit
        t0 = time.perf_counter()
        for x in range(n):
            emit(x)
        best = min(best, time.perf_counter() - t0)
    return n / best


def plain_rate(plain: Any, n: int, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        plain(n, noop)
        best = min(best, time.perf_counter() - t0)
    return n / best


def semantics_unchanged() -> None:
    """The prototype keeps outputs and per-node error policies."""
    src = Stream()
    m1 = src.map(lambda x: 10 // x, on_error="skip")
    m2 = m1.map(lambda x: x + 1)
    out = m2.sink_to_list()
    for x in [1, 0, 2]:
        src.emit(x)
    assert out == [11, 6], out
    assert m1.error_count == 1 and m2.error_count == 0
    # a graph change is picked up
    extra = m1.sink_to_list()
    src.emit(5)
    assert out == [11, 6, 3] and extra == [2], (out, extra)
    # a map folded with its sink keeps the sink's error policy
    src2 = Stream()
    bad = src2.map(lambda x: x * 2).sink(lambda y: 1 // (y - 2), on_error="skip")
    for x in [0, 1, 2]:
        src2.emit(x)
    assert bad.error_count == 1, bad.error_count


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=1_000_000)
    n = p.parse_args().n

    def build_sink(S: Any, sink: Any) -> Any:
        source = S()
        source.sink(sink)
        return source

    def plain_sink(n: int, sink: Any) -> None:
        for x in range(n):
            sink(x)

    rows = []
    configs = [("current", ORIGINAL, False), ("chain", chain_fuser, False)]
    configs += [("fast", ORIGINAL, True), ("both", chain_fuser, True)]
    fusion.register_fuser(Map, chain_fuser)
    semantics_unchanged()
    fusion.register_fuser(Map, ORIGINAL)
    for key, build, plain in [("b", bp.build_b, bp.plain_b), ("sink only", build_sink, plain_sink)]:
        best = {"plain": 0.0} | {c[0]: 0.0 for c in configs}
        for _ in range(REPEAT):  # interleaved: every configuration once per round
            best["plain"] = max(best["plain"], plain_rate(plain, n, 1))
            for cname, fuser, fast in configs:
                fusion.register_fuser(Map, fuser)
                best[cname] = max(best[cname], rate(build, n, 1, fast_emit=fast))
            fusion.register_fuser(Map, ORIGINAL)
        rows.append((key, best["plain"], *(best[c[0]] for c in configs)))
    print(f"n={n:,}, best of {REPEAT} interleaved rounds; ratios are vs the plain loop")
    print(
        "| variant | plain ev/s | current ev/s | chain fusion | fast emit | both |"
        " current | chain | fast emit | both |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, pr, *rs in rows:
        rates = " | ".join(f"{r:,.0f}" for r in rs)
        ratios = " | ".join(f"{r / pr:.3f}" for r in rs)
        print(f"| ({key}) | {pr:,.0f} | {rates} | {ratios} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
