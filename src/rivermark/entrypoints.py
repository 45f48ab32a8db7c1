"""The installed distributions' entry points of a few groups, read without ``importlib.metadata``.

``import rivermark`` reads the plugin groups' entry points (:mod:`rivermark.plugins`)
in every process, the job processes of ``rivermark run`` included.  Importing
:mod:`importlib.metadata` and its ``entry_points()`` scan cost about 70 ms of
processor time there (the module imports ``email``, ``zipfile``, ``csv`` and
``pathlib``, and the scan builds an object per installed distribution), a
quarter of a small job process's start.  :func:`entry_points` gives the same
answer in a few milliseconds where the search is the standard one: it walks
``sys.path`` in order, takes the ``*.dist-info`` and ``*.egg-info`` folders in
each, keeps the first distribution of each normalised name (as
``importlib.metadata`` does), and parses only their ``entry_points.txt``.

Anything else on the path (a zip file, an import hook that provides
distributions of its own) makes it ask ``importlib.metadata`` instead, so the
answer never depends on which way it was found.

>>> eps = entry_points({"console_scripts"})
>>> any(ep.name == "rivermark" for ep in eps)
True
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["EntryPoint", "entry_points"]

_NORMALISE = re.compile(r"[-_.]+")


@dataclass(frozen=True)
class Distribution:
    """The distribution an entry point comes from (its name, for messages)."""

    name: str


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: ``name = value`` in ``group`` (``value``: ``module:attr``)."""

    name: str
    value: str
    group: str
    dist: Distribution | None = None

    def load(self) -> Any:
        """Import the module and return the attribute the value names (as ``importlib.metadata``)."""
        from importlib.metadata import EntryPoint as Standard

        return Standard(self.name, self.value, self.group).load()


def _normalised(name: str) -> str:
    return _NORMALISE.sub("-", name).lower().replace("-", "_")


def _standard_search() -> bool:
    """Whether distributions are found only by the standard path search, in folders."""
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        # optional: only finders that provide distributions have this method
        if getattr(finder, "find_distributions", None) is None or finder is PathFinder:
            continue
        kind = type(finder)
        if kind.__name__ == "MetadataPathFinder" and kind.__module__ == "importlib_metadata":
            continue  # the backport's finder: the same search of the same path
        return False
    return not any(os.path.isfile(p) for p in sys.path if p)


def _parse(text: str, groups: Iterable[str]) -> list[tuple[str, str, str]]:
    """The ``(name, value, group)`` of each entry point of ``groups`` in an ``entry_points.txt``."""
    wanted = set(groups)
    out: list[tuple[str, str, str]] = []
    group = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
            continue
        if group in wanted and "=" in line:
            name, value = line.split("=", 1)
            out.append((name.strip(), value.strip(), group))
    return out


def _scanned(groups: Iterable[str]) -> list[EntryPoint]:
    seen: set[str] = set()
    out: list[EntryPoint] = []
    for entry in sys.path:
        folder = entry or "."
        try:
            children = sorted(os.listdir(folder))
        except OSError:
            continue  # missing or unreadable: the standard search skips it too
        for child in children:
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            folder_name = child.rpartition(".")[0].partition("-")[0]
            key = _normalised(folder_name)
            if key in seen:
                continue  # an earlier path entry's distribution of this name wins
            seen.add(key)
            try:
                with open(os.path.join(folder, child, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue  # no entry points (or an egg-info file, which holds none)
            found = _parse(text, groups)
            if found:  # named as its metadata names it (the folder's name is normalised)
                dist = Distribution(_project_name(os.path.join(folder, child), folder_name))
                out.extend(EntryPoint(name, value, group, dist) for name, value, group in found)
    return out


def _project_name(info: str, fallback: str) -> str:
    """The ``Name:`` of a dist-info's ``METADATA`` (an egg-info's ``PKG-INFO``), else ``fallback``."""
    for meta in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(info, meta), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break  # the end of the headers
                    if line.lower().startswith("name:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return fallback


def entry_points(groups: Iterable[str]) -> list[EntryPoint] | list[Any]:
    """The installed entry points of ``groups``, each distribution's once, in path order."""
    groups = tuple(groups)
    if _standard_search():
        found = _scanned(groups)
        return [ep for g in groups for ep in found if ep.group == g]
    from importlib import metadata

    installed = metadata.entry_points()
    return [ep for g in groups for ep in installed.select(group=g)]
