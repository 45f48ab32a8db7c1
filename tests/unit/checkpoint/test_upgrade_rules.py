"""Upgrade rules of a restore (rename, dropped, added, migrated state), in memory."""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rivermark import Stream
from rivermark.checkpoint import CheckpointMismatchError, Job, LocalDirectoryStore
from rivermark.errors import ConfigurationError

from .conftest import total


def _freq(values: list[str], name: str) -> tuple[Stream, list[dict[str, int]]]:
    source = Stream.from_iterable(values, name="words")
    return source, source.frequencies(name=name).sink_to_list(name="out")


def test_renamed_keyed_state_goes_on_as_a_new_chain(tmp_path: Path) -> None:
    words = [f"w{i % 7}" for i in range(60)]
    Job(_freq(words[:20], "freq")[0], checkpoint=tmp_path, every_batches=3).run()
    # the renamed node's state comes from the old id; its later checkpoints are
    # deltas of a chain of its own, which the third run reads back
    source, out = _freq(words[:40], "counts")
    Job(source, checkpoint=tmp_path, every_batches=3, rename={"freq": "counts"}).run()
    assert out[-1] == Counter(words[:40])
    store = LocalDirectoryStore(tmp_path)
    newest = store.load_manifest(store.list_epochs()[-1])
    assert "counts" in newest.chains and "freq" not in newest.state
    source, out = _freq(words, "counts")
    Job(source, checkpoint=tmp_path, every_batches=3, rename={"freq": "counts"}).run()
    assert out[-1] == Counter(words)


def test_migration_turns_the_old_state_into_the_new(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def pair(acc: tuple[int, int], x: int) -> tuple[tuple[int, int], int]:
        s, n = acc
        return (s + x, n + 1), s + x

    source = Stream.from_iterable(list(range(10)), name="numbers")
    source.accumulate(total, start=0, name="sum").sink_to_list(name="out")
    Job(source, checkpoint=tmp_path, every=None).run()

    def graph() -> tuple[Stream, list[int], Any]:
        source = Stream.from_iterable(list(range(20)), name="numbers")
        node = source.accumulate(pair, start=(0, 0), name="sum", returns_state=True)
        return source, node.sink_to_list(name="out"), node

    with pytest.raises(CheckpointMismatchError) as info:
        Job(graph()[0], checkpoint=tmp_path, every=None).run()
    assert re.search(
        r"changed: sum: .*\(was Accumulate\(func=total.*now Accumulate\(", str(info.value)
    )
    assert "migrate={'sum'" in str(info.value)
    source, out, node = graph()
    with caplog.at_level(logging.INFO, logger="rivermark.checkpoint.protocol.recovery"):
        Job(
            source,
            checkpoint=tmp_path,
            every=None,
            migrate={"sum": lambda old: {"state": (old["state"], 10)}},
        ).run()
    assert out == [sum(range(k + 1)) for k in range(20)]
    assert node.state == (sum(range(20)), 20)
    assert sum("migrated: sum: state migrated from" in m for m in caplog.messages) == 1


def test_a_failing_migration_names_itself(tmp_path: Path) -> None:
    source = Stream.from_iterable([1, 2], name="numbers")
    source.accumulate(total, start=0, name="sum").sink_to_list(name="out")
    Job(source, checkpoint=tmp_path, every=None).run()

    def broken(old: Any) -> Any:
        raise KeyError("missing")

    source = Stream.from_iterable([1, 2, 3], name="numbers")
    source.accumulate(max, start=0, name="sum").sink_to_list(name="out")
    with pytest.raises(CheckpointMismatchError, match="the migration .*broken.* of node sum"):
        Job(source, checkpoint=tmp_path, every=None, migrate={"sum": broken}).run()


def test_a_rename_to_an_unknown_id_is_refused(tmp_path: Path) -> None:
    Job(_freq(["a"], "freq")[0], checkpoint=tmp_path, every=None).run()
    with pytest.raises(CheckpointMismatchError, match=re.escape("rename freq=nope, but the graph")):
        Job(_freq(["a", "b"], "freq")[0], checkpoint=tmp_path, rename={"freq": "nope"}).run()
    # a misspelt old id would let the new node start empty: refused as well
    with pytest.raises(CheckpointMismatchError, match=re.escape("holds neither 'fre' nor 'freq2'")):
        Job(
            _freq(["a", "b"], "freq2")[0],
            checkpoint=tmp_path,
            rename={"fre": "freq2"},
            allow_new_nodes=True,
        ).run()


def test_a_rename_whose_old_id_the_checkpoint_does_not_hold_is_refused(tmp_path: Path) -> None:
    Job(_freq(["a"], "freq")[0], checkpoint=tmp_path, every=None).run()
    epoch = LocalDirectoryStore(tmp_path).list_epochs()[-1]
    source, out = _freq(["a", "b"], "freq")
    line = (
        f"rename: NOSUCH: rename NOSUCH=freq, but checkpoint {epoch} holds no 'NOSUCH' (and "
        "records no rename of 'NOSUCH' to 'freq'); its ids are freq, out, words: name the old "
        "id as the checkpoint holds it, or leave the rename out"
    )
    with pytest.raises(CheckpointMismatchError, match=re.escape(line)):
        Job(source, checkpoint=tmp_path, every=None, rename={"NOSUCH": "freq"}).run()
    assert out == [] and LocalDirectoryStore(tmp_path).list_epochs()[-1] == epoch


def test_a_rename_given_again_after_it_took_effect_is_harmless_for_good(tmp_path: Path) -> None:
    words = [f"w{i % 3}" for i in range(12)]
    Job(_freq(words[:4], "freq")[0], checkpoint=tmp_path, every=None).run()
    for n in (6, 8, 10, 12):  # the same command each time; the old checkpoints pruned away
        source, out = _freq(words[:n], "freq2")
        Job(source, checkpoint=tmp_path, every=None, keep=1, rename={"freq": "freq2"}).run()
        assert out[-1] == dict(Counter(words[:n]))
    store = LocalDirectoryStore(tmp_path)
    # every checkpoint of the old id is pruned (a kept one may still need the base of
    # its delta chain, which the renamed runs wrote)
    epochs = store.list_epochs()
    assert 1 not in epochs
    assert all(store.load_manifest(e).renamed == {"freq2": "freq"} for e in epochs)
    # the record names what the state was renamed from: another old id is refused
    with pytest.raises(CheckpointMismatchError, match=re.escape("holds no 'fre' (and records")):
        Job(_freq(words, "freq2")[0], checkpoint=tmp_path, rename={"fre": "freq2"}).run()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"rename": {"a": "c", "b": "c"}}, "are both renamed to 'c'"),
        ({"rename": {"a": 3}}, "is not a pair of node ids"),
        ({"allow_dropped_state": [3]}, "Job(allow_dropped_state=...): 3 is not a node id"),
        ({"migrate": {"a": 3}}, "the migration of 'a' is 3, not a function"),
    ],
)
def test_bad_upgrade_arguments_are_one_line(
    tmp_path: Path, kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(words)):
        Job(_freq(["a"], "freq")[0], checkpoint=tmp_path, **kwargs)


