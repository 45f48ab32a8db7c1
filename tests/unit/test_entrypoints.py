"""Entry points read from ``entry_points.txt`` agree with ``importlib.metadata``."""

from __future__ import annotations

import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from rivermark import entrypoints


def _standard(groups: list[str]) -> list[tuple[str, str, str, str]]:
    installed = metadata.entry_points()
    return [
        (ep.name, ep.value, ep.group, ep.dist.name if ep.dist else "")
        for g in groups
        for ep in installed.select(group=g)
    ]


def _ours(groups: list[str]) -> list[tuple[str, str, str, str]]:
    return [
        (ep.name, ep.value, ep.group, ep.dist.name if ep.dist else "")
        for ep in entrypoints.entry_points(groups)
    ]


def _dist(root: Path, folder: str, name: str, text: str) -> None:
    info = root / folder
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\nbody\n")
    (info / "entry_points.txt").write_text(text)


def test_every_group_of_this_environment_reads_as_importlib_metadata_reads_it() -> None:
    groups = sorted(metadata.entry_points().select().groups)
    assert "console_scripts" in groups
    assert entrypoints._standard_search()
    # the same entry points, with the same distribution names (the order of the
    # distributions in one folder is the file system's to importlib.metadata)
    assert sorted(_ours(groups)) == sorted(_standard(groups))


def test_the_first_distribution_of_a_name_on_the_path_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "rivermark.test-entrypoints"
    _dist(tmp_path / "a", "Rm.Probe-2.0.dist-info", "Rm.Probe", f"[{group}]\nx = first:X\n")
    _dist(
        tmp_path / "b",
        "rm_probe-1.0.dist-info",
        "rm-probe",
        f"[{group}]\nx = second:X\ny = second:Y\n",
    )
    # comments, blank lines and other groups are skipped
    _dist(
        tmp_path / "b", "other-1.0.dist-info", "other",
        f"# a comment\n\n[console_scripts]\nz = nope:Z\n[{group}]\n  w =  other.mod:W.attr  \n",
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    assert _ours([group]) == _standard([group])
    assert sorted(_ours([group])) == [
        ("w", "other.mod:W.attr", group, "other"),
        ("x", "first:X", group, "Rm.Probe"),
    ]


def test_a_zip_on_the_path_is_left_to_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "rivermark.test-entrypoints"
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(
            "zipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 1.0\n"
        )
        z.writestr("zipped-1.0.dist-info/entry_points.txt", f"[{group}]\nq = zipped:Q\n")
    monkeypatch.syspath_prepend(str(archive))
    assert not entrypoints._standard_search()
    assert _ours([group]) == [("q", "zipped:Q", group, "zipped")] == _standard([group])


def test_the_backports_finder_searches_the_path_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # importlib_metadata (which some libraries import) adds its own path finder:
    # the same search of the same folders
    import importlib_metadata

    finder = importlib_metadata.MetadataPathFinder()
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    assert entrypoints._standard_search()

    class Other:
        def find_distributions(self, *args: object) -> list[object]:
            return []

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Other()])
    assert not entrypoints._standard_search()


def test_an_entry_point_loads_what_it_names() -> None:
    ep = entrypoints.EntryPoint("x", "rivermark.entrypoints:EntryPoint.load", "g")
    assert ep.load() is entrypoints.EntryPoint.load
    assert "importlib.metadata" in sys.modules
