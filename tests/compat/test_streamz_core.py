"""streamz users' code, run against rivermark with only the import changed.

Each snippet is written once as a function of the imported module (``sz``)
and run twice: with ``streamz`` (the installed reference) to get the expected
output, and with ``rivermark``.  The snippets follow the usage shown in the
streamz documentation ("Core API", "Collections", "Async").
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest
import streamz

import rivermark


def both(snippet: Callable[[Any], Any]) -> Any:
    """Run ``snippet`` with streamz and rivermark; assert equal output; return it."""
    expected = snippet(streamz)
    got = snippet(rivermark)
    assert got == expected
    return got


def inc(x: int) -> int:
    return x + 1


def test_map_sink_print(capsys: pytest.CaptureFixture[str]) -> None:
    def snippet(sz: Any) -> str:
        source = sz.Stream()
        source.map(inc).sink(print)
        for i in range(3):
            source.emit(i)
        return capsys.readouterr().out

    assert both(snippet) == "1\n2\n3\n"


def test_branching_and_union() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        a = source.map(inc)
        b = source.map(lambda x: 10 * x)
        L = a.union(b).sink_to_list()
        for i in range(3):
            source.emit(i)
        return L

    assert both(snippet) == [1, 0, 2, 10, 3, 20]


def test_accumulate_running_sum_and_start() -> None:
    def snippet(sz: Any) -> tuple[list[Any], list[Any]]:
        source = sz.Stream()
        a = source.accumulate(operator.add).sink_to_list()
        b = source.accumulate(operator.add, start=100).sink_to_list()
        for i in range(1, 5):
            source.emit(i)
        return a, b

    assert both(snippet) == ([1, 3, 6, 10], [101, 103, 106, 110])


def test_accumulate_returns_state() -> None:
    def count_and_parity(state: int, x: int) -> tuple[int, str]:
        state += 1
        return state, f"{x}:{'even' if state % 2 == 0 else 'odd'}"

    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.accumulate(count_and_parity, start=0, returns_state=True).sink_to_list()
        for x in "abc":
            source.emit(x)
        return L

    assert both(snippet) == ["a:odd", "b:even", "c:odd"]


def test_accumulate_with_kwargs() -> None:
    def add_scaled(acc: int, x: int, factor: int = 1) -> int:
        return acc + factor * x

    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.accumulate(add_scaled, start=0, factor=3).sink_to_list()
        for i in range(3):
            source.emit(i)
        return L

    assert both(snippet) == [0, 3, 9]


def test_map_with_args_and_kwargs_filter_remove() -> None:
    def snippet(sz: Any) -> tuple[list[Any], list[Any], list[Any]]:
        source = sz.Stream()
        a = source.map(operator.add, 10).sink_to_list()
        b = source.map(lambda x, y=0: x * y, y=2).sink_to_list()
        c = source.filter(lambda x: x % 2 == 0).remove(lambda x: x == 2).sink_to_list()
        for i in range(5):
            source.emit(i)
        return a, b, c

    assert both(snippet) == ([10, 11, 12, 13, 14], [0, 2, 4, 6, 8], [0, 4])


def test_filter_none_drops_falsy() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.filter(None).sink_to_list()
        for x in [0, 1, "", "a", None, [], [1]]:
            source.emit(x)
        return L

    assert both(snippet) == [1, "a", [1]]


def test_starmap_pluck_flatten() -> None:
    def snippet(sz: Any) -> tuple[list[Any], ...]:
        source = sz.Stream()
        a = source.starmap(operator.mul).sink_to_list()
        b = source.pluck(0).sink_to_list()
        c = source.pluck([1, 0]).sink_to_list()
        d = source.flatten().sink_to_list()
        source.emit((2, 3))
        source.emit((4, 5))
        return a, b, c, d

    assert both(snippet) == ([6, 20], [2, 4], [(3, 2), (5, 4)], [2, 3, 4, 5])


def test_pluck_dict_key() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.pluck("name").sink_to_list()
        source.emit({"name": "alice", "amount": 100})
        source.emit({"name": "bob", "amount": 200})
        return L

    assert both(snippet) == ["alice", "bob"]


def test_zip_pairs_in_order() -> None:
    def snippet(sz: Any) -> list[Any]:
        a, b = sz.Stream(), sz.Stream()
        L = a.zip(b).sink_to_list()
        a.emit(1)
        a.emit(2)
        b.emit("a")
        b.emit("b")
        a.emit(3)
        return L

    assert both(snippet) == [(1, "a"), (2, "b")]


def test_zip_with_literal_constant() -> None:
    def snippet(sz: Any) -> list[Any]:
        a, b = sz.Stream(), sz.Stream()
        L = sz.Stream.zip(a, 123, b).sink_to_list()
        a.emit(1)
        b.emit(2)
        return L

    assert both(snippet) == [(1, 123, 2)]


def test_combine_latest_and_emit_on() -> None:
    def snippet(sz: Any) -> tuple[list[Any], list[Any]]:
        a, b = sz.Stream(), sz.Stream()
        every = a.combine_latest(b).sink_to_list()
        on_a = a.combine_latest(b, emit_on=a).sink_to_list()
        a.emit(1)
        b.emit("x")
        a.emit(2)
        b.emit("y")
        a.emit(3)
        return every, on_a

    assert both(snippet) == (
        [(1, "x"), (2, "x"), (2, "y"), (3, "y")],
        [(2, "x"), (3, "y")],
    )


def test_zip_latest() -> None:
    def snippet(sz: Any) -> list[Any]:
        a, b = sz.Stream(), sz.Stream()
        L = a.zip_latest(b).sink_to_list()
        a.emit(1)
        a.emit(2)
        b.emit("x")
        a.emit(3)
        b.emit("y")
        return L

    assert both(snippet) == [(1, "x"), (2, "x"), (3, "x")]


def test_partition_and_sliding_window() -> None:
    def snippet(sz: Any) -> tuple[list[Any], list[Any], list[Any]]:
        source = sz.Stream()
        p = source.partition(3).sink_to_list()
        s = source.sliding_window(3).sink_to_list()
        f = source.sliding_window(3, return_partial=False).sink_to_list()
        for i in range(7):
            source.emit(i)
        return p, s, f

    p, s, f = both(snippet)
    assert p == [(0, 1, 2), (3, 4, 5)]
    assert s[:3] == [(0,), (0, 1), (0, 1, 2)]
    assert f == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 5), (4, 5, 6)]


def test_partition_by_key() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.partition(2, key=lambda x: x % 2).sink_to_list()
        for i in range(6):
            source.emit(i)
        return L

    assert both(snippet) == [(0, 2), (1, 3)]


def test_partition_unique() -> None:
    def snippet(sz: Any) -> tuple[list[Any], list[Any]]:
        source = sz.Stream()
        first = source.partition_unique(2).sink_to_list()
        last = source.partition_unique(2, key=lambda x: x[0], keep="last").sink_to_list()
        for x in ["a1", "a2", "b1", "c1", "c2", "d1"]:
            source.emit(x)
        return first, last

    both(snippet)


def test_unique_maxsize_and_key() -> None:
    def snippet(sz: Any) -> tuple[list[Any], list[Any], list[Any]]:
        source = sz.Stream()
        a = source.unique().sink_to_list()
        b = source.unique(maxsize=1).sink_to_list()
        c = source.unique(key=lambda x: x % 3).sink_to_list()
        for x in [1, 2, 1, 1, 4, 5, 2]:
            source.emit(x)
        return a, b, c

    assert both(snippet) == ([1, 2, 4, 5], [1, 2, 1, 4, 5, 2], [1, 2])


def test_unique_unhashable() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.unique(hashable=False).sink_to_list()
        for x in [[1], [2], [1], [3]]:
            source.emit(x)
        return L

    assert both(snippet) == [[1], [2], [3]]


def test_collect_flush() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        collector = source.collect()
        L = collector.sink_to_list()
        source.emit(1)
        source.emit(2)
        collector.flush()
        source.emit(3)
        collector.flush()
        return L

    assert both(snippet) == [(1, 2), (3,)]


def test_collect_flushed_by_another_stream() -> None:
    def snippet(sz: Any) -> list[Any]:
        source, flusher = sz.Stream(), sz.Stream()
        collector = source.collect()
        flusher.sink(collector.flush)
        L = collector.sink_to_list()
        source.emit("a")
        source.emit("b")
        flusher.emit(True)
        return L

    assert both(snippet) == [("a", "b")]


def test_frequencies_slice_concat() -> None:
    def snippet(sz: Any) -> tuple[Any, ...]:
        source = sz.Stream()
        f = source.frequencies().sink_to_list()
        s = source.slice(2, 6, 2).sink_to_list()  # the example in streamz's docstring
        c = source.map(lambda x: [x, x]).concat().sink_to_list()
        for x in "abacde":
            source.emit(x)
        return [dict(d) for d in f], s, c

    f, s, c = both(snippet)
    assert f[-1] == {"a": 2, "b": 1, "c": 1, "d": 1, "e": 1}
    assert s == ["a", "d"]
    assert c[:4] == ["a", "a", "b", "b"]


def test_slice_with_odd_start_follows_list_semantics() -> None:
    # streamz documents "works like list[] syntax" but tests ``index % step``,
    # so streamz's slice(1, 5, 2) passes index 2 only; rivermark follows list[].
    data = list("abcdef")
    source = rivermark.Stream()
    L = source.slice(1, 5, 2).sink_to_list()
    for x in data:
        source.emit(x)
    assert L == data[1:5:2] == ["b", "d"]


def test_scan_is_accumulate() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.scan(operator.add, start=0).sink_to_list()
        for i in range(4):
            source.emit(i)
        return L

    assert both(snippet) == [0, 1, 3, 6]


def test_sink_with_args() -> None:
    def snippet(sz: Any) -> list[Any]:
        out: list[Any] = []
        source = sz.Stream()
        source.sink(lambda x, tag: out.append((tag, x)), "t")
        source.emit(1)
        return out

    assert both(snippet) == [("t", 1)]


def test_sink_to_textfile() -> None:
    import io

    def snippet(sz: Any) -> str:
        buf = io.StringIO()
        source = sz.Stream()
        source.map(str).sink_to_textfile(buf)
        for i in range(3):
            source.emit(i)
        return buf.getvalue()

    assert both(snippet) == "0\n1\n2\n"


def test_register_api_custom_node() -> None:
    def snippet(sz: Any) -> list[Any]:
        @sz.Stream.register_api()
        class double_each(sz.Stream):
            def __init__(self, upstream: Any, **kwargs: Any) -> None:
                super().__init__(upstream, **kwargs)

            def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
                self._emit(x, metadata=metadata)
                return self._emit(x, metadata=metadata)

        source = sz.Stream()
        L = source.double_each().map(inc).sink_to_list()
        source.emit(1)
        source.emit(5)
        return L

    assert both(snippet) == [2, 2, 6, 6]


def test_register_api_function_and_staticmethod() -> None:
    def snippet(sz: Any) -> tuple[list[Any], list[Any]]:
        @sz.Stream.register_api()
        def add_one(self: Any) -> Any:
            return self.map(inc)

        @sz.Stream.register_api(staticmethod)
        def make_source(tag: str) -> Any:
            return sz.Stream(stream_name=tag)

        s = sz.Stream.make_source("src")
        a = s.add_one().sink_to_list()
        b = s.sink_to_list()
        s.emit(1)
        return a, b

    assert both(snippet) == ([2], [1])


def test_subclass_with_init_and_stream_name() -> None:
    def snippet(sz: Any) -> Any:
        class Tag(sz.Stream):
            def __init__(self, upstream: Any, tag: str, **kwargs: Any) -> None:
                self.tag = tag
                sz.Stream.__init__(self, upstream, **kwargs)

            def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
                return self._emit((self.tag, x), metadata=metadata)

        source = sz.Stream(stream_name="input")
        node = Tag(source, "t", stream_name="tagger")
        L = node.sink_to_list()
        source.emit(1)
        return L, str(node)

    expected = snippet(streamz)
    L, text = snippet(rivermark)
    assert L == expected[0] == [("t", 1)]
    assert "tagger" in text and "Tag" in text and text.startswith("<") and text.endswith(">")


def test_stream_name_is_not_exposed_as_name() -> None:
    # streamz stores ``stream_name`` as ``node.name``; in rivermark ``name`` is
    # the checkpoint identity and ``stream_name`` stays ``node.stream_name``.
    assert streamz.Stream(stream_name="x").name == "x"
    node = rivermark.Stream(stream_name="x")
    assert node.stream_name == "x"
    assert node.name is None


def test_graph_attributes() -> None:
    def snippet(sz: Any) -> tuple[Any, ...]:
        source = sz.Stream()
        m = source.map(inc)
        f = source.filter(bool)
        z = sz.Stream.zip(m, f)
        return (
            [type(d).__name__.lower() for d in source.downstreams],
            m.upstream is source,
            m.upstreams == [source],
            len(z.upstreams),
            source.upstream is None,
            source.upstreams == [],
        )

    res = both(snippet)
    assert res[1:] == (True, True, 2, True, True)


def test_connect_disconnect_destroy() -> None:
    def snippet(sz: Any) -> tuple[Any, ...]:
        source = sz.Stream()
        node = sz.Stream()
        L = node.sink_to_list()
        source.connect(node)
        source.emit(1)
        source.disconnect(node)
        source.emit(2)
        source.connect(node)
        source.emit(3)
        m = source.map(inc)
        M = m.sink_to_list()
        source.emit(4)
        m.destroy()
        source.emit(5)
        return L, M, m in source.downstreams, node.upstreams == [source]

    assert both(snippet) == ([1, 3, 4, 5], [5], False, True)


def test_str_of_nodes() -> None:
    source = rivermark.Stream()
    m = source.map(inc)
    assert "map" in str(m).lower() and "inc" in str(m)
    named = rivermark.Stream(stream_name="readings")
    assert "readings" in str(named)
    assert "5" in str(source.partition(5))
    z = source.zip(m)
    assert "zip" in str(z).lower()


def test_emit_returns_none_for_sync_graph() -> None:
    def snippet(sz: Any) -> Any:
        source = sz.Stream()
        source.map(inc).sink(lambda x: None)
        return source.emit(1)

    assert both(snippet) is None


def test_visualize_builds_digraph() -> None:
    source = rivermark.Stream(stream_name="in")
    source.map(inc).sink_to_list()
    source.filter(bool).sink(print)
    g = source.visualize(filename=None)
    body = "\n".join(g.body)
    assert "in" in body and "map" in body and "filter" in body
    assert body.count("->") == 4


def test_import_styles() -> None:
    from rivermark import Stream

    assert Stream is rivermark.Stream
    from rivermark.dataframe import DataFrame, Series  # noqa: F401

    assert hasattr(Stream, "sink_to_list")


def test_gather_without_dask_is_identity() -> None:
    def snippet(sz: Any) -> tuple[list[Any], bool]:
        source = sz.Stream()
        g = source.gather()
        L = g.map(inc).sink_to_list()
        source.emit(1)
        return L, g is source

    assert both(snippet) == ([2], True)


def test_dataframe_stream_gather_sink_to_list() -> None:
    import pandas as pd

    from rivermark.dataframe import DataFrame

    df = pd.DataFrame({"x": [1, 2, 3], "y": [4, 5, 6]})
    sdf = DataFrame(example=df)
    L = sdf.stream.gather().sink_to_list()
    sdf.emit(df)
    assert L[0] is df


def test_user_function_error_wraps_original() -> None:
    from rivermark import UserFunctionError

    def boom(sz: Any) -> BaseException:
        source = sz.Stream()
        source.map(lambda x: 1 / x).sink_to_list()
        with pytest.raises(Exception) as info:
            source.emit(0)
        return info.value

    assert isinstance(boom(streamz), ZeroDivisionError)
    err = boom(rivermark)
    assert isinstance(err, UserFunctionError)
    assert isinstance(err.__cause__, ZeroDivisionError)


def test_on_error_skip_keeps_stream_running() -> None:
    source = rivermark.Stream(on_error="skip")
    L = source.map(lambda x: 10 // x).sink_to_list()
    for x in [1, 0, 2]:
        source.emit(x)
    assert L == [10, 5]


def test_custom_node_calling_public_emit() -> None:
    # older streamz nodes call ``self.emit`` (not ``_emit``) inside ``update``
    def snippet(sz: Any) -> list[Any]:
        @sz.Stream.register_api()
        class and_tenfold(sz.Stream):
            def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
                self.emit(x, metadata=metadata)
                return self.emit(10 * x, metadata=metadata)

        source = sz.Stream()
        L = source.and_tenfold().sink_to_list()
        source.emit(1)
        source.emit(2)
        return L

    assert both(snippet) == [1, 10, 2, 20]


def test_accumulate_with_state() -> None:
    def snippet(sz: Any) -> list[Any]:
        source = sz.Stream()
        L = source.accumulate(operator.add, start=0, with_state=True).sink_to_list()
        source.emit(1)
        source.emit(2)
        return L

    assert both(snippet) == [(1, 1), (3, 3)]
