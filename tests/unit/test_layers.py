"""The layers of docs/architecture.md, checked on the source: who may import whom."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import rivermark

PKG = Path(rivermark.__file__).resolve().parent
#: the engine: graph shape (core) and the data flow (execution)
ENGINE = ("rivermark.core", "rivermark.execution")


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``if typing.TYPE_CHECKING:``)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _ImportFinder(ast.NodeVisitor):
    """The import statements of a module, each with where it is (nested, type checking only)."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool, bool]] = []
        self.depth = 0
        self.typing = 0

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node):
            self.generic_visit(node)
            return
        self.typing += 1
        for child in node.body:
            self.visit(child)
        self.typing -= 1
        for child in node.orelse:
            self.visit(child)

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _nested

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, self.depth > 0, self.typing > 0))

    visit_ImportFrom = visit_Import  # type: ignore[assignment]


def _imported(path: Path, top_level_only: bool, typing_too: bool) -> list[tuple[str, list[str]]]:
    """Each rivermark import of ``path``: the module named and the names taken from it."""
    finder = _ImportFinder()
    finder.visit(ast.parse(path.read_text(), filename=str(path)))
    package = path.relative_to(PKG.parent).with_suffix("").parts[:-1]
    found: list[tuple[str, list[str]]] = []
    for node, nested, typing_only in finder.found:
        if (nested and top_level_only) or (typing_only and not typing_too):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((name, [a.name for a in node.names]))
        else:
            found.extend((a.name, []) for a in node.names)
    return [(name, names) for name, names in found if name.startswith("rivermark")]


