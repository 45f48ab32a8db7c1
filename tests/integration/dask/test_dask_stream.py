"""Scattered streams on a real LocalCluster of worker processes."""

from __future__ import annotations

import itertools
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import cloudpickle
import pytest
from distributed import Client

from rivermark import RefCounter, Stream
from rivermark.checkpoint.state import codec
from rivermark.dask import (
    SCATTERED_OPERATORS,
    DaskAccumulate,
    DaskConnectionError,
    DaskGather,
    DaskStream,
    Remote,
    scattered_classes,
)
from rivermark.errors import ConfigurationError
from rivermark.testing import wait_for

# the workers cannot import this test module: ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.dask


def inc(x: int) -> int:
    return x + 1


def add(a: int, b: int) -> int:
    return a + b


def slow_square(x: int) -> int:
    # later records finish first: results must still come back in order
    time.sleep(0.002 * (20 - x % 20))
    return x * x


def fail_on_3(x: int) -> int:
    if x == 3:
        raise ValueError("three is bad")
    return x


def running_stats(state: tuple[int, int], x: int) -> tuple[tuple[int, int], float]:
    n, total = state
    n, total = n + 1, total + x
    return (n, total), total / n


def run(source: Stream, gathered: DaskGather, items: list[Any]) -> None:
    for x in items:
        source.emit(x)
    gathered.flush(timeout=30)


def run_pipelined(source: Stream, gathered: DaskGather, out: list[Any], n: int) -> None:
    """Run a started source (it keeps futures in flight; a plain emit waits for each result)."""
    source.start()
    wait_for(lambda: len(out) >= n, timeout=60)
    gathered.flush(timeout=30)


# ---------------------------------------------------------------- same output as local
def test_map_accumulate_matches_local(client: Client) -> None:
    items = list(range(30))
    local = Stream()
    mapped = local.map(inc).sink_to_list()
    for x in items:
        local.emit(x)
    expected = list(itertools.accumulate(mapped, add))
    source = Stream()
    g = source.scatter().map(inc).accumulate(add, start=0).gather()
    out = g.sink_to_list()
    run(source, g, items)
    assert out == expected
    assert out[-1] == sum(range(1, 31))


def slow_inc(x: int) -> int:
    time.sleep(0.05)
    return x + 1


def test_emit_returns_once_gather_passed_the_result_on(client: Client) -> None:
    # as in streamz: a synchronous emit waits for the gathered value to reach the sink
    source = Stream()
    g = source.scatter().map(slow_inc).gather()
    out = g.sink_to_list()
    for i in range(5):
        source.emit(i)
        assert out == [j + 1 for j in range(i + 1)]
    assert g.in_flight == 0


def test_starmap_and_map_args(client: Client) -> None:
    source = Stream()
    g = source.scatter().starmap(lambda a, b, k: (a - b) * k, 3).map(add, 100).gather()
    out = g.sink_to_list()
    run(source, g, [(5, 1), (2, 2), (0, 4)])
    assert out == [112, 100, 88]


@pytest.mark.parametrize(
    ("kwargs", "first_is_passthrough"),
    [({}, True), ({"start": 10}, False)],
)
def test_accumulate_start_like_local(
    client: Client, kwargs: dict[str, Any], first_is_passthrough: bool
) -> None:
    source = Stream()
    g = source.scatter().accumulate(add, **kwargs).gather()
    out = g.sink_to_list()
    run(source, g, [1, 2, 3])
    assert out == ([1, 3, 6] if first_is_passthrough else [11, 13, 16])


def test_accumulate_returns_state_and_with_state(client: Client) -> None:
    source = Stream()
    acc = source.scatter().accumulate(
        running_stats, start=(0, 0), returns_state=True, with_state=True
    )
    g = acc.gather()
    out = g.sink_to_list()
    run(source, g, [2, 4, 9])
    assert out == [((1, 2), 2.0), ((2, 6), 3.0), ((3, 15), 5.0)]


def test_results_in_order_with_several_in_flight(client: Client) -> None:
    items = list(range(40))
    source = Stream.from_iterable(items)
    g = source.scatter().map(slow_square).gather(max_inflight=8)
    seen_pending: list[int] = []
    out: list[int] = []

    def record(x: int) -> None:
        seen_pending.append(len(g._pending))
        out.append(x)

    g.sink(record)
    run_pipelined(source, g, out, len(items))
    assert out == [x * x for x in items]
    assert max(seen_pending) > 1, "futures were gathered one at a time"
    assert max(seen_pending) <= 8, "more futures in flight than max_inflight"
    assert g.in_flight == 0


