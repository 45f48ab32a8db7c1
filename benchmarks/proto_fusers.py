"""Prototype fusers for filter, accumulate, union, zip, partition, sliding_window.

Run:  .venv/bin/python benchmarks/proto_fusers.py [-n 1000000]

Today only ``Map`` and ``Sink`` have fusers (``rivermark.operators.fused``);
every other node is reached through a generic push that calls its ``update``,
which calls ``_emit`` (a graph-clock check) before the next push.  These
prototypes follow one rule that keeps them safe: a *fast path* for the common
case (no completion tracking on the record, i.e. ``metadata`` is None, and the
node's simple configuration), and a call to the node's own ``update`` for
everything else.  The fast path keeps the node's internal state exactly as
``update`` would, so the two can alternate record by record and checkpoints
(``get_state``) see the same state.  Together with the chain fuser and the
instance-level ``emit`` of :mod:`proto_fusion`, the script prints, for every
variant of ``bench_pipelines`` in the same run: the plain loop, rivermark as it
is, rivermark with the prototypes (``proto``), plus the fast ``emit``
(``proto+emit``), and plus a source-style loop that calls the fused push
directly and re-checks the graph clock per record (``proto+loop``: what a
source's own read loop could do instead of calling ``emit``); and it checks
outputs (against the plain loop), per-node error counts, and that tracked
records complete.

Not a test and not used by the library: it registers the fusers in this
process only.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import bench_pipelines as bp
import harness
from proto_fusion import ORIGINAL, chain_fuser, plain_rate, rate

from rivermark import RefCounter, Stream
from rivermark.core import fusion
from rivermark.core import node as node_module
from rivermark.core.fusion import Push
from rivermark.core.refs import merge_metadata, release_refs
from rivermark.operators.joins import Union, Zip
from rivermark.operators.stateful import Accumulate, no_default
from rivermark.operators.transform import Filter, Map, Remove
from rivermark.operators.windows import Partition, SlidingWindow

REPEAT = 5


def source_loop_rate(build: Any, n: int) -> float:
    """A source's own loop: push directly, re-checking the graph clock per record."""
    source = build(Stream, harness.noop)
    source.emit(0)
    clock = node_module._GraphClock
    version = clock.version
    push = source._push
    t0 = time.perf_counter()
    for x in range(n):
        if clock.version != version:  # the graph changed: go the slow way once
            source.emit(x)
            version, push = clock.version, source._push
            continue
        push(x, None)
    return n / (time.perf_counter() - t0)


def via_update(node: Stream, who: Stream) -> Push:
    update = node.update
    return lambda x, metadata: update(x, who, metadata)


def fuse_filter(node: Any, who: Stream, nxt: Push) -> Push:
    if node.args or node.kwargs:
        return via_update(node, who)
    pred, on_err, invert = node.predicate, node._user_error, node._invert

    def push(x: Any, metadata: Any) -> Any:
        try:
            keep = pred(x)
        except Exception as e:
            on_err(x, e, pred)
            return None
        if bool(keep) is not invert:
            return nxt(x, metadata)
        return None

    return push


def fuse_accumulate(node: Any, who: Stream, nxt: Push) -> Push:
    if node.kwargs or node.returns_state or node.with_state:
        return via_update(node, who)
    update, func, on_err = node.update, node.func, node._user_error

    def push(x: Any, metadata: Any) -> Any:
        state = node.state
        if state is no_default:
            return update(x, who, metadata)
        try:
            state = func(state, x)
        except Exception as e:
            on_err(x, e, func)
            return None
        node.state = state
        return nxt(state, metadata)

    return push


def fuse_union(node: Any, who: Stream, nxt: Push) -> Push:
    return nxt  # union passes every record on unchanged: no call at all


def fuse_zip(node: Any, who: Stream, nxt: Push) -> Push:
    update = node.update
    index = next((i for i, up in enumerate(node.upstreams) if up is who), None)
    if index is None or node.literals:
        return via_update(node, who)
    maxsize = node.maxsize

    if len(node.upstreams) == 2:
        other_index = 1 - index

        def push2(x: Any, metadata: Any) -> Any:
            buffers = node._buffers
            buf = buffers[index]
            if metadata or node._waiters or len(buf) >= maxsize:
                return update(x, who, metadata)
            other = buffers[other_index]
            if buf or not other:
                buf.append((x, None))
                return None
            y, meta = other.popleft()
            out = (x, y) if index == 0 else (y, x)
            if not meta:
                return nxt(out, None)
            try:
                results = nxt(out, meta)
            except BaseException:
                release_refs(meta)
                raise
            return node._release_after(results, meta)

        return push2

    def push(x: Any, metadata: Any) -> Any:
        buffers = node._buffers
        buf = buffers[index]
        if metadata or node._waiters or len(buf) >= maxsize:
            return update(x, who, metadata)
        buf.append((x, None))
        if len(buf) == 1 and all(buffers):
            heads = [b.popleft() for b in buffers]
            out = tuple([h[0] for h in heads])
            meta = merge_metadata([h[1] for h in heads])
            if meta is None:
                return nxt(out, None)
            try:
                results = nxt(out, meta)
            except BaseException:
                release_refs(meta)
                raise
            return node._release_after(results, meta)
        return None

    return push


