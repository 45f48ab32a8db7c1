"""pytest plugin: run streamz's own test files with ``streamz`` resolved to rivermark.

Loaded by ``scripts/streamz-suite`` as ``-p streamz_alias`` (this directory on
``sys.path``); nothing here runs when the main test run imports the module.

Two modes, chosen by ``--streamz-suite-mode``:

``reference``
    ``streamz`` is the real, installed streamz; only the test files come from
    the downloaded wheel.  Used with ``--collect-only`` to write the list of
    test ids that streamz itself collects (``--streamz-suite-ids``).
``rivermark``
    ``streamz`` and every ``streamz.X`` module resolve to ``rivermark`` and
    ``rivermark.X``; the test files and streamz's test helper module
    (``streamz.utils_test``) come from the wheel.  At the end the outcomes are
    compared with the reference ids, the exclusions and the deviation list
    (see :mod:`verdict`), and the session fails on any difference.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from verdict import Outcomes, load_list, summarize  # noqa: E402

#: the test files' own modules, served from the unpacked wheel
LOCAL_PACKAGES = ("streamz.tests", "streamz.dataframe.tests")
LOCAL_MODULES = ("streamz.utils_test",)

#: ``streamz.X`` whose rivermark counterpart has another name
RENAMED = {
    "streamz": "rivermark",
}

#: streamz internals that its test files import at module level, so that one
#: import would keep a whole file from running.  rivermark has no such
#: objects; the leg supplies inert stand-ins, and the tests that use them are
#: in excluded.txt.
#: - ``streamz.core._io_loops``: the IOLoops streamz started in threads, which
#:   the ``clean`` fixture of ``streamz.utils_test`` stops; rivermark keeps no
#:   such list.
#: - ``streamz.sinks._global_sinks``: the set that keeps streamz's sinks alive;
#:   in rivermark a node holds its downstreams strongly.
INTERNALS: dict[str, dict[str, Any]] = {
    "streamz.core": {"_io_loops": []},
    "streamz.sinks": {"_global_sinks": set()},
}


def _with_internals(name: str, module: types.ModuleType) -> types.ModuleType:
    """A module that is ``module`` plus the stand-ins of :data:`INTERNALS`."""
    proxy = types.ModuleType(name, module.__doc__)
    proxy.__dict__.update(INTERNALS[name])

    def __getattr__(attr: str) -> Any:
        return getattr(module, attr)

    proxy.__getattr__ = __getattr__  # type: ignore[method-assign]
    if hasattr(module, "__path__"):
        proxy.__path__ = list(module.__path__)
    return proxy


class _Existing(importlib.abc.Loader):
    """Loader that hands out an already imported module under a second name."""

    def __init__(self, module: types.ModuleType) -> None:
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class StreamzFinder(importlib.abc.MetaPathFinder):
    """Resolve ``streamz`` names: test files from ``root``; the rest to rivermark if ``alias``."""

    def __init__(self, root: Path, alias: bool) -> None:
        self.root = root
        self.alias = alias

    def _local(self, name: str) -> importlib.machinery.ModuleSpec | None:
        parts = name.split(".")
        path = self.root.joinpath(*parts)
        if name in LOCAL_PACKAGES:
            init = path / "__init__.py"
            if init.exists():
                return importlib.util.spec_from_file_location(
                    name, init, submodule_search_locations=[str(path)]
                )
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(path)]
            return spec
        file = path.with_suffix(".py")
        if file.exists():
            return importlib.util.spec_from_file_location(name, file)
        raise ModuleNotFoundError(f"no module named {name!r} in {self.root}", name=name)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in LOCAL_MODULES or fullname in LOCAL_PACKAGES:
            return self._local(fullname)
        if any(fullname.startswith(p + ".") for p in LOCAL_PACKAGES):
            return self._local(fullname)
        if not (fullname == "streamz" or fullname.startswith("streamz.")):
            return None
        if not self.alias:
            # the installed streamz, never the placeholder next to the test files
            if fullname != "streamz":
                return None
            elsewhere = [p for p in sys.path if p and Path(p).resolve() != self.root.resolve()]
            return importlib.machinery.PathFinder.find_spec(fullname, elsewhere)
        target_name = RENAMED.get(fullname, "rivermark" + fullname[len("streamz") :])
        module = importlib.import_module(target_name)
        if fullname in INTERNALS:
            module = _with_internals(fullname, module)
        return importlib.machinery.ModuleSpec(
            fullname,
            _Existing(module),
            is_package=hasattr(module, "__path__"),
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("streamz-suite")
    group.addoption("--streamz-suite-root", help="directory holding the unpacked streamz/ tests")
    group.addoption("--streamz-suite-mode", choices=["reference", "rivermark"], default="rivermark")
    group.addoption("--streamz-suite-ids", help="file of streamz's own collected test ids")
    group.addoption("--streamz-suite-lists", help="directory with excluded.txt and deviations.txt")
    group.addoption(
        "--streamz-suite-rerun",
        help="file to write the ids of the tests to run once more (see verdict.summarize)",
    )


class SuitePlugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.mode = config.getoption("--streamz-suite-mode")
        self.ids_file = Path(config.getoption("--streamz-suite-ids"))
        lists = Path(config.getoption("--streamz-suite-lists") or HERE)
        self.excluded = load_list(lists / "excluded.txt")
        self.deviations = load_list(lists / "deviations.txt")
        self.timing = load_list(lists / "timing.txt")
        self.outcomes = Outcomes()
        self.lines: list[str] = []
        self.ok = True

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.mode == "reference":
            self.ids_file.write_text("".join(item.nodeid + "\n" for item in items))
            return
        keep, drop = [], []
        for item in items:
            (drop if item.nodeid in self.excluded else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        xfail = hasattr(report, "wasxfail")
        self.outcomes.add(report.nodeid, report.when, report.outcome, xfail=xfail)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.mode == "reference":
            return
        reference = [line for line in self.ids_file.read_text().splitlines() if line]
        # the whole suite (no selection): a test that did not run at all counts
        opt = self.config.option
        full = not (opt.keyword or opt.markexpr or opt.maxfail) and (
            self.config.args == ["streamz"]
        )
        rerun: list[str] = []
        self.ok, self.lines = summarize(
            reference,
            self.excluded,
            self.deviations,
            self.outcomes,
            full=full,
            rerun=rerun,
            timing=self.timing,
        )
        rerun_file = self.config.getoption("--streamz-suite-rerun")
        if rerun_file:
            Path(rerun_file).write_text("".join(t + "\n" for t in rerun))
        session.exitstatus = pytest.ExitCode.OK if self.ok else pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.mode == "reference":
            return
        terminalreporter.section("streamz 0.6.6 test suite on rivermark")
        for line in self.lines:
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    root = config.getoption("--streamz-suite-root")
    if not root:
        raise pytest.UsageError("--streamz-suite-root is required (use scripts/streamz-suite)")
    mode = config.getoption("--streamz-suite-mode")
    if mode == "rivermark" and "streamz" in sys.modules:
        raise pytest.UsageError("the real streamz was imported before the alias was installed")
    sys.meta_path.insert(0, StreamzFinder(Path(root), alias=mode == "rivermark"))
    config.pluginmanager.register(SuitePlugin(config), "streamz-suite")
