"""Tests of zip, zip_latest, combine_latest and union."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rivermark import ConfigurationError, Stream
from rivermark.errors import GraphError
from rivermark.operators.joins import CombineLatest, Union, Zip, ZipLatest

from .conftest import StrictRef, roundtrip
from .conftest import emit_tracked as send


# ---------------------------------------------------------------------- zip
def test_zip_pairs_in_order() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.zip(b, c)
    assert isinstance(node, Zip)
    L = node.sink_to_list()
    a.emit(1)
    a.emit(2)
    b.emit("x")
    assert L == []
    c.emit(True)
    assert L == [(1, "x", True)]
    b.emit("y")
    c.emit(False)
    assert L == [(1, "x", True), (2, "y", False)]


def test_zip_literals_at_their_position() -> None:
    a, b = Stream(), Stream()
    L = Stream.zip(a, 10, b, 20).sink_to_list()
    L2 = Stream.zip("first", a).sink_to_list()
    a.emit(1)
    b.emit(2)
    assert L == [(1, 10, 2, 20)]
    assert L2 == [("first", 1)]


def test_zip_bad_args() -> None:
    with pytest.raises(ConfigurationError, match="zip: maxsize .*0"):
        Stream().zip(Stream(), maxsize=0)
    with pytest.raises(ConfigurationError, match="zip: needs at least one upstream"):
        Zip(1, 2)


def test_zip_holds_refs_until_emitted() -> None:
    a, b = Stream(), Stream()
    a.zip(b).sink_to_list()
    r1, r2 = send(a, 1), send(a, 2)
    assert r1.fired == r2.fired == 0
    rb = send(b, "x")
    assert (r1.fired, r2.fired, rb.fired) == (1, 0, 1)
    rb2 = send(b, "y")
    assert r2.fired == rb2.fired == 1
    assert all(r.late == 0 for r in (r1, r2, rb, rb2))


def test_zip_releases_after_downstream_and_backpressure() -> None:
    async def main() -> None:
        a, b = Stream(), Stream()
        node = a.zip(b, maxsize=2)
        fut = asyncio.get_running_loop().create_future()
        node.sink(lambda x: fut)
        ra = send(a, 1)
        assert node.update(2, a) is None
        waits = node.update(3, a)  # three buffered > maxsize: wait
        assert waits and not waits[0].done()
        rb = StrictRef()
        rb.retain()
        res = node.update("x", b, [{"ref": rb}])
        rb.release()
        assert waits[0].done()  # the buffer shrank
        assert res and ra.fired == rb.fired == 0
        fut.set_result(None)
        await asyncio.gather(*res)
        assert ra.fired == rb.fired == 1

    asyncio.run(asyncio.wait_for(main(), 5))


def test_zip_sync_caller_is_not_blocked_over_maxsize() -> None:
    a, b = Stream(), Stream()
    L = a.zip(b, maxsize=1).sink_to_list()
    for i in range(5):
        a.emit(i)
    for i in range(5):
        b.emit(-i)
    assert [(i, -i) for i in range(5)] == L


def test_zip_awaited_emit_waits_for_buffer_space_in_a_synchronous_graph() -> None:
    """``await source.emit(x, asynchronous=True)`` gets zip's backpressure (as in streamz)."""

    async def main() -> None:
        a, b = Stream(), Stream()
        L = a.zip(b, maxsize=2).sink_to_list()
        for i in range(2):
            await a.emit(i, asynchronous=True)
        third = asyncio.ensure_future(a.emit(2, asynchronous=True))  # over maxsize
        await asyncio.sleep(0.01)
        assert not third.done()
        await b.emit("x", asynchronous=True)  # the buffer shrinks
        await asyncio.wait_for(third, 1)
        assert L == [(0, "x")]

    asyncio.run(asyncio.wait_for(main(), 5))


def test_zip_update_from_stranger_is_an_error() -> None:
    a, b = Stream(), Stream()
    node = a.zip(b)
    with pytest.raises(GraphError, match="not one of its upstreams"):
        node.update(1, Stream())


def test_zip_state_round_trip() -> None:
    def build() -> tuple[Stream, Stream, Zip, list[Any]]:
        a, b = Stream(), Stream()
        node = Stream.zip(a, "k", b)
        return a, b, node, node.sink_to_list()

    a1, b1, n1, L1 = build()
    for i in range(3):
        send(a1, i)
    b1.emit("x")
    state = roundtrip(n1.get_state())
    assert state == {"buffers": [[1, 2], []]}
    a2, b2, n2, L2 = build()
    n2.set_state(state)
    b2.emit("y")
    b2.emit("z")
    assert L1 + L2 == [(0, "k", "x"), (1, "k", "y"), (2, "k", "z")]
    assert n2.state_signature() == "Zip(upstreams=2, literals_at=[1], maxsize=10)"


# ---------------------------------------------------------------------- zip_latest
def test_zip_latest_semantics() -> None:
    a, b = Stream(), Stream()
    node = a.zip_latest(b)
    assert isinstance(node, ZipLatest)
    L = node.sink_to_list()
    a.emit(1)
    a.emit(2)
    assert L == []
    b.emit("x")
    assert L == [(1, "x"), (2, "x")]
    b.emit("y")
    b.emit("z")
    a.emit(3)
    assert L == [(1, "x"), (2, "x"), (3, "z")]


