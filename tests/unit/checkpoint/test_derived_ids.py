"""Restores of unnamed nodes: a changed pipeline in front is refused; legacy ids are mapped."""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointMismatchError, Job, LocalDirectoryStore
from rivermark.checkpoint.protocol.upgrade import UpgradeRules, plan_restore
from rivermark.core import graph

from .conftest import total

RECOVERY = "rivermark.checkpoint.protocol.recovery"
LEGACY_LINE = "holds the node ids of rivermark before readable ids"


def parity(x: int) -> int:
    return x % 3


def doubled(acc: int, x: int) -> int:
    return acc + 2 * x


class Program:
    """from_iterable -> map -> accumulate and frequencies, all unnamed; optional self-stop."""

    def __init__(
        self,
        n: int,
        stop_at: int | None = None,
        insert: bool = False,
        func: Any = total,
    ) -> None:
        self.source = Stream.from_iterable(list(range(n)))
        self.job: Job | None = None
        up = self.source.map(self._maybe_stop)
        if insert:
            up = up.map(lambda x: x)
        self.sums = up.accumulate(func, start=0).sink_to_list()
        self.counts = up.map(parity).frequencies().sink_to_list()
        self.stop_at = stop_at

    def _maybe_stop(self, x: int) -> int:
        if x == self.stop_at and self.job is not None:
            self.job.stop()
        return x

    def run(self, where: Path, **job: Any) -> Job:
        self.job = Job(self.source, checkpoint=where, **job)
        self.job.run()
        return self.job


def running_sums(n: int, func: Any = total) -> list[int]:
    out, acc = [], 0
    for x in range(n):
        acc = func(acc, x)
        out.append(acc)
    return out


def newest(where: Path) -> Any:
    store = LocalDirectoryStore(where)
    return store.load_manifest(store.list_epochs()[-1])


def test_a_changed_pipeline_in_front_of_an_unnamed_stateful_node_is_refused(
    tmp_path: Path,
) -> None:
    first = Program(300, stop_at=120)
    first.run(tmp_path, every_batches=16)
    assert 0 < len(first.sums) < 300
    epochs = LocalDirectoryStore(tmp_path).list_epochs()
    with pytest.raises(CheckpointMismatchError) as info:
        Program(300, insert=True).run(tmp_path, every_batches=16)
    msg = str(info.value)
    assert "moved: accumulate-1:total: the pipeline in front of node accumulate-1:total" in msg
    assert "moved: frequencies-1: the pipeline in front of node frequencies-1" in msg
    assert "pass name='accumulate-1:total' to it" in msg
    # nothing was written by the refused job
    assert LocalDirectoryStore(tmp_path).list_epochs() == epochs
    # the same graph as before restores exactly
    again = Program(300)
    again.run(tmp_path, every_batches=16)
    assert again.sums == running_sums(300)
    assert again.counts[-1] == Counter(parity(x) for x in range(300))


def test_an_unnamed_node_renumbered_by_a_new_one_before_it_is_refused_with_the_rename(
    tmp_path: Path,
) -> None:
    def graph_with(extra: bool, n: int) -> tuple[Stream, list[int]]:
        # a root created first comes first: its accumulate takes the number 1
        other = Stream.from_iterable(list(range(n)), name="other") if extra else None
        source = Stream.from_iterable(list(range(n)), name="numbers")
        acc = source.accumulate(total, start=0)
        out = acc.sink_to_list(name="out")
        if other is not None:
            other.accumulate(total, start=0).union(acc).sink_to_list(name="both")
        return source, out

    Job(graph_with(False, 10)[0], checkpoint=tmp_path, every=None).run()
    assert "accumulate-1:total" in newest(tmp_path).fingerprint
    with pytest.raises(CheckpointMismatchError) as info:
        Job(graph_with(True, 10)[0], checkpoint=tmp_path, every=None, allow_new_nodes=True).run()
    msg = str(info.value)
    # the new node took the number 1, the old one is accumulate-2:total now
    assert "moved: accumulate-1:total: the pipeline in front of node accumulate-1:total" in msg
    assert "It matches accumulate-2:total here (the same configuration and place)" in msg
    assert "--rename accumulate-1:total=accumulate-2:total" in msg
    assert "pass name=" not in msg  # naming accumulate-1:total would give it the other's state
    # the remedy: the old state goes to the renumbered node, the new one starts empty
    source, out = graph_with(True, 12)
    Job(
        source,
        checkpoint=tmp_path,
        every=None,
        allow_new_nodes=True,
        rename={"accumulate-1:total": "accumulate-2:total"},
    ).run()
    assert out == running_sums(12)


