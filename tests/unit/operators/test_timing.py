"""Tests of the time-based operators in rivermark.operators.timing."""

from __future__ import annotations

import asyncio
import pickle
import re
from typing import Any

import pytest

from rivermark import ConfigurationError, RefCounter, Stream
from rivermark.core import runtime
from rivermark.core.timeutil import parse_interval
from rivermark.errors import NodeFailedError
from rivermark.operators.timing import (
    Buffer,
    Delay,
    Latest,
    RateLimit,
    TimedWindow,
    TimedWindowUnique,
)
from rivermark.testing import wait_for_async


def tracked() -> tuple[RefCounter, list[dict[str, Any]], list[int]]:
    """A ref held once by the 'source', its metadata, and a list recording completion."""
    fired: list[int] = []
    ref = RefCounter(initial=1, callback=lambda: fired.append(1))
    return ref, [{"ref": ref}], fired


def send(s: Stream, x: Any) -> tuple[RefCounter, list[int], Any]:
    """Emit ``x`` like a source: hold a ref during the synchronous call, then release it."""
    ref, md, fired = tracked()
    results = s.emit(x, metadata=md)
    ref.release()
    return ref, fired, results


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


class Gate:
    """An async sink function that holds every record until ``open()``."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.seen: list[Any] = []
        self.done: list[Any] = []

    async def __call__(self, x: Any) -> None:
        self.seen.append(x)
        await self.event.wait()
        self.done.append(x)

    def open(self) -> None:
        self.event.set()


async def gate_fn(gate: Gate, x: Any) -> None:
    await gate(x)


def gated_sink(node: Stream, gate: Gate) -> Stream:
    async def f(x: Any) -> None:
        await gate(x)

    return node.sink(f)


# ---------------------------------------------------------------- parse_interval
@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (2, 2.0),
        (0.25, 0.25),
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1min", 60.0),
        ("1.5h", 5400.0),
        ("3", 3.0),
    ],
)
def test_parse_interval_accepts_numbers_and_strings(value: Any, seconds: float) -> None:
    assert parse_interval(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [0, -1, "0s", "fast", "5 parsecs", None, True, float("nan")])
def test_parse_interval_rejects(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("delay: interval must be a positive")):
        parse_interval(value, "delay")


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda s: s.delay(0), "delay: interval must be"),
        (lambda s: s.rate_limit(-1), "rate_limit: interval must be"),
        (lambda s: s.timed_window("soon"), "timed_window: interval must be"),
        (lambda s: s.timed_window_unique(0), "timed_window_unique: interval must be"),
        (
            lambda s: s.timed_window_unique(1, keep="middle"),
            "keep must be 'first' or 'last', got 'middle'",
        ),
        (lambda s: s.buffer(0), "buffer: n must be an integer >= 1, got 0"),
        (lambda s: s.buffer(2.5), "buffer: n must be an integer >= 1, got 2.5"),
    ],
)
def test_bad_arguments(make: Any, text: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(text)):
        make(Stream())


# ---------------------------------------------------------------- delay
def test_delay_emits_in_order_after_interval_and_completes_after_emit() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        s = Stream()
        out: list[tuple[Any, float]] = []
        s.delay(0.03).sink(lambda x: out.append((x, loop.time())))
        t0 = loop.time()
        ref1, fired1, res = send(s, 1)
        assert res is None  # the upstream is not held up
        ref2, fired2, _ = send(s, 2)
        assert out == [] and fired1 == [] and fired2 == []
        await wait_for_async(lambda: len(out) == 2)
        assert [x for x, _ in out] == [1, 2]
        assert out[0][1] - t0 >= 0.03
        assert fired1 == [1] and fired2 == [1]

    run(main())


def test_delay_waits_for_async_downstream_before_completing() -> None:
    async def main() -> None:
        s = Stream()
        gate = Gate()
        node = s.delay(0.001)
        gated_sink(node, gate)
        ref, fired, _ = send(s, "x")
        await wait_for_async(lambda: gate.seen == ["x"])
        assert fired == [] and node.in_flight == 1
        gate.open()
        await wait_for_async(lambda: fired == [1])
        assert node.in_flight == 0

    run(main())


def test_delay_state_round_trip() -> None:
    async def main() -> None:
        s = Stream()
        d = s.delay(5)
        assert isinstance(d, Delay)
        send(s, "a")
        send(s, "b")
        state = pickle.loads(pickle.dumps(d.get_state()))
        assert [x for _, x in state["pending"]] == ["a", "b"]
        assert all(0 < wait <= 5 for wait, _ in state["pending"])
        assert d.state_signature() == "Delay(interval=5.0)"

        s2 = Stream()
        d2 = s2.delay(5)
        out = d2.sink_to_list()
        d2.set_state({"pending": [(0.0, x) for _, x in state["pending"]]})
        await wait_for_async(lambda: len(out) == 2)
        assert out == ["a", "b"]
        assert d2.get_state() == {"pending": []}

    run(main())


# ---------------------------------------------------------------- rate_limit
def test_rate_limit_spaces_records_and_releases_only_after_emit() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        s = Stream()
        times: list[float] = []
        node = s.rate_limit(0.02)
        assert isinstance(node, RateLimit)
        node.sink(lambda x: times.append(loop.time()))
        before = loop.time()
        ref1, fired1, res1 = send(s, 1)
        assert fired1 == [1] and res1 is None  # the first passes straight through
        ref2, fired2, res2 = send(s, 2)
        assert res2 and fired2 == [] and node.in_flight == 1  # held, upstream must wait
        await asyncio.gather(*res2)
        assert fired2 == [1] and node.in_flight == 0
        # the second record's slot is interval after the first one arrived (not
        # after its sink ran, which a loaded machine may delay)
        assert len(times) == 2 and times[1] - before >= 0.02 - 1e-3

    run(main())


def test_rate_limit_record_completes_after_downstream_finished() -> None:
    async def main() -> None:
        s = Stream()
        gate = Gate()
        gated_sink(s.rate_limit(0.005), gate)
        send(s, 1)
        ref, fired, res = send(s, 2)
        await wait_for_async(lambda: gate.seen == [1, 2])
        assert fired == []
        gate.open()
        await asyncio.gather(*res)
        assert fired == [1]

    run(main())


# ---------------------------------------------------------------- timed_window
def test_timed_window_collects_and_releases_after_emission() -> None:
    async def main() -> None:
        s = Stream()
        node = s.timed_window(0.02)
        assert isinstance(node, TimedWindow)
        out = node.sink_to_list()
        r1 = send(s, 1)
        r2 = send(s, 2)
        assert r1[1] == [] and r2[1] == []
        await wait_for_async(lambda: any(out))
        assert [w for w in out if w] == [[1, 2]]
        assert r1[1] == [1] and r2[1] == [1]
        send(s, 3)
        await wait_for_async(lambda: [3] in out)

    run(main())


def test_timed_window_emits_empty_windows_like_streamz() -> None:
    async def main() -> None:
        s = Stream()
        out = s.timed_window(0.005).sink_to_list()
        await wait_for_async(lambda: len(out) >= 2)
        assert out[:2] == [[], []]

    run(main())


def test_timed_window_merged_metadata_waits_for_async_downstream() -> None:
    async def main() -> None:
        s = Stream()
        gate = Gate()
        gated_sink(s.timed_window(0.01), gate)
        _, fired, _ = send(s, "a")
        await wait_for_async(lambda: gate.seen == [["a"]])
        assert fired == []
        gate.open()
        await wait_for_async(lambda: fired == [1])

    run(main())


def test_timed_window_state_round_trip() -> None:
    async def main() -> None:
        s = Stream()
        node = s.timed_window(60)
        send(s, "x")
        send(s, "y")
        state = pickle.loads(pickle.dumps(node.get_state()))
        assert state == {"buffer": ["x", "y"]}
        assert node.state_signature() == "TimedWindow(interval=60.0)"
        s2 = Stream()
        node2 = s2.timed_window(0.01)
        out = node2.sink_to_list()
        node2.set_state(state)
        await wait_for_async(lambda: any(out))
        assert [w for w in out if w] == [["x", "y"]]

    run(main())


# ---------------------------------------------------------------- timed_window_unique
@pytest.mark.parametrize(
    ("keep", "key", "expected"),
    [
        ("first", None, (1, 2, 3)),
        ("last", None, (3, 2, 1)),
        ("first", len, ("f", "fo", "foo")),
        ("last", len, ("b", "ba", "bar")),
    ],
)
def test_timed_window_unique_semantics(keep: str, key: Any, expected: tuple[Any, ...]) -> None:
    data = [1, 2, 3, 3, 2, 1] if key is None else ["f", "b", "fo", "ba", "foo", "bar"]

    async def main() -> None:
        s = Stream()
        kwargs = {} if key is None else {"key": key}
        out = s.timed_window_unique(0.02, keep=keep, **kwargs).sink_to_list()
        for x in data:
            send(s, x)
        await wait_for_async(lambda: any(out))
        assert [w for w in out if w] == [expected]

    run(main())


def test_timed_window_unique_key_item_and_duplicate_refs() -> None:
    async def main() -> None:
        s = Stream()
        node = s.timed_window_unique(60, key="k", keep="first")
        _, fired_a, _ = send(s, {"k": 1, "v": "a"})
        _, fired_b, _ = send(s, {"k": 1, "v": "b"})
        assert fired_b == [1]  # dropped duplicate completes at once
        assert fired_a == []
        assert node.get_state() == {"buffer": [{"k": 1, "v": "a"}]}

        s2 = Stream()
        last = s2.timed_window_unique(60, key="k", keep="last")
        _, fired_c, _ = send(s2, {"k": 1, "v": "c"})
        _, fired_d, _ = send(s2, {"k": 1, "v": "d"})
        assert fired_c == [1] and fired_d == []  # superseded one completes
        state = pickle.loads(pickle.dumps(last.get_state()))
        assert state == {"buffer": [{"k": 1, "v": "d"}]}
        assert last.state_signature() == "TimedWindowUnique(interval=60.0, keep='last')"

        s3 = Stream()
        restored = s3.timed_window_unique(0.01, key="k", keep="last")
        assert isinstance(restored, TimedWindowUnique)
        out = restored.sink_to_list()
        restored.set_state(state)
        send(s3, {"k": 2, "v": "e"})
        await wait_for_async(lambda: any(out))
        assert [w for w in out if w] == [({"k": 1, "v": "d"}, {"k": 2, "v": "e"})]

    run(main())


def test_timed_window_unique_unhashable_key_uses_error_policy() -> None:
    async def main() -> None:
        s = Stream(on_error="skip")
        node = s.timed_window_unique(60)
        _, fired, _ = send(s, [1, 2])  # a list is not hashable
        assert fired == [1] and node.error_count == 1
        assert node.get_state() == {"buffer": []}

    run(main())


# ---------------------------------------------------------------- buffer
def test_buffer_passes_through_in_order() -> None:
    async def main() -> None:
        s = Stream()
        out = s.buffer(3).sink_to_list()
        refs = [send(s, i) for i in range(5)]
        await wait_for_async(lambda: len(out) == 5)
        assert out == [0, 1, 2, 3, 4]
        assert all(fired == [1] for _, fired, _ in refs)

    run(main())


def test_buffer_backpressure_when_full_and_state() -> None:
    async def main() -> None:
        s = Stream()
        gate = Gate()
        node = s.buffer(2)
        assert isinstance(node, Buffer)
        gated_sink(node, gate)
        results = []
        for i in range(4):
            _, _, res = send(s, i)
            results.append(res)
        await wait_for_async(lambda: gate.seen == [0])
        # 0 is being emitted (in flight), 1 and 2 fill the buffer, 3 waits for room
        assert all(r is None or all(f.done() for f in r) for r in results[:3])
        assert results[3] and not results[3][0].done()
        assert node.in_flight == 1
        state = pickle.loads(pickle.dumps(node.get_state()))
        assert state == {"items": [1, 2, 3]}
        assert node.state_signature() == "Buffer(n=2)"
        gate.open()
        await asyncio.gather(*results[3])
        await wait_for_async(lambda: gate.done == [0, 1, 2, 3])

        s2 = Stream()
        node2 = s2.buffer(2)
        out = node2.sink_to_list()
        node2.set_state(state)
        await wait_for_async(lambda: len(out) == 3)
        assert out == [1, 2, 3]

    run(main())


def test_buffer_refs_complete_after_downstream() -> None:
    async def main() -> None:
        s = Stream()
        gate = Gate()
        gated_sink(s.buffer(5), gate)
        tracked_refs = [send(s, i) for i in range(3)]
        await wait_for_async(lambda: gate.seen == [0])
        assert all(fired == [] for _, fired, _ in tracked_refs)
        gate.open()
        await wait_for_async(lambda: all(fired == [1] for _, fired, _ in tracked_refs))

    run(main())


# ---------------------------------------------------------------- latest
def test_latest_passes_through_when_downstream_free() -> None:
    s = Stream()
    out = s.latest().sink_to_list()
    for i in range(3):
        s.emit(i)
    assert out == [0, 1, 2]


def test_latest_drops_superseded_values_and_releases_them() -> None:
    async def main() -> None:
        s = Stream()
        gate = Gate()
        node = s.latest()
        assert isinstance(node, Latest)
        gated_sink(node, gate)
        first = send(s, 0)
        assert first[2] is None and gate.seen == []  # passed on from the node's own task
        await wait_for_async(lambda: gate.seen == [0])
        refs = [send(s, i) for i in range(1, 4)]  # downstream busy with 0
        assert all(res is None for _, _, res in refs)  # the upstream never waits
        assert refs[0][1] == [1] and refs[1][1] == [1]  # dropped: complete at once
        assert first[1] == [] and refs[2][1] == []
        state = pickle.loads(pickle.dumps(node.get_state()))
        assert state == {"next": [3]} and node.emits_later()
        gate.open()
        await wait_for_async(lambda: gate.done == [0, 3])
        assert first[1] == [1] and refs[2][1] == [1]
        assert node.in_flight == 0 and node.get_state() == {"next": []}
        assert not node.emits_later()

        s2 = Stream()
        node2 = s2.latest()
        out = node2.sink_to_list()
        node2.set_state(state)
        await wait_for_async(lambda: out == [3])
        assert node2.state_signature() == "Latest()"

    run(main())


def test_latest_keeps_only_the_newest_of_one_loop_turn() -> None:
    # as streamz: records emitted before the loop turns collapse to the newest
    async def main() -> None:
        s = Stream()
        node = s.latest()
        out = node.sink_to_list()
        fired = [send(s, i)[1] for i in range(5)]
        assert out == [] and fired[:4] == [[1]] * 4 and fired[4] == []
        await wait_for_async(lambda: out == [4] and fired[4] == [1])
        await s.emit(5, asynchronous=True)  # returns once its record was passed on
        assert out == [4, 5]

    run(main())


def test_latest_under_a_source_passes_the_last_record_and_completes_every_one() -> None:
    source = Stream.from_iterable(range(3000))  # type: ignore[attr-defined]
    out = source.latest().sink_to_list()
    source.start()
    from rivermark.testing import wait_for

    wait_for(lambda: out and out[-1] == 2999)
    assert out == sorted(set(out)) and len(out) < 3000


def test_latest_failure_downstream_reaches_a_synchronous_emit() -> None:
    s = Stream()

    def boom(x: Any) -> None:
        raise ValueError(f"bad {x}")

    node = s.latest()
    node.sink(boom)
    with pytest.raises(ValueError, match="bad 1"):
        s.emit(1)
    assert node.failure is not None


@pytest.mark.parametrize(
    "make, windowed",
    [
        (lambda s: s.delay(0.001), False),
        (lambda s: s.buffer(3), False),
        # a second between records: the second record must wait in the background
        # even when the machine is slow between the two sends (with 10 ms a loaded
        # run sent it after the interval, and it went through synchronously)
        (lambda s: s.rate_limit(1.0), False),
        (lambda s: s.timed_window(0.005).flatten(), True),
        (lambda s: s.timed_window_unique(0.005).flatten(), True),
    ],
    ids=["delay", "buffer", "rate_limit", "timed_window", "timed_window_unique"],
)
def test_downstream_error_in_background_fails_the_node_and_keeps_the_record(
    make: Any, windowed: bool, caplog: Any
) -> None:
    """A raise-policy error in background work is never a silent drop.

    The record stays incomplete (a source never commits past it) and in
    flight (a checkpoint cannot pass it), the error is logged once, and the
    node refuses later records; a running Job stops on ``node.failure``.
    """

    async def main() -> None:
        s = Stream()
        seen: list[Any] = []

        def boom(x: Any) -> None:
            if x == 1:
                raise ValueError("bad record")
            seen.append(x)

        out = make(s)
        out.sink(boom)
        node = out if out.upstreams[0] is s else out.upstreams[0]
        _, fired0, _ = send(s, 0)
        _, fired1, results = send(s, 1)
        if results:  # rate_limit: the upstream awaiting the record fails too
            with pytest.raises(NodeFailedError, match="bad record"):
                await runtime.gather_results(results)
        await wait_for_async(lambda: node.failure is not None)
        await asyncio.sleep(0.02)
        # a window emits 0 and 1 together: the failed emit completes neither
        assert seen == [0] and fired0 == ([] if windowed else [1])
        assert fired1 == []
        assert node.in_flight == 1
        with pytest.raises(NodeFailedError, match=re.escape("failed earlier (ValueError")):
            s.emit(2)
        assert seen == [0]

    run(main())
    assert caplog.text.count("failed: ValueError: bad record") == 1


def test_source_position_moves_only_after_rate_limited_record_was_delivered() -> None:
    async def main() -> None:
        gate = Gate()
        source = Stream.from_iterable(["a", "b", "c"])
        gated_sink(source.rate_limit(0.001), gate)
        source.start()
        await wait_for_async(lambda: gate.seen == ["a"])
        assert source.position() == 0  # "a" is not finished downstream yet
        gate.open()
        await source.wait_finished()
        assert gate.done == ["a", "b", "c"] and source.position() == 3

    run(main())


def test_buffer_between_source_and_slow_sink_keeps_order() -> None:
    async def main() -> None:
        out: list[int] = []

        async def slow(x: int) -> None:
            await asyncio.sleep(0)
            out.append(x)

        source = Stream.from_iterable(range(50))
        source.buffer(4).sink(slow)
        source.start()
        await source.wait_finished()
        await wait_for_async(lambda: len(out) == 50)
        assert out == list(range(50))

    run(main())