def test_zip_latest_refs() -> None:
    a, b = Stream(), Stream()
    a.zip_latest(b).sink_to_list()
    r1 = send(a, 1)
    assert r1.fired == 0  # waiting for b
    x = send(b, "x")
    assert r1.fired == 1 and x.fired == 0  # latest of b is held
    r2 = send(a, 2)
    assert r2.fired == 1
    y = send(b, "y")
    assert x.fired == 1 and y.fired == 0
    assert all(r.late == 0 for r in (r1, r2, x, y))


def test_zip_latest_state_round_trip() -> None:
    def build() -> tuple[Stream, Stream, ZipLatest, list[Any]]:
        a, b = Stream(), Stream()
        node = a.zip_latest(b)
        return a, b, node, node.sink_to_list()

    a1, b1, n1, _ = build()
    a1.emit(1)
    a2, b2, n2, L2 = build()
    n2.set_state(roundtrip(n1.get_state()))
    b2.emit("x")
    assert L2 == [(1, "x")]
    a3, b3, n3, L3 = build()
    n3.set_state(roundtrip(n2.get_state()))
    a3.emit(2)
    assert L3 == [(2, "x")]


# ---------------------------------------------------------------------- combine_latest
def test_combine_latest_semantics() -> None:
    a, b = Stream(), Stream()
    node = a.combine_latest(b)
    assert isinstance(node, CombineLatest)
    L = node.sink_to_list()
    a.emit(1)
    a.emit(2)
    b.emit("x")
    a.emit(3)
    b.emit("y")
    assert L == [(2, "x"), (3, "x"), (3, "y")]


@pytest.mark.parametrize("how", ["stream", "index", "list"])
def test_combine_latest_emit_on(how: str) -> None:
    a, b, c = Stream(), Stream(), Stream()
    emit_on: Any = {"stream": b, "index": 1, "list": [b, 1]}[how]
    node = a.combine_latest(b, c, emit_on=emit_on)
    assert node.emit_on == (b,)
    L = node.sink_to_list()
    a.emit(1)
    b.emit("early")
    c.emit(True)
    assert L == []
    a.emit(2)
    b.emit("x")
    c.emit(False)
    b.emit("y")
    assert L == [(2, "x", True), (2, "y", False)]


def test_combine_latest_emit_on_several() -> None:
    a, b, c = Stream(), Stream(), Stream()
    L = a.combine_latest(b, c, emit_on=[a, 2]).sink_to_list()
    a.emit(1)
    b.emit(2)
    c.emit(3)
    b.emit(4)
    a.emit(5)
    assert L == [(1, 2, 3), (5, 4, 3)]


@pytest.mark.parametrize("bad", [Stream(), 5, -1, "a", [], [0, "b"], 1.0, True])
def test_combine_latest_bad_emit_on(bad: Any) -> None:
    a, b = Stream(), Stream()
    with pytest.raises(ConfigurationError, match="combine_latest: emit_on"):
        a.combine_latest(b, emit_on=bad)
    assert a.downstreams == []  # nothing was connected


def test_combine_latest_early_emit_on_records_complete_at_once() -> None:
    a, b = Stream(), Stream()
    L = a.combine_latest(b, emit_on=a).sink_to_list()
    early = send(a, 1)
    assert early.fired == 1  # not buffered: dropped from completion tracking
    bx = send(b, "x")
    assert bx.fired == 0 and L == []  # b's latest value is held
    a2 = send(a, 2)
    assert a2.fired == 0 and L == [(2, "x")]  # a's latest value is held
    a3 = send(a, 3)
    assert a2.fired == 1 and a3.fired == 0
    by = send(b, "y")
    assert bx.fired == 1 and by.fired == 0
    assert L == [(2, "x"), (3, "x")]
    assert all(r.late == 0 for r in (early, bx, a2, a3, by))


def test_combine_latest_early_value_still_used() -> None:
    a, b = Stream(), Stream()
    L = a.combine_latest(b).sink_to_list()
    ra = send(a, 1)
    assert ra.fired == 1
    rb = send(b, "x")  # completes the set: emits, and b's value is now held
    assert L == [(1, "x")] and rb.fired == 0


def test_combine_latest_state_round_trip() -> None:
    def build() -> tuple[Stream, Stream, CombineLatest, list[Any]]:
        a, b = Stream(), Stream()
        node = a.combine_latest(b, emit_on=1)
        return a, b, node, node.sink_to_list()

    a1, b1, n1, L1 = build()
    a1.emit(1)
    a2, b2, n2, L2 = build()
    n2.set_state(roundtrip(n1.get_state()))
    b2.emit("x")
    a2.emit(2)
    b2.emit("y")
    assert L1 == [] and L2 == [(1, "x"), (2, "y")]
    assert n2.state_signature() == "CombineLatest(upstreams=2, emit_on=[1])"