def fuse_partition(node: Any, who: Stream, nxt: Push) -> Push:
    if node.key is not None or node.timeout is not None:
        return via_update(node, who)
    update, n = node.update, node.n

    def push(x: Any, metadata: Any) -> Any:
        buf = node._buffers.get(None)
        if metadata or buf is None:
            return update(x, who, metadata)
        buf.append(x)
        if len(buf) >= n:
            return node._flush_now(None)
        return None

    return push


def fuse_sliding_window(node: Any, who: Stream, nxt: Push) -> Push:
    update, n, partial = node.update, node.n, node.partial

    def push(x: Any, metadata: Any) -> Any:
        if metadata or node._n_meta:
            return update(x, who, metadata)
        buf = node._buffer
        buf.append(x)
        metas = node._meta
        metas.append(None)
        if len(buf) == n:
            metas.popleft()
            return nxt(tuple(buf), None)
        if partial:
            return nxt(tuple(buf), None)
        return None

    return push


PROTOTYPES: dict[type, Callable[..., Push]] = {
    Map: chain_fuser,
    Filter: fuse_filter,
    Remove: fuse_filter,
    Accumulate: fuse_accumulate,
    Union: fuse_union,
    Zip: fuse_zip,
    Partition: fuse_partition,
    SlidingWindow: fuse_sliding_window,
}
SAVED = {cls: fusion._FUSERS.get(cls) for cls in PROTOTYPES}


def install(on: bool) -> None:
    for cls, fuser in PROTOTYPES.items():
        if on:
            fusion.register_fuser(cls, fuser)
        elif SAVED[cls] is None:
            fusion._FUSERS.pop(cls, None)
        else:
            fusion.register_fuser(cls, SAVED[cls])  # type: ignore[arg-type]
    if not on:
        fusion.register_fuser(Map, ORIGINAL)


def check_tracking(variant: harness.Variant, n: int = 300) -> str:
    """Emit tracked records (each with its own RefCounter); all must complete."""
    done: list[int] = []
    source = variant.build(Stream, harness.noop)
    refs = []
    for x in range(n):
        ref = RefCounter(1, callback=lambda x=x: done.append(x))
        refs.append(ref)
        source.emit(x, metadata=[{"ref": ref}])
        ref.release()  # the source lets go after the emit
        if x % 7 == 0:
            source.emit(-x)  # untracked records interleaved with tracked ones
    # records parked in a partial partition / window / zip buffer are still held
    held = sum(1 for r in refs if not r.done)
    return f"{n - held}/{n} complete"


def check_errors() -> str:
    src = Stream()
    f = src.filter(lambda x: 10 // x > 1, on_error="skip")
    acc = f.accumulate(lambda a, x: a + 10 // (x - 1), start=0, on_error="skip")
    out = acc.sink_to_list()
    for x in [0, 1, 2, 3, 7]:
        src.emit(x)
    ok = out == [10, 15] and f.error_count == 1 and acc.error_count == 1
    return "ok" if ok else f"MISMATCH {out} {f.error_count} {acc.error_count}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=1_000_000)
    n = p.parse_args().n
    rows = []
    for variant in bp.VARIANTS:
        before_check = harness.check(variant, Stream, None)
        install(True)
        after_check = harness.check(variant, Stream, None)
        tracked_on = check_tracking(variant)
        install(False)
        tracked_off = check_tracking(variant)
        best = {"plain": 0.0, "now": 0.0, "proto": 0.0, "proto+emit": 0.0, "loop": 0.0}
        for _ in range(REPEAT):  # interleaved rounds
            best["plain"] = max(best["plain"], plain_rate(variant.plain, n, 1))
            best["now"] = max(best["now"], rate(variant.build, n, 1))
            install(True)
            best["proto"] = max(best["proto"], rate(variant.build, n, 1))
            best["proto+emit"] = max(best["proto+emit"], rate(variant.build, n, 1, fast_emit=True))
            best["loop"] = max(best["loop"], source_loop_rate(variant.build, n))
            install(False)
        rows.append((variant, best, before_check, after_check, tracked_off, tracked_on))
    install(True)
    errors = check_errors()
    install(False)
    print(f"n={n:,}, best of {REPEAT} interleaved rounds; error-policy check: {errors}")
    print(
        "| variant | plain ev/s | now ev/s | proto ev/s | proto+emit ev/s | proto+loop ev/s |"
        " now/plain | proto/plain | proto+emit/plain | proto+loop/plain |"
        " output now / proto | tracking now / proto |"
    )
    print("|" + "---|" * 12)
    for v, b, c0, c1, t0, t1 in rows:
        pr = b["plain"]
        print(
            f"| ({v.key}) {v.title} | {pr:,.0f} | {b['now']:,.0f} | {b['proto']:,.0f} | "
            f"{b['proto+emit']:,.0f} | {b['loop']:,.0f} | {b['now'] / pr:.3f} | "
            f"{b['proto'] / pr:.3f} | {b['proto+emit'] / pr:.3f} | {b['loop'] / pr:.3f} | "
            f"{c0} / {c1} | {t0} / {t1} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
