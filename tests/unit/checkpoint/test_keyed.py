"""Incremental checkpoints of KeyedState: deltas, bases, compaction, retention, damage."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import CheckpointCorruptError, Job, LocalDirectoryStore
from rivermark.checkpoint.errors import ManifestError
from rivermark.checkpoint.state.keyed import COMPACT_EVERY
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.tools.inspection import chain_sizes, read_node_state, show_checkpoint
from rivermark.cli import main
from rivermark.state import DELETED


def count(acc: KeyedState, key: int) -> KeyedState:
    n = acc.get(key, 0) + 1
    if n >= 7:
        del acc[key]
    else:
        acc[key] = n
    return acc


def keys(n: int, hot: int) -> list[int]:
    return [(i * 7) % hot for i in range(n)]


def build(records: list[int], start: Any, out: Path) -> tuple[Stream, Stream]:
    source = Stream.from_iterable(records, name="keys")
    acc = source.accumulate(count, start=start, name="counts")
    acc.map(len).sink_to_textfile(str(out))
    return source, acc


def expected(records: list[int], initial: dict[int, int]) -> tuple[dict[int, int], str]:
    state, lines = dict(initial), []
    for k in records:
        count(state, k)  # type: ignore[arg-type]
        lines.append(f"{len(state)}\n")
    return state, "".join(lines)


def run_in_steps(
    records: list[int], initial: dict[int, int], out: Path, ckpt: Path, steps: int, **kw: Any
) -> Stream:
    """Run jobs over growing prefixes of ``records``: one (final) checkpoint each."""
    acc: Stream | None = None
    for i in range(1, steps + 1):
        part = records[: len(records) * i // steps]
        source, acc = build(part, KeyedState(initial if i == 1 else {}), out)
        Job(source, checkpoint=ckpt, every=None, **kw).run()
    assert acc is not None
    return acc


def test_keyed_state_records_set_and_deleted_keys_and_hands_them_over() -> None:
    ks = KeyedState({1: "a", 2: "b"})
    first = ks.take_delta()
    assert first.complete and first.changes == {1: "a", 2: "b"}
    ks[3] = "c"
    del ks[1]
    second = ks.take_delta()
    assert not second.complete and second.changes == {3: "c", 1: DELETED}
    assert second.lineage == first.lineage and ks.pending_changes() == 0
    assert dict(ks) == {2: "b", 3: "c"} and ks == {2: "b", 3: "c"}
    again = pickle.loads(pickle.dumps(ks))  # pickled whole: every key pending
    assert again == ks and again.take_delta().complete
    assert pickle.loads(pickle.dumps(DELETED)) is DELETED


def test_a_checkpoint_writes_only_the_changed_keys_and_restores_exactly(tmp_path: Path) -> None:
    initial = {k: 1 for k in range(0, 40_000, 2)}
    records = keys(500, 10)
    out, ckpt = tmp_path / "out.txt", tmp_path / "c"
    _, acc = build(records, KeyedState(initial), out)
    Job(_, checkpoint=ckpt, every=None).run()
    store = LocalDirectoryStore(ckpt)
    assert store.list_epochs() == [1, 2]
    m1, m2 = store.verify(1), store.verify(2)
    assert m1.chains == {"counts": {"parent": None, "base": 1}} and m1.format == 4
    assert m2.chains == {"counts": {"parent": 1, "base": 1}}
    # the delta holds the 10 hot keys, not the 20,000 loaded ones
    assert m2.state["counts"]["size"] * 50 < m1.state["counts"]["size"]
    info = show_checkpoint(store)
    assert info["chains"]["counts"] == {
        "base": 1,
        "base_size": m1.state["counts"]["size"],
        "deltas": [[2, m2.state["counts"]["size"]]],
        "delta_size": m2.state["counts"]["size"],
    }
    final, text = expected(records, initial)
    assert dict(acc.state) == final and out.read_text() == text
    assert read_node_state(store, 2, "counts") == {"state": final}
    # a new run restores base + delta and goes on with a delta on top of 2
    more = keys(300, 13)
    source, acc2 = build(records + more, KeyedState(), out)
    job = Job(source, checkpoint=ckpt, every=None)
    job.run()
    assert job.restored_epoch == 2 and isinstance(acc2.state, KeyedState)
    final2, text2 = expected(records + more, initial)
    assert dict(acc2.state) == final2 and out.read_text() == text2
    assert store.verify(3).chains["counts"] == {"parent": 2, "base": 1}


def test_checkpoints_show_and_verify_report_the_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "c"
    run_in_steps(keys(900, 10), {k: 1 for k in range(3000)}, tmp_path / "out.txt", ckpt, 3)
    store = LocalDirectoryStore(ckpt)
    sizes = [store.read_manifest(e).state["counts"]["size"] for e in (1, 2, 3, 4)]
    assert main(["checkpoints", "show", str(ckpt)]) == 0
    shown = capsys.readouterr().out
    assert f"delta chain: base 1 ({sizes[0]} bytes) + 3 delta(s) ({sum(sizes[1:])} bytes)" in shown
    path = store.epoch_dir(3) / "state" / "counts.pkl"
    path.write_bytes(b"x" + path.read_bytes()[1:])
    assert main(["checkpoints", "verify", str(ckpt)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["1", "ok"] and lines[1].split() == ["2", "ok"]
    assert "DAMAGED" in lines[2] and "DAMAGED" in lines[3] and "000000000003" in lines[3]


def test_compaction_writes_a_base_and_retention_keeps_what_a_chain_needs(tmp_path: Path) -> None:
    initial = {k: 1 for k in range(5000)}
    records = keys(6000, 40)
    out, ckpt = tmp_path / "out.txt", tmp_path / "c"
    run_in_steps(records, initial, out, ckpt, 10, keep=2, compact_every=4)
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    assert epochs[-1] == 11  # the start checkpoint and one per run
    links = {e: store.read_manifest(e).chains["counts"] for e in epochs}
    # every kept checkpoint verifies: its base and deltas were not pruned
    for e in epochs:
        store.verify(e)
        chain = chain_sizes(store, e, "counts")
        # each run ends with its final checkpoint, which defers a compaction
        # (a delta, not a base) up to twice compact_every links
        assert len(chain["deltas"]) < 2 * 4 and chain["base"] in epochs
    # more than keep=2 are retained exactly when the newest ones need older links
    assert epochs[0] == min(link["base"] for link in links.values())
    assert any(link["parent"] is None for link in links.values())
    final, text = expected(records, initial)
    assert out.read_text() == text
    source, acc2 = build(records, KeyedState(), out)
    Job(source, checkpoint=ckpt, every=None).run()
    assert dict(acc2.state) == final


def test_a_final_checkpoint_writes_the_changes_when_a_compaction_is_due(tmp_path: Path) -> None:
    # the sources are held while the final checkpoint is written: it compacts
    # no chain (up to twice compact_every links), the next run's checkpoint does
    initial = {k: 1 for k in range(5000)}
    records = keys(2000, 40)
    out, ckpt = tmp_path / "out.txt", tmp_path / "c"
    kinds = []
    for i in range(1, 6):
        source, acc = build(records[: 400 * i], KeyedState(initial if i == 1 else {}), out)
        job = Job(source, checkpoint=ckpt, every=None, compact_every=2)
        job.run()
        kinds.append(job.checkpoints[-1].kind)
    assert kinds == ["delta", "delta", "delta", "full", "delta"]
    final, text = expected(records, initial)
    assert dict(acc.state) == final and out.read_text() == text


def test_a_damaged_delta_fails_verify_of_later_checkpoints_and_recovery_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    initial = {k: 0 for k in range(1000)}
    records = keys(3000, 30)
    out, ckpt = tmp_path / "out.txt", tmp_path / "c"
    run_in_steps(records[:2000], initial, out, ckpt, 4, keep=50, compact_every=50)
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    assert epochs == [1, 2, 3, 4, 5]
    damaged = epochs[1]  # the first delta on top of the base
    assert store.read_manifest(damaged).chains["counts"]["parent"] == epochs[0]
    path = store.epoch_dir(damaged) / store.read_manifest(damaged).state["counts"]["file"]
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    for e in epochs[1:]:
        with pytest.raises(CheckpointCorruptError, match=re.escape(str(store.epoch_dir(damaged)))):
            store.verify(e)
    store.verify(epochs[0])
    # the resumed job falls back to the base before the damage: output still exact
    source, acc = build(records, KeyedState(), out)
    job = Job(source, checkpoint=ckpt, every=None)
    with caplog.at_level("WARNING"):
        job.run()
    assert job.restored_epoch == epochs[0]
    assert "skipping damaged checkpoint 5" in caplog.text
    final, text = expected(records, initial)
    assert dict(acc.state) == final and out.read_text() == text


def test_the_manifest_checksum_covers_the_chain_and_a_bad_link_is_refused() -> None:
    m = Manifest(
        epoch=5, time=0.0, fingerprint={},
        state={"n": {"file": "state/n.pkl", "size": 1, "sha256": "0" * 64}},
        chains={"n": {"parent": 4, "base": 2}},
    )  # fmt: skip
    text = m.to_json()
    assert Manifest.from_json(text).chains == {"n": {"parent": 4, "base": 2}}
    with pytest.raises(ManifestError, match="checksum mismatch"):
        Manifest.from_json(text.replace('"parent": 4', '"parent": 3'))
    m.chains["n"]["parent"] = 7  # after its own epoch: written with a valid checksum
    with pytest.raises(ManifestError, match=re.escape("'parent' must be an earlier epoch")):
        Manifest.from_json(m.to_json())


def test_a_function_that_returns_a_new_mapping_is_exact_but_writes_bases(
    tmp_path: Path,
) -> None:
    def replace(acc: KeyedState, key: int) -> KeyedState:
        new = {k: v for k, v in acc.items() if k != key - 1}
        new[key] = 1
        return KeyedState(new)

    records = list(range(50))
    ckpt = tmp_path / "c"
    source = Stream.from_iterable(records, name="keys")
    acc = source.accumulate(replace, start=KeyedState({-1: 0, 100: 5}), name="counts")
    Job(source, checkpoint=ckpt, every=None, every_batches=10, background=False).run()
    store = LocalDirectoryStore(ckpt)
    assert all(
        store.read_manifest(e).chains["counts"]["parent"] is None for e in store.list_epochs()
    )
    source = Stream.from_iterable(records, name="keys")
    acc2 = source.accumulate(replace, start=KeyedState(), name="counts")
    Job(source, checkpoint=ckpt, every=None).run()
    assert dict(acc2.state) == dict(acc.state) == {49: 1, 100: 5}


def test_prune_keeps_what_the_kept_checkpoints_build_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = keys(3000, 97)
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"
    run_in_steps(records[:2000], {}, out, ckpt, 9, keep=50, compact_every=4)
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    newest = store.read_manifest(epochs[-1])
    base = newest.chains["counts"]["base"]
    assert base < epochs[-1]  # the newest checkpoint is a delta
    assert main(["checkpoints", "list", str(ckpt)]) == 0
    listed = capsys.readouterr().out
    assert " delta " in listed and " full " in listed
    assert main(["checkpoints", "prune", str(ckpt), "--keep", "1", "--dry-run"]) == 0
    assert "would delete" in capsys.readouterr().out
    assert store.list_epochs() == epochs
    # refused while a job holds the store
    holder = LocalDirectoryStore(ckpt)
    holder.lock()
    try:
        assert main(["checkpoints", "prune", str(ckpt), "--keep", "1"]) != 0
        assert "in use by another job" in capsys.readouterr().err
    finally:
        holder.unlock()
    assert main(["checkpoints", "prune", str(ckpt), "--keep", "1"]) == 0
    left = store.list_epochs()
    assert left == [e for e in epochs if e >= base] and len(left) < len(epochs)
    assert main(["checkpoints", "verify", str(ckpt)]) == 0
    capsys.readouterr()
    # the job resumes from what is left as if nothing had been pruned
    source, _ = build(records, KeyedState(), out)
    Job(source, checkpoint=ckpt, every=None).run()
    assert out.read_text() == expected(records, {})[1]
    assert main(["checkpoints", "prune", str(ckpt), "--keep", "0"]) == 2
    assert "--keep" in capsys.readouterr().err


def test_retention_stays_bounded_when_chains_would_compact_at_different_checkpoints(
    tmp_path: Path,
) -> None:
    # "small" has a handful of keys (its deltas soon outweigh its base, so it
    # starts over on its own), "big" many: their chains would drift apart, and
    # each checkpoint kept for one chain would hold the other's reaching further
    # back. Compacting every chain at the same barrier keeps retention bounded.
    records = [(i * 7919) % 5000 for i in range(30_000)]
    source = Stream.from_iterable(records, name="keys")
    big = source.accumulate(count, start=KeyedState(), name="big")
    small = source.map(lambda k: k % 3).accumulate(count, start=KeyedState(), name="small")
    big.map(len).sink_to_list()
    small.map(len).sink_to_list()
    ckpt = tmp_path / "ckpt"
    sizes = []

    class Watch(LocalDirectoryStore):
        def prune(self, keep: int) -> list[int]:
            gone = super().prune(keep)
            sizes.append(len(self.list_epochs()))
            return gone

    Job(
        source, checkpoint=Watch(ckpt), every=None, every_batches=500, keep=2, compact_every=3
    ).run()
    assert len(sizes) >= 40
    # the newest two and what they build on: at most one compaction interval more
    assert max(sizes) <= 2 + 3, sizes
    store = LocalDirectoryStore(ckpt)
    newest = store.read_manifest(store.list_epochs()[-1])
    assert len({link["base"] for link in newest.chains.values()}) <= 2


def test_the_digests_a_job_keeps_of_its_chains_end_at_the_newest_base(tmp_path: Path) -> None:
    records = keys(12_000, 50)
    source, acc = build(records, KeyedState(), tmp_path / "out.txt")
    job = Job(source, checkpoint=tmp_path / "c", every=None, every_batches=200)
    job.run()
    chains = job._cycle.keyed  # noqa: SLF001 - the job's book of chains
    assert len(job.checkpoints) > 2 * COMPACT_EVERY  # two compactions at least
    assert 1 <= len(chains.known["counts"]) <= COMPACT_EVERY + 1
