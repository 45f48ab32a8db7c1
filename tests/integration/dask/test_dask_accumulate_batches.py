"""A scattered accumulate that feeds ``gather`` folds the records of one loop turn in one task.

The records come from a running source (``from_iterable``), so many of them
reach the accumulate before the loop turns; each test checks the output
against ``itertools.accumulate`` and, where it matters, that fewer tasks than
records ran (the batching is real).
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
from typing import Any

import cloudpickle
import pytest
from distributed import Client, get_task_stream

from rivermark import Stream
from rivermark.dask import DaskAccumulate, DaskGather
from rivermark.errors import describe
from rivermark.testing import wait_for

# the workers cannot import this test module: ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.dask


def add(a: int, b: int) -> int:
    return a + b


def picky_add(a: int, b: int) -> int:
    if b % 7 == 3:
        raise ValueError(f"no {b}")
    return a + b


def slow_add(a: int, b: int) -> int:
    time.sleep(0.002)
    return a + b


def stats(state: tuple[int, int], x: int) -> tuple[tuple[int, int], int]:
    new = (state[0] + 1, state[1] + x)
    return new, new[1] // new[0]


def run_source(items: list[Any], build: Any, timeout: float = 60) -> tuple[DaskGather, list[Any]]:
    """Run ``from_iterable(items)`` through ``build`` on the graph's loop until drained."""
    source = Stream.from_iterable(items)
    g = build(source)
    out = g.sink_to_list()
    source.start()
    wait_for(
        lambda: len(out) + g.error_count >= len(items) or g.failure is not None,
        timeout,
        f"{len(items)} results",
        interval=0.01,
    )
    g.flush(timeout=timeout)
    return g, out


def count_tasks(client: Client, prefix: str, run: Any) -> tuple[int, Any]:
    with get_task_stream(client=client) as ts:
        result = run()
    keys = {t["key"] for t in ts.data if str(t["key"]).startswith(prefix)}
    return len(keys), result


def test_records_share_tasks_and_results_match_local(client: Client) -> None:
    items = list(range(400))
    n_tasks, (g, out) = count_tasks(
        client,
        "add-",
        lambda: run_source(items, lambda s: s.scatter().accumulate(add, start=5).gather()),
    )
    assert out == list(itertools.accumulate(items, add, initial=5))[1:]
    # one task per record each for the step and its result before batching;
    # batches are smaller on a busy machine (fewer records per loop turn), so
    # the test asks only for an average batch of more than two records
    assert 0 < n_tasks < len(items) // 2, n_tasks
    assert g.in_flight == 0


def test_error_in_the_middle_of_a_batch_keeps_the_previous_state(client: Client) -> None:
    items = list(range(200))
    g, out = run_source(
        items, lambda s: s.scatter().accumulate(picky_add, start=0).gather(on_error="skip")
    )
    kept = [x for x in items if x % 7 != 3]
    assert out == list(itertools.accumulate(kept, add))
    assert g.error_count == len(items) - len(kept)


def test_error_in_a_batch_with_raise_names_the_function_and_record(client: Client) -> None:
    source = Stream.from_iterable(list(range(50)))
    g = source.scatter().accumulate(picky_add, start=0).gather()
    out = g.sink_to_list()
    source.start()
    wait_for(lambda: g.failure is not None, 60, "the failure to reach gather", interval=0.01)
    with pytest.raises(ValueError, match="no 3") as info:  # the user function's own error
        g.flush(timeout=30)
    assert info.value.rivermark_context.function == "picky_add"
    assert "record 3 of an accumulate batch" in describe(g.failure)
    assert out == [0, 1, 3]
    # the failed record is not completed: a checkpoint must not pass it
    assert g.in_flight >= 1


def test_returns_state_and_with_state_in_batches(client: Client) -> None:
    items = list(range(1, 101))
    _, out = run_source(
        items,
        lambda s: (
            s.scatter()
            .accumulate(stats, start=(0, 0), returns_state=True, with_state=True)
            .gather()
        ),
    )
    expected = []
    state = (0, 0)
    for x in items:
        state, result = stats(state, x)
        expected.append((state, result))
    assert [(tuple(s), r) for s, r in out] == expected


def test_state_checkpointed_after_batches_and_restored(client: Client) -> None:
    def build(source: Stream) -> DaskGather:
        return source.scatter().accumulate(add, start=0, name="total").gather()

    items = list(range(300))
    g, out = run_source(items, build)
    acc = g.upstreams[0]
    assert isinstance(acc, DaskAccumulate)
    assert acc.get_state() == {"state": sum(items)}

    source2 = Stream.from_iterable([1000, 2000])
    g2 = build(source2)
    acc2 = g2.upstreams[0]
    assert isinstance(acc2, DaskAccumulate)
    acc2.set_state(acc.get_state())
    out2 = g2.sink_to_list()
    source2.start()
    wait_for(lambda: len(out2) >= 2, 60, "two results", interval=0.01)
    assert out2 == [sum(items) + 1000, sum(items) + 3000]


def test_worker_killed_during_batched_run_does_not_change_output(client: Client) -> None:
    victim = next(iter(client.run(os.getpid).values()))
    items = list(range(600))
    killed: list[int] = []
    source = Stream.from_iterable(items)
    g = source.scatter().accumulate(slow_add, start=0).gather(max_inflight=16)
    out: list[int] = []

    def collect(x: int) -> None:
        out.append(x)
        if len(out) == 50 and not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    g.sink(collect)
    source.start()

    def all_results() -> bool:
        assert g.failure is None, g.failure
        return len(out) >= len(items)

    wait_for(all_results, 120, f"{len(items)} results", interval=0.01)
    g.flush(timeout=30)
    assert killed == [victim]
    assert out == list(itertools.accumulate(items, add))
    client.wait_for_workers(2, timeout=180)