def timed_sleep(x: int) -> tuple[int, int, float, float]:
    start = time.time()
    time.sleep(0.1)
    return x, os.getpid(), start, time.time()


def test_tasks_really_run_in_parallel_on_worker_processes(client: Client) -> None:
    worker_pids = set(client.run(os.getpid).values())
    source = Stream.from_iterable(range(12))
    g = source.scatter().map(timed_sleep).gather(max_inflight=4)
    out = g.sink_to_list()
    run_pipelined(source, g, out, 12)
    assert [x for x, *_ in out] == list(range(12))
    assert {pid for _, pid, _, _ in out} == worker_pids, "not every worker process ran tasks"
    assert os.getpid() not in worker_pids
    # two tasks on different processes whose run times overlap
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(out, 2)
        if a[1] != b[1] and a[2] < b[3] and b[2] < a[3]
    ]
    assert len(overlapping) >= 3, out


def test_a_full_window_holds_the_source_back(client: Client) -> None:
    source = Stream.from_iterable(range(30), name="numbers")
    g = source.scatter().map(slow_square).gather(max_inflight=3)
    ahead: list[int] = []

    def record(x: int) -> None:
        # records the source has emitted but gather has not yet emitted (this one included)
        ahead.append(source.emitted - len(ahead))

    g.sink(record)
    source.start()

    wait_for(lambda: len(ahead) == 30, timeout=60)
    assert max(ahead) <= 3 + 1, ahead  # the window, plus the emit waiting for room
    assert max(ahead) >= 2, "the source never got ahead: no futures in flight together"


def test_refs_released_only_after_downstream_received(client: Client) -> None:
    source = Stream()
    g = source.scatter().map(inc).gather(max_inflight=4)
    out = g.sink_to_list()
    seen_when_done: list[int] = []
    refs = []
    for x in range(10):
        ref = RefCounter(initial=1, callback=lambda: seen_when_done.append(len(out)))
        refs.append(ref)
        source.emit(x, metadata=[{"ref": ref}])
        ref.release()  # the emitter's own hold
    g.flush(timeout=30)
    assert out == list(range(1, 11))
    assert all(r.done for r in refs)
    # record i completed only once its result (the (i+1)-th output) had been emitted
    assert seen_when_done == sorted(seen_when_done)
    assert all(n >= i + 1 for i, n in enumerate(seen_when_done))


# ---------------------------------------------------------------- errors
def test_user_error_skip_drops_the_record(client: Client) -> None:
    source = Stream()
    g = source.scatter().map(fail_on_3).gather(on_error="skip")
    out = g.sink_to_list()
    run(source, g, [1, 2, 3, 4])
    assert out == [1, 2, 4]
    assert g.error_count == 1


def test_user_error_raise_fails_gather_and_names_the_task(client: Client) -> None:
    source = Stream()
    g = source.scatter().map(fail_on_3).gather()
    out = g.sink_to_list()
    for x in [1, 2]:
        source.emit(x)
    # the emit waits for the gathered value: it raises the user's own exception,
    # as in streamz, naming the task that raised it
    with pytest.raises(ValueError, match="three is bad") as info:
        source.emit(3)
    assert "task 'fail_on_3-" in info.value.rivermark_context.function
    assert out == [1, 2]
    with pytest.raises(ValueError, match="three is bad"):
        g.flush(timeout=30)
    # the failed record is not completed: a checkpoint must not pass it
    assert g.in_flight == 1


def test_accumulate_error_keeps_previous_state(client: Client) -> None:
    def picky_add(a: int, b: int) -> int:
        if b < 0:
            raise ValueError("negative")
        return a + b

    source = Stream()
    g = source.scatter().accumulate(picky_add, start=0).gather(on_error="skip")
    out = g.sink_to_list()
    run(source, g, [1, 2, -5, 3])
    assert out == [1, 3, 6]


