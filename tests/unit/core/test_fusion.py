"""Fused push paths behave exactly like the node-by-node path."""

from __future__ import annotations

import re

import pytest

from rivermark import RefCounter, Stream
from rivermark.operators.transform import Map


def test_fused_chain_sees_graph_changes():
    s = Stream()
    a = s.map(lambda x: x + 1)
    first = a.sink_to_list()
    s.emit(1)
    second = a.map(lambda x: x * 10).sink_to_list()  # fan-out added after fusing
    s.emit(2)
    assert first == [2, 3] and second == [30]
    a.disconnect(a.downstreams[0])
    s.emit(3)
    assert first == [2, 3] and second == [30, 40]


def test_subclass_overriding_update_is_not_fused():
    class Loud(Map):
        def update(self, x, who=None, metadata=None):
            return self._emit(("loud", self.func(x)), metadata)

    s = Stream()
    out = Loud(s, str).sink_to_list()
    s.emit(1)
    assert out == [("loud", "1")]


def test_fused_map_applies_error_policy():
    s = Stream()
    m = s.map(lambda x: 10 // x, on_error="skip")
    out = m.sink_to_list()
    for x in (1, 0, 5):
        s.emit(x)
    assert out == [10, 2] and m.error_count == 1
    s2 = Stream()
    s2.map(lambda x: 10 // x).sink(lambda x: None)
    with pytest.raises(ZeroDivisionError, match=re.escape("Map: user function")):
        s2.emit(0)


def test_fused_map_with_args_and_kwargs():
    s = Stream()
    out = s.map(lambda x, y, z=0: x + y + z, 1, z=2).sink_to_list()
    s.emit(1)
    assert out == [4]


def test_metadata_passes_through_fused_chain():
    seen = []

    class Peek(Stream):
        def update(self, x, who=None, metadata=None):
            seen.append(metadata)

    s = Stream()
    Peek(s.map(str).map(len))
    ref = RefCounter()
    md = [{"ref": ref}]
    s.emit(123, metadata=md)
    assert seen == [md]


def test_fast_emit_still_honours_asynchronous_and_graph_changes():
    import asyncio

    s = Stream()
    out = s.map(lambda x: x + 1).sink_to_list()
    s.emit(1)
    s.emit(2)  # the per-instance fast emit is in place now
    assert "emit" in s.__dict__

    async def main():
        await s.emit(3, asynchronous=True)

    asyncio.run(main())
    other = s.map(str).sink_to_list()  # graph change: the fast emit steps aside
    s.emit(4)
    assert out == [2, 3, 4, 5] and other == ["4"]
