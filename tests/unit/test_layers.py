"""The layers of docs/architecture.md, checked on the source: who may import whom."""

from __future__ import annotations

import ast
from pathlib import Path

import rivermark

PKG = Path(rivermark.__file__).resolve().parent


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Absolute names of the rivermark modules imported by ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("rivermark"):
                found.add(name)
                found.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("rivermark"))
    return found


def _modules(under: str = "") -> list[Path]:
    return sorted((PKG / under).rglob("*.py"))


def test_production_code_imports_nothing_from_rivermark_testing() -> None:
    offenders = {
        str(p.relative_to(PKG)): sorted(i for i in _imports(p, False) if "rivermark.testing" in i)
        for p in _modules()
        if "testing" not in p.relative_to(PKG).parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_engine_imports_only_itself_and_the_errors_at_module_level() -> None:
    # the engine may use the fast path's machinery, never the operators' kernels
    allowed = (
        "rivermark.core",
        "rivermark.errors",
        "rivermark.fastpath.codegen",
        "rivermark.fastpath.push",
    )
    offenders = {
        str(p.relative_to(PKG)): sorted(
            i
            for i in _imports(p, True)
            if not i.startswith(allowed) and i != "rivermark.fastpath"  # the package itself
        )
        for p in _modules("core")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_fast_path_machinery_knows_no_operator() -> None:
    banned = ("rivermark.operators", "rivermark.sinks", "rivermark.sources", "rivermark.checkpoint")
    offenders = {
        p.name: sorted(i for i in _imports(p, False) if i.startswith(banned))
        for p in (PKG / "fastpath" / "codegen.py", PKG / "fastpath" / "push.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_checkpoint_does_not_depend_on_connectors_or_dataframes() -> None:
    banned = ("rivermark.kafka", "rivermark.dataframe", "rivermark.dask", "rivermark.operators")
    offenders = {
        str(p.relative_to(PKG)): sorted(i for i in _imports(p, False) if i.startswith(banned))
        for p in _modules("checkpoint")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