def test_bad_arguments_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("scatter: client must be")):
        Stream().scatter(client="localhost:8786")
    with pytest.raises(ConfigurationError, match=re.escape("max_inflight must be an integer")):
        Stream().scatter().gather(max_inflight=0)
    with pytest.raises(ConfigurationError, match=re.escape("map: func must be callable")):
        Stream().scatter().map(3)


# ---------------------------------------------------------------- checkpoint state
def test_accumulate_state_is_fetched_and_restored(client: Client) -> None:
    def build() -> tuple[Stream, DaskAccumulate, DaskGather, list[int]]:
        source = Stream()
        acc = source.scatter().accumulate(add, start=0)
        g = acc.gather()
        return source, acc, g, g.sink_to_list()

    source, acc, g, out = build()
    run(source, g, [1, 2, 3])
    state = acc.get_state()
    assert state == {"state": 6}
    assert acc.is_stateful
    assert "DaskAccumulate" in acc.state_signature()
    # the lineage was cut but the stream goes on from the same value
    run(source, g, [4])
    assert out == [1, 3, 6, 10]

    source2, acc2, g2, out2 = build()
    acc2.set_state(state)
    run(source2, g2, [4, 5])
    assert out2 == [10, 15]


def test_accumulate_state_before_first_record_round_trips(client: Client) -> None:
    source = Stream()
    acc = source.scatter().accumulate(add)
    state = acc.get_state()
    acc.set_state(state)
    g = acc.gather()
    out = g.sink_to_list()
    run(source, g, [5, 6])
    assert out == [5, 11]


def test_remote_state_helpers_round_trip(client: Client) -> None:
    from rivermark.dask.core import _fetch_sync, _rebuild

    node = Stream().scatter()
    futs = [client.submit(inc, i, pure=False) for i in range(3)]
    state = {"buf": [futs[0], (futs[1], 7)], "last": futs[2]}
    fetched = _fetch_sync(node, state)
    assert fetched == {"buf": [Remote(1), (Remote(2), 7)], "last": Remote(3)}
    back = _rebuild(fetched, lambda r: client.submit(inc, r.value, pure=False), Remote)
    assert client.gather(back["buf"][1][0]) == 3


def test_remote_in_a_written_checkpoint_still_loads() -> None:
    # checkpoints pickle Remote by its module path; a state written earlier names this one
    written = b"\x80\x02crivermark.dask.core\nRemote\nq\x00)\x81q\x01}q\x02X\x05\x00\x00\x00valueq\x03K\x03sb."
    assert pickle.loads(written) == Remote(3)
    assert pickle.dumps(Remote(3), protocol=2) == written


def test_remote_is_written_as_data_not_as_a_pickle() -> None:
    blob = codec.dumps({"buf": [(Remote(1), 7)], "last": Remote([2, 3])})
    assert not codec.has_pickle(blob)
    assert codec.loads(blob) == {"buf": [(Remote(1), 7)], "last": Remote([2, 3])}


# ---------------------------------------------------------------- structural operators
def _builders() -> dict[str, Any]:
    """streamz name -> function(stream, other) -> node, used with the same args locally."""
    return {
        "buffer": lambda s, o: s.buffer(4),
        "zip": lambda s, o: s.zip(o),
        "combine_latest": lambda s, o: s.combine_latest(o, emit_on=s),
        "union": lambda s, o: s.union(o),
        "partition": lambda s, o: s.partition(3),
        "sliding_window": lambda s, o: s.sliding_window(3, return_partial=False),
        "latest": lambda s, o: s.latest(),
        "delay": lambda s, o: s.delay(0.001),
        "rate_limit": lambda s, o: s.rate_limit(0.0005),
        "timed_window": None,  # output depends on timing; checked separately for types only
    }


def test_every_local_structural_operator_has_a_scattered_twin() -> None:
    assert set(SCATTERED_OPERATORS) == {
        "buffer", "zip", "combine_latest", "union", "partition",
        "sliding_window", "timed_window", "delay", "latest", "rate_limit",
    }  # fmt: skip
    for name in SCATTERED_OPERATORS:
        local_attr = Stream.__dict__[name]
        cls = scattered_classes[name]
        assert issubclass(cls, DaskStream)
        assert issubclass(cls, local_attr.__wrapped__)
        assert DaskStream.__dict__[name].__wrapped__ is cls