def _imports(path: Path, top_level_only: bool, typing_too: bool = True) -> set[str]:
    """Absolute names of the rivermark modules (and names in them) imported by ``path``.

    ``top_level_only``: the imports at module level (not those inside a
    function or class); ``typing_too``: also those made only for type checking.
    """
    found: set[str] = set()
    for name, names in _imported(path, top_level_only, typing_too):
        found.add(name)
        found.update(f"{name}.{n}" for n in names)
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def import_graph(typing_too: bool) -> dict[str, set[str]]:
    """Module -> the rivermark modules it imports anywhere (inside functions too).

    ``from package import name`` is an import of ``package.name`` when that is
    a module, else of ``package`` itself (its ``__init__``).
    """
    paths = {_module_name(p): p for p in _modules()}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        edges: set[str] = set()
        for name, names in _imported(path, top_level_only=False, typing_too=typing_too):
            if not names:
                edges.add(name)
            for n in names:
                edges.add(f"{name}.{n}" if f"{name}.{n}" in paths else name)
        graph[module] = {e for e in edges if e in paths and e != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import circles: strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.add(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(members)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _modules(under: str = "") -> list[Path]:
    return sorted((PKG / under).rglob("*.py"))


#: every part of the package (a subpackage, or a module at the top) -> the parts it
#: may import, counting every import (inside functions, and those made only for
#: type checking); the layer table of docs/architecture.md.  A new part is
#: placed here before its first import passes.
LAYERS: dict[str, frozenset[str]] = {
    # the bottom: imports nothing of rivermark but the errors
    "errors": frozenset(),
    "_fileid": frozenset(),
    "_frames": frozenset(),
    "_runguard": frozenset({"errors"}),
    "state": frozenset(),
    "statedata": frozenset(),
    "streamz_names": frozenset(),
    "entrypoints": frozenset(),
    # the engine: the data flow below the graph
    "execution": frozenset({"errors"}),
    "core": frozenset({"errors", "execution", "streamz_names"}),
    "graph": frozenset({"core"}),
    "plugins": frozenset({"core", "errors", "entrypoints"}),
    # on the engine
    "operators": frozenset({"core", "execution", "errors", "state", "statedata"}),
    "sources": frozenset({"core", "execution", "errors", "_fileid", "streamz_names"}),
    # sinks, and the lookup join against a SQL table (it shares to_sql's connections and
    # follows the joins' key rule)
    "sinks": frozenset(
        {
            "core",
            "execution",
            "errors",
            "_fileid",
            "state",
            "statedata",
            "streamz_names",
            "operators",
        }
    ),
    # checkpoints: the engine, sources and sinks; never the cockpit, a connector or
    # an extension (observers attach to a job, the job does not import them)
    "checkpoint": frozenset(
        {
            "core",
            "execution",
            "errors",
            "state",
            "statedata",
            "sources",
            "sinks",
            "_fileid",
            "_frames",
            "_runguard",
        }
    ),
    # the cockpit: what a running job shows (metrics, the page, the notebook)
    "observe": frozenset({"core", "execution", "errors", "sources", "sinks", "checkpoint"}),
    # connectors and extensions
    "kafka": frozenset(
        {
            "core",
            "execution",
            "errors",
            "state",
            "sources",
            "sinks",
            "checkpoint",
            "observe",
            "plugins",
            "_runguard",
        }
    ),
    # exactly-once files (Parquet, Delta Lake): sinks that hold a lease like the stores do
    "lake": frozenset({"core", "execution", "errors", "sinks", "checkpoint"}),
    "dataframe": frozenset(
        {"core", "execution", "errors", "state", "statedata", "operators", "observe"}
    ),
    "batch": frozenset({"core", "dataframe"}),
    "dask": frozenset(
        {"core", "execution", "errors", "state", "statedata", "operators", "checkpoint", "kafka"}
    ),
    # the top: the command line, its app loader, the package itself
    "_app": frozenset({"core", "errors", "_frames", "_runguard"}),
    # lake: the command ends its process at once when a file sink gave up on a store
    "cli": frozenset({"core", "errors", "checkpoint", "observe", "lake", "_app"}),
    "__main__": frozenset({"cli"}),
    "_optional": frozenset({"plugins", "statedata", "dask", "dataframe", "batch", "observe"}),
    "__init__": frozenset(
        {
            "core",
            "errors",
            "state",
            "operators",
            "sources",
            "sinks",
            "checkpoint",
            "kafka",
            "lake",
            "observe",  # fills the job's listener registry (metrics, the page)
            "plugins",
            "streamz_names",
            "_optional",
        }
    ),
    # test helpers: anything; production code never imports them
    "testing": frozenset(
        {"core", "execution", "errors", "state", "sources", "sinks", "checkpoint", "kafka"}
    ),
}


def _part(module: str) -> str:
    """The part of the package ``module`` belongs to (``rivermark.core.node`` -> ``core``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def part_graph() -> dict[str, set[str]]:
    """Part -> the other parts it imports (anywhere, type checking included)."""
    found: dict[str, set[str]] = {}
    for module, edges in import_graph(typing_too=True).items():
        part = _part(module)
        found.setdefault(part, set()).update(p for p in map(_part, edges) if p != part)
    return found


def test_every_part_of_the_package_has_a_row_in_the_layer_table() -> None:
    assert sorted(set(part_graph()) - set(LAYERS)) == []
    assert sorted(set(LAYERS) - set(part_graph())) == []


def test_every_part_imports_only_what_the_layer_table_allows() -> None:
    offenders = {
        part: sorted(imported - LAYERS[part])
        for part, imported in part_graph().items()
        if imported - LAYERS.get(part, frozenset())
    }
    assert offenders == {}


def test_the_layer_table_has_no_circle() -> None:
    # so no two packages import each other (core and execution, checkpoint
    # and observe were such a pair): the allowed imports are in layers
    assert circles({part: set(allowed) for part, allowed in LAYERS.items()}) == []
    assert circles(part_graph()) == []


def test_the_layer_test_sees_a_part_that_imports_above_its_layer(tmp_path: Path) -> None:
    # the check that guards the table, on a graph of its own
    graph = {"core": {"execution", "checkpoint"}, "execution": {"core"}}
    assert circles(graph) == [{"core", "execution"}]
    assert graph["core"] - LAYERS["core"] == {"checkpoint"}


#: the checkpoint package's subpackages, by concern -> those it may import (its
#: root, ``errors`` and ``faults``, every one may); a module not in one of them
#: (the package's root) is not checked here
CHECKPOINT_LAYERS: dict[str, frozenset[str]] = {
    "stores": frozenset(),
    "state": frozenset({"stores"}),
    "protocol": frozenset({"stores", "state"}),
    "tools": frozenset({"stores", "state", "protocol"}),
}


def _concern(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) > 3 and parts[1] == "checkpoint" and parts[2] in CHECKPOINT_LAYERS:
        return parts[2]
    return None


def test_the_checkpoint_concerns_import_in_one_direction() -> None:
    # stores below state below the protocol below the tools: a store is
    # changed without reading a job, a job without reading the tools
    offenders = {
        module: sorted(c for c in map(_concern, edges) if c and c != concern)
        for module, edges in import_graph(typing_too=True).items()
        if (concern := _concern(module))
        and any(
            c and c != concern and c not in CHECKPOINT_LAYERS[concern] for c in map(_concern, edges)
        )
    }
    assert offenders == {}
    assert circles({k: set(v) for k, v in CHECKPOINT_LAYERS.items()}) == []


#: where a module is imported by a name held in a string, with the reason;
#: never a name written in the source (that is an ``import`` statement)
IMPORTS_BY_NAME: dict[str, str] = {
    "_app.py": "the user's app and migration functions, named on the command line",
}

_BY_NAME = {"import_module", "__import__", "resolve_name"}


def _imports_by_name(path: Path) -> list[tuple[int, bool]]:
    """Each call that imports a module by name: its line, and whether the name is a literal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            name = func.attr
        else:
            name = func.id if isinstance(func, ast.Name) else ""
        if name in _BY_NAME:
            first = node.args[0] if node.args else None
            literal = isinstance(first, ast.Constant | ast.JoinedStr)
            found.append((node.lineno, literal))
    return found


def test_no_module_is_imported_by_a_string() -> None:
    # a layer reached by ``importlib.import_module("rivermark.x")`` is an import
    # the tests above cannot see: lower layers offer registries the upper ones
    # fill when imported (``statedata``, ``plugins.DOORS``), and the package's
    # top level imports the optional layers with ``import`` statements
    found = {
        str(p.relative_to(PKG)): _imports_by_name(p)
        for p in _modules()
        if "testing" not in p.relative_to(PKG).parts
    }
    literal = {k: v for k, v in found.items() if any(lit for _, lit in v)}
    assert literal == {}
    unlisted = {k: v for k, v in found.items() if v and k not in IMPORTS_BY_NAME}
    assert unlisted == {}
    assert sorted(k for k in IMPORTS_BY_NAME if not found.get(k)) == []


def test_the_string_import_finder_sees_each_form(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import importlib\n"
        "importlib.import_module('rivermark.dask')\n"
        "__import__(f'rivermark.{x}')\n"
        "importlib.import_module(name)\n"
    )
    assert _imports_by_name(module) == [(2, True), (3, True), (4, False)]


def test_production_code_imports_nothing_from_rivermark_testing() -> None:
    offenders = {
        str(p.relative_to(PKG)): sorted(i for i in _imports(p, False) if "rivermark.testing" in i)
        for p in _modules()
        if "testing" not in p.relative_to(PKG).parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_engine_imports_only_itself_and_the_errors() -> None:
    # anywhere, inside functions too: never an operator, a connector or a
    # display; ``streamz_names`` answers ``rivermark.core.<streamz name>`` by name
    allowed = (
        "rivermark.core",
        "rivermark.execution",
        "rivermark.errors",
        "rivermark.streamz_names",
    )
    offenders = {
        str(p.relative_to(PKG)): sorted(i for i in _imports(p, False) if not i.startswith(allowed))
        for p in _modules("core") + _modules("execution")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_execution_runs_nodes_without_importing_them() -> None:
    # how records travel is below the node class: execution knows a node through
    # its own protocol (execution.node.Node), not even in annotations, and the
    # node imports execution, never the reverse
    offenders = {
        p.name: sorted(
            i
            for i in _imports(p, False)
            if i.startswith(
                ("rivermark.core.node", "rivermark.core.graph", "rivermark.core.facade")
            )
        )
        for p in _modules("execution")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_checkpoint_does_not_depend_on_connectors_or_dataframes() -> None:
    # nor on the command line: ``Job.run()`` asks ``rivermark._runguard``,
    # never the CLI's app loader (``rivermark._app``)
    banned = (
        "rivermark.kafka",
        "rivermark.dataframe",
        "rivermark.dask",
        "rivermark.operators",
        "rivermark.cli",
        "rivermark._app",
    )
    offenders = {
        str(p.relative_to(PKG)): sorted(i for i in _imports(p, False) if i.startswith(banned))
        for p in _modules("checkpoint")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_checkpoint_imports_nothing_from_observe() -> None:
    # not even for type checking: the job publishes events to listeners
    # (checkpoint/protocol/listeners.py); the observe layer attaches them when imported
    offenders = {
        str(p.relative_to(PKG)): sorted(
            i for i in _imports(p, False) if i.startswith("rivermark.observe")
        )
        for p in _modules("checkpoint")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_kafka_does_not_import_dask() -> None:
    # from_kafka_batched(dask=True) reaches Dask through plugins.door; the
    # Dask connector builds on the Kafka source, never the other way round
    offenders = {
        str(p.relative_to(PKG)): sorted(
            i for i in _imports(p, False) if i.startswith("rivermark.dask")
        )
        for p in _modules("kafka")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


#: import circles allowed anywhere in the package, with the reason (none)
ALLOWED_CIRCLES: dict[frozenset[str], str] = {}


def test_no_import_circle_anywhere() -> None:
    # every module, the imports inside functions too (a circle through a
    # function-level import is still a circle: neither side can be understood,
    # tested or moved without the other); imports made only for type checking
    # are left out
    found = {frozenset(c) for c in circles(import_graph(typing_too=False))}
    assert sorted(sorted(c) for c in found - set(ALLOWED_CIRCLES)) == []
    # an allowed circle that no longer exists is taken off the list
    assert sorted(sorted(c) for c in set(ALLOWED_CIRCLES) - found) == []


#: circles closed only by imports made for type checking, outside the engine, with the reason
TYPE_ONLY_CIRCLES: dict[frozenset[str], str] = {
    frozenset(
        {
            "rivermark.checkpoint.protocol.cycle",
            "rivermark.checkpoint.protocol.handle",
            "rivermark.checkpoint.protocol.job",
            "rivermark.checkpoint.protocol.listeners",
            "rivermark.checkpoint.protocol.runloop",
        }
    ): "a Job hands itself to its handle and to its listeners, which annotate it as Job "
    "(the cycle and the run loop tell the listeners); no import runs in that direction",
}


def test_type_checking_imports_close_no_other_circle() -> None:
    found = {
        frozenset(c)
        for c in circles(import_graph(typing_too=True))
        if not all(map(_engine, c))  # the engine's own: see the tests above
    }
    assert sorted(sorted(c) for c in found - set(TYPE_ONLY_CIRCLES)) == []
    assert sorted(sorted(c) for c in set(TYPE_ONLY_CIRCLES) - found) == []


def _engine(module: str) -> bool:
    return module.startswith(ENGINE)


def test_no_import_circle_passes_through_the_engine() -> None:
    # counting every import a module runs, inside functions too
    through = [sorted(c) for c in circles(import_graph(typing_too=False)) if any(map(_engine, c))]
    assert through == []


def test_no_circle_passes_through_the_engine_with_type_only_imports_either() -> None:
    # the data flow and the graph walks see nodes through protocols
    # (execution.node.Node, core.contracts.GraphNode), not the node class
    through = [sorted(c) for c in circles(import_graph(typing_too=True)) if any(map(_engine, c))]
    assert through == []


def test_the_circle_finder_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rivermark.core.node import Stream\n"
        "def f():\n    from rivermark.dask import scatter\n"
    )
    finder = _ImportFinder()
    finder.visit(ast.parse(module.read_text()))
    assert [(type(n).__name__, nested, typing) for n, nested, typing in finder.found] == [
        ("ImportFrom", False, False),
        ("ImportFrom", False, True),
        ("ImportFrom", True, False),
    ]


def test_every_module_logs_under_its_own_name() -> None:
    # a module split off another logs as itself, not as the module it came from
    named = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("rivermark")
            ):
                named[str(p.relative_to(PKG))] = node.args[0].value
    assert named == {}
