"""Kernels: the per-record step of the common operators, written out in generated code.

See :mod:`rivermark.fastpath.codegen`.  Each inliner writes, for an untracked
record, the statements the node's ``update`` would run, reading and
writing the node's state on the node itself at every record (never a
container bound at compile time, since ``set_state`` may replace it).
When the node is not in its simple state for this record (a tracked record
waiting in its buffer, a full zip buffer, ...) the generated code calls the
node's fused push, which runs the node's own ``update``.  An inliner
declines (returns False) configurations it does not write out; the fused
push is used for them.
"""

from __future__ import annotations

from typing import Any

from ..core.node import Stream
from ..core.refs import Metadata, release_refs
from ..operators.joins import Union, Zip
from ..operators.stateful import Accumulate, no_default
from ..operators.transform import Filter, Map, Pluck, Remove
from ..operators.windows import Partition, SlidingWindow
from ..sinks.basic import Sink, SinkToList
from .codegen import Codegen, register_inliner

__all__: list[str] = []


def emit_tracked(node: Stream, out: Any, meta: Metadata) -> Any:
    """Emit a tuple that took over the references of the records it was made of (zip)."""
    try:
        results = node._emit(out, meta)
    except BaseException:
        release_refs(meta)
        raise
    return node._release_after(results, meta)


def _call_args(cg: Codegen, node: Any, first: str) -> str:
    """The argument list ``first, *args, **kwargs`` of the node's user function."""
    parts = [first]
    if node.args:
        parts.append("*" + cg.bind(node.args, "args"))
    if node.kwargs:
        parts.append("**" + cg.bind(node.kwargs, "kw"))
    return ", ".join(parts)