# ---------------------------------------------------------------------- union
def test_union_passes_everything_and_refs() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.union(b, c)
    assert isinstance(node, Union)
    L = node.sink_to_list()
    refs = [send(a, 1), send(c, 2), send(b, 3)]
    assert L == [1, 2, 3]
    assert [r.fired for r in refs] == [1, 1, 1]
    with pytest.raises(ConfigurationError, match="union: every upstream must be a stream"):
        a.union(5)


def test_zip_same_stream_twice() -> None:
    a = Stream()
    L = a.zip(a).sink_to_list()
    r = send(a, 1)
    a.emit(2)
    assert L == [(1, 1), (2, 2)]
    assert r.fired == 1 and r.late == 0


def test_zip_upstream_connected_later() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.zip(b)
    L = node.sink_to_list()
    c.connect(node)
    a.emit(1)
    b.emit(2)
    assert L == []
    c.emit(3)
    assert L == [(1, 2, 3)]


def test_combine_latest_and_zip_latest_upstream_connected_later() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.combine_latest(b)
    L = node.sink_to_list()
    c.connect(node)
    a.emit(1)
    b.emit(2)
    assert L == []  # c has not produced yet
    c.emit(3)
    assert L == [(1, 2, 3)]
    assert node.emit_on == (a, b, c)
    x, y, z = Stream(), Stream(), Stream()
    zl = x.zip_latest(y)
    L2 = zl.sink_to_list()
    z.connect(zl)
    x.emit(1)
    y.emit(2)
    assert L2 == []
    z.emit(3)
    assert L2 == [(1, 2, 3)]


# ---------------------------------------------------------------------- connect / disconnect
def test_zip_disconnect_drops_the_input_buffer_and_completes_its_records() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.zip(b, c)
    L = node.sink_to_list()
    held = send(b, "b1")
    assert held.fired == 0
    b.disconnect(node)
    assert held.fired == 1 and held.late == 0  # never part of a tuple: complete
    assert node.upstreams == [a, c] and len(node._buffers) == 2
    ra, rc = send(a, 1), send(c, 3)
    assert L == [(1, 3)] and ra.fired == rc.fired == 1
    state = roundtrip(node.get_state())
    assert state == {"buffers": [[], []]}
    b.emit("not connected")
    assert L == [(1, 3)]


def test_zip_connect_later_keeps_buffers_aligned() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.zip(b)
    L = node.sink_to_list()
    c.connect(node)
    assert len(node._buffers) == 3
    for s, v in ((a, 1), (b, 2), (c, 3), (c, 4), (a, 5), (b, 6)):
        s.emit(v)
    assert L == [(1, 2, 3), (5, 6, 4)]


def test_combine_latest_disconnect_releases_the_latest_value() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.combine_latest(b, c, emit_on=[a, b])
    L = node.sink_to_list()
    send(a, 1)
    rc = send(c, 3)
    rb = send(b, 2)
    assert L == [(1, 2, 3)] and rb.fired == rc.fired == 0
    c.disconnect(node)
    assert rc.fired == 1 and rc.late == 0
    assert node.emit_on == (a, b)
    send(a, 4)
    assert L == [(1, 2, 3), (4, 2)]
    b.disconnect(node)
    assert rb.fired == 1 and node.emit_on == (a,)
    send(a, 5)
    assert L[-1] == (5,)
    with pytest.raises(GraphError, match="cannot disconnect"):
        a.disconnect(node)


def test_combine_latest_disconnect_of_a_missing_input_lets_it_emit() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.combine_latest(b, c)
    L = node.sink_to_list()
    a.emit(1)
    b.emit(2)
    assert L == []  # c has no value yet
    c.disconnect(node)
    a.emit(3)
    assert L == [(3, 2)]


def test_zip_latest_disconnect_of_a_lossy_input() -> None:
    a, b, c = Stream(), Stream(), Stream()
    node = a.zip_latest(b, c)
    L = node.sink_to_list()
    pending = send(a, 1)
    rb = send(b, "b")
    assert pending.fired == 0 and L == []  # c still missing: a's record waits
    c.disconnect(node)
    send(a, 2)
    assert L == [(1, "b"), (2, "b")]
    assert pending.fired == 1 and rb.fired == 0
    assert roundtrip(node.get_state())["last"] == ["b"]
    with pytest.raises(GraphError, match="lossless"):
        a.disconnect(node)


def test_zip_untracked_records_wait_bare_beside_tracked_ones() -> None:
    # an untracked record waits as itself (no pair per record); a tracked one
    # beside it keeps its references until its tuple is passed on
    a, b = Stream(), Stream()
    z = a.zip(b)
    out = z.sink_to_list()
    a.emit(1)
    assert list(z._buffers[0]) == [1]
    r2 = send(a, 2)
    a.emit(3)
    assert z.get_state() == {"buffers": [[1, 2, 3], []]}
    b.emit("x")
    assert r2.fired == 0
    b.emit("y")
    assert r2.fired == 1
    rz = send(b, "z")
    assert rz.fired == 1
    assert out == [(1, "x"), (2, "y"), (3, "z")]
    assert z.records_held() == 0