def _files_job(pattern: str, seen: list[str], holder: list[Job], want: int) -> Stream:
    """``filenames(pattern)`` -> the base names into ``seen``; the job stops at ``want`` names."""
    source = Stream.filenames(pattern, poll_interval="5ms", name="files")

    def note(name: str) -> None:
        seen.append(os.path.basename(name))
        if len(seen) == want:
            holder[0].stop()

    source.sink(note)
    return source


def test_a_glob_that_matches_other_files_emits_the_new_and_names_the_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "in"
    d.mkdir()
    for n in ("a1.txt", "a2.txt", "b1.txt", "b2.txt", "c1.txt"):
        (d / n).write_text(n)
    first: list[str] = []
    jobs: list[Job] = []
    jobs.append(Job(_files_job(str(d / "[ab]*.txt"), first, jobs, 4), checkpoint=tmp_path / "ck"))
    jobs[0].run()
    assert first == ["a1.txt", "a2.txt", "b1.txt", "b2.txt"]
    # the new version reads a* and c*: c1 is new, b1 and b2 are no longer read
    (d / "a3.txt").write_text("a3")
    later: list[str] = []
    jobs = []
    source = _files_job(str(d / "[ac]*.txt"), later, jobs, 2)
    jobs.append(Job(source, checkpoint=tmp_path / "ck"))
    with caplog.at_level(logging.INFO, logger="rivermark"):
        jobs[0].run()
    assert later == ["a3.txt", "c1.txt"]  # what the glob finds that was not emitted, once
    decisions = [r.getMessage() for r in caplog.records if ": inputs: files: " in r.getMessage()]
    assert len(decisions) == 1, decisions
    assert "finds 2 files not emitted yet" in decisions[0], decisions
    assert (
        f"2 files emitted before no longer match it ({d / 'b1.txt'}, {d / 'b2.txt'})"
        in (decisions[0])
    )
    # another source kind, or another configuration, is still refused as changed
    with pytest.raises(CheckpointMismatchError, match="changed: files: "):
        Job(Stream.from_textfile(str(d / "a1.txt"), name="files"), checkpoint=tmp_path / "ck").run()