def _inline_pass(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    # Union, and a plain Stream in the middle of a graph: records pass unchanged
    cg.push_down(node, var)
    return True


def _live(cg: Codegen, node: Stream, attr: str) -> str:
    """A local variable holding ``node.<attr>`` read now (configuration that may be replaced)."""
    v = cg.tmp("f")
    cg.line(f"{v} = {cg.field(node, attr)}")
    return v


def _inline_map(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, Map)
    f = _live(cg, node, "func")
    y = cg.tmp()
    cg.call_user(y, f"{f}({_call_args(cg, node, var)})", var, node, f)
    cg.push_down(node, y)
    return True


def _inline_filter(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, Filter)
    p = _live(cg, node, "predicate")
    k = cg.tmp("k")
    cg.call_user(k, f"{p}({_call_args(cg, node, var)})", var, node, p)
    cg.only_if(f"not {k}" if node._invert else k)
    cg.push_down(node, var)
    return True


def _inline_pluck(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, Pluck)
    if node._many:
        return False
    pick = cg.bind(node.pick, "pick")
    label = cg.bind(f"pluck({node.pick!r})", "label")
    y = cg.tmp()
    cg.call_user(y, f"{var}[{pick}]", var, node, label)
    cg.push_down(node, y)
    return True


def _inline_accumulate(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, Accumulate)
    n = cg.fields(node)
    nd = cg.bind(no_default, "nodefault")
    s = cg.tmp("s")
    cg.line(f"{s} = {n('state')}")
    # the first record of an accumulate without start: its full path
    cg.skip_if(f"{s} is {nd}", cg.result(cg.fallback(node, who, var)))
    f = _live(cg, node, "func")
    call = f"{f}({s}, {var}, **{cg.bind(node.kwargs, 'kw')})" if node.kwargs else f"{f}({s}, {var})"
    state = cg.tmp("s")
    if node.returns_state:
        result = cg.tmp()
        cg.call_user(f"{state}, {result}", call, var, node, f)
    else:
        result = state
        cg.call_user(state, call, var, node, f)
    cg.line(f"{n('state')} = {state}")
    if node.with_state:
        out = cg.tmp()
        cg.line(f"{out} = ({state}, {result})")
        result = out
    cg.push_down(node, result)
    return True


def _inline_sink(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, Sink)
    if node._is_async:
        return False
    f = _live(cg, node, "func")
    after = cg.bind(node._after_call, "after")
    r = cg.tmp("r")
    cg.call_user(r, f"{f}({_call_args(cg, node, var)})", var, node, f)
    # an awaitable result: the node's own path waits for it
    cg.when(f"{r} is not None", cg.result(f"{after}({var}, {r}, None)"))
    return True


def _inline_sink_to_list(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, SinkToList)
    cg.line(f"{cg.field(node, 'L')}.append({var})")
    return True


def _inline_partition(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, Partition)
    if node.key is not None or node.timeout is not None:
        return False
    n = cg.fields(node)
    buf, meta, out = cg.tmp("buf"), cg.tmp("m"), cg.tmp()
    # The list of the key None stays in ``_buffers`` (emptied in place when a
    # partition is emitted; ``Partition.update`` pops it): an empty list and
    # no entry are the same state for the node (``get_state`` lists only
    # non-empty buffers; ``update`` appends to an empty one as to a new one).
    cg.line("try:")
    cg.line(f"    {buf} = {n('_buffers')}[None]")
    cg.line("except KeyError:")
    cg.line(f"    {buf} = {n('_buffers')}[None] = []")
    cg.line(f"    {n('_metas')}[None] = []")
    cg.line(f"{buf}.append({var})")
    cg.open(f"if len({buf}) >= {n('n')}")
    cg.line(f"{meta} = {n('_metas')}[None]")
    # tracked records in the partition: the node's own flush merges their metadata
    cg.skip_if(meta, cg.result(f"{n('_flush_now')}(None)"))
    cg.line(f"{out} = tuple({buf})")
    cg.line(f"{buf}.clear()")
    cg.push_down(node, out)
    return True


def _inline_sliding_window(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, SlidingWindow)
    n = cg.fields(node)
    buf, out = cg.tmp("buf"), cg.tmp()
    # a tracked record in the window: the node's own path merges its metadata
    cg.skip_if(f"{n('_n_meta')}", cg.result(cg.fallback(node, who, var)))
    cg.line(f"{buf} = {n('_buffer')}")
    cg.line(f"{buf}.append({var})")
    # ``_meta`` holds one entry per record still held: all but the oldest of a
    # full window.  A record that fills the window (or arrives at a full one)
    # leaves it as it was (appended, then the oldest released); otherwise it
    # gains a None.
    if node.partial:
        cg.when(f"len({buf}) != {node.n}", f"{n('_meta')}.append(None)")
    else:
        cg.skip_if(f"len({buf}) != {node.n}", f"{n('_meta')}.append(None)")
    cg.line(f"{out} = tuple({buf})")
    cg.push_down(node, out)
    return True


def _inline_zip(cg: Codegen, node: Stream, who: Stream, var: str) -> bool:
    assert isinstance(node, Zip)
    ups = node.upstreams
    if (
        len(ups) != 2
        or node.literals
        or ups[0] is ups[1]
        or not any(u is who for u in ups)
        or len(node._buffers) != 2
    ):
        return False
    index = 0 if ups[0] is who else 1
    n = cg.fields(node)
    fallback = cg.result(cg.fallback(node, who, var))
    buf, other, y, meta, out = cg.tmp("buf"), cg.tmp("other"), cg.tmp(), cg.tmp("m"), cg.tmp()
    # one unpacking for both buffers; a node whose buffers are not two any
    # more (they are replaced by set_state) takes its own path
    pair = f"{buf}, {other}" if index == 0 else f"{other}, {buf}"
    cg.attempt(f"{pair} = {n('_buffers')}", "ValueError", fallback)
    # records already wait on this side: this one waits too (a full buffer
    # takes the node's own path, which applies backpressure)
    cg.skip_if(
        buf,
        f"if len({buf}) < {n('maxsize')}:",
        f"    {buf}.append(({var}, None))",
        "else:",
        f"    {fallback}",
    )
    cg.skip_if(f"not {other}", f"{buf}.append(({var}, None))")
    # a tuple is complete; an asynchronous caller waiting for room: own path
    cg.skip_if(f"{n('_waiters')}", fallback)
    cg.line(f"{y}, {meta} = {other}.popleft()")
    cg.line(f"{out} = ({var}, {y})" if index == 0 else f"{out} = ({y}, {var})")
    cg.skip_if(
        meta,
        cg.result(f"{cg.bind(emit_tracked, 'tracked')}({cg.bind(node, 'node')}, {out}, {meta})"),
    )
    cg.push_down(node, out)
    return True


register_inliner(Stream, _inline_pass)
register_inliner(Union, _inline_pass)
register_inliner(Map, _inline_map)
register_inliner(Filter, _inline_filter)
register_inliner(Remove, _inline_filter)
register_inliner(Pluck, _inline_pluck)
register_inliner(Accumulate, _inline_accumulate)
register_inliner(Sink, _inline_sink)
register_inliner(SinkToList, _inline_sink_to_list)
register_inliner(Partition, _inline_partition)
register_inliner(SlidingWindow, _inline_sliding_window)
register_inliner(Zip, _inline_zip)