def test_a_rename_onto_an_id_the_checkpoint_holds_does_not_mix_their_state(
    tmp_path: Path,
) -> None:
    def graph_with(n: int, start_b: int) -> tuple[Stream, list[int], list[int]]:
        source = Stream.from_iterable(list(range(n)), name="numbers")
        a = source.accumulate(total, start=0, name="a").sink_to_list(name="out-a")
        b = source.accumulate(total, start=start_b, name="b").sink_to_list(name="out-b")
        return source, a, b

    Job(graph_with(5, 1000)[0], checkpoint=tmp_path, every=None).run()
    # b's own state would be replaced by a's: refused, naming what is lost
    with pytest.raises(CheckpointMismatchError, match=r"displaced: b: the rename a=b gives b"):
        Job(graph_with(8, 1000)[0], checkpoint=tmp_path, every=None, rename={"a": "b"}).run()
    # allowed to drop b's state: b goes on from a's, a starts empty
    source, a, b = graph_with(8, 1000)
    Job(
        source,
        checkpoint=tmp_path,
        every=None,
        rename={"a": "b"},
        allow_dropped_state=["b"],
        allow_new_nodes=True,
    ).run()
    assert b[-1] == sum(range(8))  # a's 10, then 5 + 6 + 7: b's own 1010 is gone
    assert a[5:] == [5, 11, 18]  # after its restored list, from an empty sum


def _write_as_the_legacy_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids and signatures as rivermark wrote them before readable ids."""

    def legacy_signatures(node: Stream, keep: Any) -> dict[int, str]:
        return {id(n): n.state_signature() for n in graph.topological(node) if keep(n)}

    monkeypatch.setattr(graph, "node_ids", graph.legacy_node_ids)
    monkeypatch.setattr(graph, "signatures", legacy_signatures)


def _legacy_checkpoint(where: Path, monkeypatch: pytest.MonkeyPatch) -> Program:
    with monkeypatch.context() as m:
        _write_as_the_legacy_version(m)
        first = Program(300, stop_at=140)
        first.run(where, every_batches=16)
    written = newest(where)
    assert all(re.fullmatch(r"[a-z]+-[0-9a-f]{8}", k) for k in written.fingerprint), written
    assert not any(" after " in sig for sig in written.fingerprint.values())
    assert any(k.startswith("frequencies-") for k in written.chains)  # keyed state: a chain
    return first


def test_a_checkpoint_with_legacy_ids_restores_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    first = _legacy_checkpoint(tmp_path, monkeypatch)
    assert 0 < len(first.sums) < 300
    legacy_epoch = newest(tmp_path).epoch
    second = Program(300)
    with caplog.at_level(logging.INFO, logger=RECOVERY):
        job = second.run(tmp_path, every_batches=16)
    assert job.restored_epoch == legacy_epoch
    assert [m for m in caplog.messages if LEGACY_LINE in m] == [
        next(m for m in caplog.messages if LEGACY_LINE in m)
    ]
    line = next(m for m in caplog.messages if LEGACY_LINE in m)
    assert re.search(r"accumulate-[0-9a-f]{8} -> accumulate-1:total", line), line
    assert re.search(r"fromiterable-[0-9a-f]{8} -> fromiterable-1", line), line
    # state (the running sum, the keyed counts, the lists) and the position were restored
    assert second.sums == running_sums(300)
    assert second.counts[-1] == Counter(parity(x) for x in range(300))
    assert len(second.counts) == 300
    # the next checkpoints are written with the current ids, as a chain of their own
    now = newest(tmp_path)
    assert set(now.fingerprint) == {
        "fromiterable-1",
        "accumulate-1:total",
        "frequencies-1",
        "sinktolist-1",
        "sinktolist-2",
    }
    assert now.positions == {"fromiterable-1": 300}
    caplog.clear()
    third = Program(300)
    with caplog.at_level(logging.INFO, logger=RECOVERY):
        third.run(tmp_path, every_batches=16)
    assert third.sums == running_sums(300) and third.counts[-1] == second.counts[-1]
    assert not any(LEGACY_LINE in m for m in caplog.messages)


def test_rules_may_name_nodes_by_their_legacy_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _legacy_checkpoint(tmp_path, monkeypatch)
    legacy = newest(tmp_path)
    old_acc = next(k for k in legacy.fingerprint if k.startswith("accumulate-"))
    # the accumulate's function changed: its legacy id stays (it did not
    # depend on the function), its current id is accumulate-1:doubled
    changed = Program(300, func=doubled)
    with pytest.raises(CheckpointMismatchError, match=r"changed: accumulate-1:doubled: "):
        changed.run(tmp_path, every_batches=16)
    plan = plan_restore(legacy, Program(1, func=doubled).source, UpgradeRules())
    assert plan.legacy[old_acc] == "accumulate-1:doubled"
    # a migration keyed by the legacy id applies to the node
    changed = Program(300, func=doubled)
    job = changed.run(tmp_path, every_batches=16, migrate={old_acc: lambda old: old})
    resumed = job.restored_positions["fromiterable-1"]
    assert 0 < resumed < 300
    assert changed.sums[-1] == sum(range(resumed)) + 2 * sum(range(resumed, 300))


def test_a_legacy_checkpoint_of_a_graph_changed_in_front_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _legacy_checkpoint(tmp_path, monkeypatch)
    with pytest.raises(CheckpointMismatchError) as info:
        Program(300, insert=True).run(tmp_path, every_batches=16)
    msg = str(info.value)
    # the legacy ids do not match the changed graph: nothing is mapped, the pairs are named
    assert re.search(
        r"accumulate-[0-9a-f]{8} and accumulate-1:total look like the same node", msg
    ), msg
    assert re.search(r"--rename accumulate-[0-9a-f]{8}=accumulate-1:total", msg), msg