def test_structural_operators_match_local(client: Client) -> None:
    """Each scattered operator gives the same output as the local one (those present)."""
    checked = []
    items = list(range(12))
    for name, build in _builders().items():
        if build is None:
            continue
        a, b = Stream(), Stream()
        local_node = build(a, b)
        expected = local_node.sink_to_list()
        sa, sb = Stream(), Stream()
        node = build(sa.scatter(), sb.scatter())
        assert isinstance(node, DaskStream)
        g = node.gather()
        out = g.sink_to_list()
        for x in items:
            a.emit(x)
            b.emit(-x)
            sa.emit(x)
            sb.emit(-x)
        g.flush(timeout=30)
        assert [_plain(v) for v in out] == [_plain(v) for v in expected], name
        checked.append(name)
    assert sorted(checked) == sorted(n for n in SCATTERED_OPERATORS if n != "timed_window")


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) else v


# ---------------------------------------------------------------- failures of the cluster
def test_worker_killed_mid_run_does_not_change_output(client: Client) -> None:
    before = client.run(os.getpid)
    victim = next(iter(before.values()))
    items = list(range(60))
    expected = list(itertools.accumulate((x * x for x in items), add))

    source = Stream()
    g = source.scatter().map(slow_square).accumulate(add, start=0).gather(max_inflight=16)
    out: list[int] = []
    killed: list[int] = []

    def collect(x: int) -> None:
        out.append(x)
        if len(out) == 10 and not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    g.sink(collect)
    run(source, g, items)
    assert killed == [victim]
    assert out == expected
    client.wait_for_workers(2, timeout=180)
    assert victim not in client.run(os.getpid).values()


def test_lost_scheduler_is_an_error_that_says_so(tmp_path: Any) -> None:
    # a scheduler of our own in a separate process, killed with SIGKILL
    scheduler_file = tmp_path / "scheduler.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(scheduler_file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        own = Client(scheduler_file=str(scheduler_file), set_as_default=False, timeout=5)
        source = Stream()
        # no worker: the task stays pending until the scheduler disappears
        g = source.scatter(client=own).map(inc).gather()
        out = g.sink_to_list()
        ref = RefCounter(initial=1)
        # the emit waits for the gathered value (as in streamz): it ends with the scheduler
        emit_error: list[BaseException] = []

        def emit_one() -> None:
            try:
                source.emit(1, metadata=[{"ref": ref}])
            except BaseException as e:  # noqa: BLE001 - inspected below
                emit_error.append(e)

        emitter = threading.Thread(target=emit_one, daemon=True)
        emitter.start()
        wait_for(lambda: g._accepted == 1, timeout=30)
        ref.release()
        proc.kill()
        proc.wait(timeout=10)
        with pytest.raises(DaskConnectionError, match="lost the connection to the Dask scheduler"):
            g.flush(timeout=30)
        emitter.join(timeout=30)
        assert not emitter.is_alive()
        assert [type(e) for e in emit_error] == [DaskConnectionError]
        assert out == []
        assert not ref.done, "a record lost with the scheduler must not count as complete"
        with pytest.raises(DaskConnectionError, match="lost the connection"):
            source.emit(2)
        own.close(timeout=5)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_scattered_buffer_state_holds_values_not_futures(client: Client) -> None:
    source = Stream()
    buf = source.scatter().map(inc).buffer(4)
    assert type(buf).__name__ == "DaskBuffer"
    assert buf.state_signature() == "DaskBuffer(n=4)"
    # a record parked in the buffer, as a checkpoint barrier would find it
    buf._items.append((client.submit(inc, 41, pure=False), None))
    state = buf.get_state()
    assert state == {"items": [Remote(42)]}
    cloudpickle.loads(cloudpickle.dumps(state))

    source2 = Stream()
    buf2 = source2.scatter().map(inc).buffer(4)
    g2 = buf2.gather()
    out = g2.sink_to_list()
    buf2.set_state(state)
    run(source2, g2, [1])
    assert out == [42, 2]


def test_scattered_timed_window_gathers_lists_of_values(client: Client) -> None:

    source = Stream()
    g = source.scatter().map(inc).timed_window(0.01).gather()
    out = g.sink_to_list()
    for x in range(6):
        source.emit(x)
    wait_for(lambda: sum(len(w) for w in out) == 6, timeout=20)
    g.flush(timeout=20)
    assert [v for w in out for v in w] == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(w, list) for w in out)
