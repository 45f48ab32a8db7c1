"""Guard the public API of ``rivermark/__init__.py``.

When you add or remove a public name on purpose, update ``EXPECTED_API`` below
(and ``__all__`` in ``rivermark/__init__.py`` if it is defined); these tests
exist so that nothing appears in, or disappears from, the public API by accident.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest

import rivermark

#: the names ``import rivermark`` promises; edit deliberately
EXPECTED_API = frozenset(
    {
        "Stream",
        "Sink",
        "Source",
        "Job",
        "KeyedState",
        "CheckpointError",
        "CheckpointLockedError",
        "CheckpointMismatchError",
        "RefCounter",
        "RivermarkError",
        "ConfigurationError",
        "GraphError",
        "UserFunctionError",
        "kafka",
        "operators",
        "plugins",
        "sinks",
        "sources",
        "__version__",
    }
)

INIT_PATH = Path(rivermark.__file__)
INIT_TREE = ast.parse(INIT_PATH.read_text(), filename=str(INIT_PATH))


def declared_names() -> set[str]:
    """The public names ``rivermark/__init__.py`` binds at module level."""
    names: set[str] = set()
    for node in INIT_TREE.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                if getattr(node, "module", None) == "__future__":  # ``import x`` has no module
                    continue
                bound = alias.asname or alias.name.split(".")[0]
                names.add(bound)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    return {n for n in names if not n.startswith("_") or n == "__version__"} - {"__all__"}


def public_api() -> set[str]:
    """``__all__`` when the package defines it, else what ``__init__.py`` binds."""
    all_ = getattr(rivermark, "__all__", None)
    if all_ is not None:
        return set(all_) | {"__version__"}
    return declared_names()


def test_no_star_imports() -> None:
    stars = [
        f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import *"
        for node in ast.walk(INIT_TREE)
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
    ]
    assert not stars, f"rivermark/__init__.py must list its exports explicitly: {stars}"


def test_every_expected_name_exists() -> None:
    missing = sorted(n for n in EXPECTED_API if not hasattr(rivermark, n))
    assert not missing, f"rivermark no longer exports {missing}"


def test_public_api_is_exactly_the_expected_set() -> None:
    api = public_api()
    added = sorted(api - EXPECTED_API)
    removed = sorted(EXPECTED_API - api)
    assert not added and not removed, (
        f"public API of rivermark changed: added {added}, removed {removed}; "
        f"if intended, update EXPECTED_API in {__file__}"
    )


def test_all_is_consistent_when_defined() -> None:
    all_ = getattr(rivermark, "__all__", None)
    if all_ is None:
        # nothing to check yet; the declared names stand in for __all__
        assert declared_names() == public_api()
        return
    assert isinstance(all_, list | tuple)
    assert len(all_) == len(set(all_)), f"duplicates in rivermark.__all__: {all_}"
    assert all(isinstance(n, str) for n in all_)
    missing = [n for n in all_ if not hasattr(rivermark, n)]
    assert not missing, f"rivermark.__all__ lists names that do not exist: {missing}"
    undeclared = set(all_) - declared_names()
    assert not undeclared, f"__all__ names not bound in rivermark/__init__.py: {undeclared}"


def test_reexports_use_the_explicit_as_form() -> None:
    """``from .x import Y as Y`` (PEP 484 re-export form), so type checkers see the API."""
    bad = []
    for node in INIT_TREE.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                if alias.asname != alias.name and not alias.name.startswith("_"):
                    bad.append(f"line {node.lineno}: {alias.name} as {alias.asname}")
    assert not bad, f"re-export with 'import Y as Y': {bad}"


@pytest.mark.parametrize("name", sorted(EXPECTED_API - {"__version__"}))
def test_exported_objects_come_from_rivermark(name: str) -> None:
    obj = getattr(rivermark, name)
    if isinstance(obj, types.ModuleType):
        assert obj.__name__.startswith("rivermark."), obj.__name__
        return
    module = getattr(obj, "__module__", None)
    assert module is not None, f"rivermark.{name} ({obj!r}) has no __module__"
    assert module == "rivermark" or module.startswith("rivermark."), (
        f"rivermark.{name} comes from {module!r}, not from rivermark"
    )
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert obj.__doc__, f"rivermark.{name} has no docstring"


def test_version_is_a_string() -> None:
    assert isinstance(rivermark.__version__, str)
    assert rivermark.__version__.count(".") >= 1


def test_importing_rivermark_does_not_import_streamz() -> None:
    """streamz is a benchmark-only dependency: the library must never import it."""
    code = (
        "import sys, rivermark, rivermark.plugins; "
        "rivermark.plugins.load_plugins(); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('streamz', 'tornado')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"importing rivermark imported {proc.stdout.strip()}"


def test_streamz_lowercase_names_resolve_but_are_not_exported() -> None:
    """streamz's module-level names (``rivermark.map``) are answered lazily, never star-imported."""
    from rivermark.streamz_names import STREAMZ_NAMES

    for name in ("map", "filter", "zip", "slice", "accumulate", "sink", "from_textfile"):
        assert name in STREAMZ_NAMES
        assert name not in rivermark.__all__
        assert isinstance(getattr(rivermark, name), type)
    assert rivermark.map.__module__ == "rivermark.operators.transform"
    assert rivermark.sink is rivermark.Sink
    namespace: dict[str, object] = {}
    exec("from rivermark import *", namespace)
    assert not set(STREAMZ_NAMES) & set(namespace)
