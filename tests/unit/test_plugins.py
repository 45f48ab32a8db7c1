"""Plugins from real installed distributions (a dist-info directory on sys.path)."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
import uuid
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from rivermark import Stream, plugins
from rivermark.operators.transform import Map
from rivermark.plugins import (
    PluginError,
    PluginNameError,
    PluginTypeError,
    PluginWarning,
    register_all,
    register_entry_point,
)

PLUGIN_MODULE = '''
from __future__ import annotations

from rivermark import Stream
from rivermark.sources.iterable import FromIterable

LOADED = True


class Triple(Stream):
    """Multiply every record by three."""

    def update(self, x, who=None, metadata=None):
        return self._emit(3 * x, metadata)


class FromRange(FromIterable):
    """Emit range(n)."""

    def __init__(self, n, **kwargs):
        super().__init__(range(n), **kwargs)


class ToBag(Stream):
    """Append every record to ``bag``."""

    def __init__(self, upstream, bag, **kwargs):
        self.bag = bag
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x, who=None, metadata=None):
        self.bag.append(x)
        return None


class ImpostorMap(Stream):
    """Would replace the built-in map if clashes were not refused."""


NOT_A_NODE = 42
'''


class Installed:
    """A distribution installed into a temporary directory on sys.path."""

    def __init__(self, root: Path, dist: str, module: str, names: list[str]) -> None:
        self.root = root
        self.dist = dist
        self.module = module
        self.names = names


@pytest.fixture
def install(tmp_path: Path) -> Iterator[Callable[..., Installed]]:
    """Install a throw-away plugin distribution; undo everything afterwards."""
    installed: list[Installed] = []

    def do_install(groups: dict[str, dict[str, str]], dist: str | None = None) -> Installed:
        tag = uuid.uuid4().hex[:8]
        dist = dist or f"rm-plugin-{tag}"
        module = f"rm_plugin_{tag}"
        root = tmp_path / tag
        root.mkdir()
        (root / f"{module}.py").write_text(PLUGIN_MODULE)
        info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = []
        names = []
        for group, eps in groups.items():
            lines.append(f"[{group}]")
            for name, target in eps.items():
                lines.append(f"{name} = {module}:{target}")
                names.append(name)
            lines.append("")
        (info / "entry_points.txt").write_text("\n".join(lines))
        sys.path.insert(0, str(root))
        importlib.invalidate_caches()
        inst = Installed(root, dist, module, names)
        installed.append(inst)
        return inst

    before = set(Stream.__dict__)
    yield do_install
    for inst in installed:
        sys.path.remove(str(inst.root))
        sys.modules.pop(inst.module, None)
    importlib.invalidate_caches()
    # remove only what the test distributions added (never a built-in)
    for name in {n for inst in installed for n in inst.names} - before:
        if name in Stream.__dict__:
            delattr(Stream, name)
        plugins._REGISTERED.pop(name, None)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:6]}"


def test_node_is_registered_lazily_and_works(install: Callable[..., Installed]) -> None:
    name = unique("triple")
    inst = install({"rivermark.nodes": {name: "Triple"}})
    assert name in register_all()
    assert inst.module not in sys.modules  # registering imported nothing
    assert isinstance(Stream.__dict__[name], plugins._LazyPlugin)

    s = Stream()
    out = getattr(s, name)().sink_to_list()
    assert sys.modules[inst.module].LOADED
    for i in range(3):
        s.emit(i)
    assert out == [0, 3, 6]
    # after the first use the stub is replaced by an ordinary registered method
    assert not isinstance(Stream.__dict__[name], plugins._LazyPlugin)
    assert type(s.downstreams[0]).__name__ == "Triple"
    # works from any node type, chained after a built-in
    L = getattr(s.map(lambda x: x + 1), name)().sink_to_list()
    s.emit(1)
    assert L == [6]


def test_source_is_a_staticmethod(install: Callable[..., Installed]) -> None:
    from rivermark.testing import wait_for

    name = unique("from_range")
    inst = install({"rivermark.sources": {name: "FromRange"}})
    register_all()
    assert inst.module not in sys.modules
    source = getattr(Stream, name)(4)
    assert type(source).__name__ == "FromRange"
    out = source.sink_to_list()
    source.start()
    wait_for(lambda: source.finished)
    assert out == [0, 1, 2, 3]


def test_sink_plugin(install: Callable[..., Installed]) -> None:
    name = unique("to_bag")
    install({"rivermark.sinks": {name: "ToBag"}})
    register_all()
    bag: list[int] = []
    s = Stream()
    getattr(s.map(lambda x: -x), name)(bag)
    s.emit(5)
    s.emit(6)
    assert bag == [-5, -6]


def test_clash_with_builtin_warns_and_keeps_builtin(install: Callable[..., Installed]) -> None:
    builtin_map = Stream.__dict__["map"]
    inst = install({"rivermark.nodes": {"map": "ImpostorMap", "emit": "ImpostorMap"}})
    with pytest.warns(PluginWarning) as record:
        added = register_all()
    assert "map" not in added and "emit" not in added
    messages = [str(w.message) for w in record]
    assert any(inst.dist in m and "'map'" in m and "keeping the built-in" in m for m in messages)
    assert any(inst.dist in m and "'emit'" in m for m in messages)
    assert Stream.__dict__["map"] is builtin_map
    s = Stream()
    assert isinstance(s.map(str), Map)
    assert inst.module not in sys.modules


@pytest.mark.parametrize("first_loaded", [False, True])
def test_clash_between_two_plugins_keeps_the_first(
    install: Callable[..., Installed], first_loaded: bool
) -> None:
    name = unique("dup")
    install({"rivermark.nodes": {name: "Triple"}}, dist="rm-first")
    register_all()
    if first_loaded:
        getattr(Stream, name)
    second = install({"rivermark.nodes": {name: "ToBag"}}, dist="rm-second")
    with pytest.warns(PluginWarning, match=re.escape("rm-second")) as record:
        register_all()
    assert "rm-first" in str(record[0].message)
    s = Stream()
    out = getattr(s, name)().sink_to_list()
    s.emit(2)
    assert out == [6]
    assert second.module not in sys.modules


def test_register_all_is_idempotent(install: Callable[..., Installed]) -> None:
    name = unique("again")
    install({"rivermark.nodes": {name: "Triple"}})
    assert register_all() == [name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert register_all() == []
    getattr(Stream(), name)()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert register_all() == []  # loaded plugin is not reported as a clash with itself


def test_broken_entry_point_raises_naming_the_distribution(
    install: Callable[..., Installed],
) -> None:
    missing = unique("missing")
    not_node = unique("not_node")
    inst = install({"rivermark.nodes": {missing: "NoSuchClass", not_node: "NOT_A_NODE"}})
    register_all()
    with pytest.raises(PluginError, match=re.escape(inst.dist)) as exc:
        getattr(Stream(), missing)
    assert missing in str(exc.value)
    assert isinstance(exc.value.__cause__, AttributeError)
    with pytest.raises(PluginTypeError, match="not a subclass of rivermark.Stream"):
        getattr(Stream(), not_node)


def test_load_plugins_imports_everything(install: Callable[..., Installed]) -> None:
    a, b = unique("a"), unique("b")
    inst = install({"rivermark.nodes": {a: "Triple"}, "rivermark.sinks": {b: "ToBag"}})
    loaded = plugins.load_plugins()
    assert inst.module in sys.modules
    assert loaded[a].__name__ == "Triple"
    assert loaded[b].__name__ == "ToBag"
    assert not isinstance(Stream.__dict__[a], plugins._LazyPlugin)


def test_invalid_entry_point_name_is_refused() -> None:
    ep = EntryPoint("_private", "x:y", "rivermark.nodes")
    with pytest.warns(PluginWarning, match="public Python identifier"):
        assert register_entry_point(Stream, ep) is False
    assert "_private" not in Stream.__dict__


def test_register_plugin_entry_point_hook() -> None:
    name = unique("hook")
    ep = EntryPoint(name, "rivermark.operators.transform:Map", "rivermark.nodes")
    try:
        Stream.register_plugin_entry_point(ep)
        assert isinstance(Stream.__dict__[name], plugins._LazyPlugin)
        s = Stream()
        out = getattr(s, name)(lambda x: x * 10).sink_to_list()
        s.emit(2)
        assert out == [20]
    finally:
        delattr(Stream, name)
        plugins._REGISTERED.pop(name, None)


class _ObjectEntryPoint:
    """An entry point as streamz's documentation builds one: ``name``, ``load()``, no ``value``."""

    def __init__(self, name: str, obj: object) -> None:
        self.name = name
        self.obj = obj

    def load(self) -> object:
        return self.obj


def test_register_plugin_entry_point_errors_have_streamz_types() -> None:
    # a name that is taken: ValueError at registration (streamz's documented type)
    with pytest.raises(ValueError, match=re.escape("clashes with an existing Stream.map")):
        Stream.register_plugin_entry_point(_ObjectEntryPoint("map", None))
    assert isinstance(Stream.__dict__["map"], type) or callable(Stream.__dict__["map"])
    # not a Stream subclass: TypeError on first use
    name = unique("not_node")
    try:
        Stream.register_plugin_entry_point(_ObjectEntryPoint(name, object))
        with pytest.raises(TypeError, match="not a subclass of rivermark.Stream") as info:
            getattr(Stream, name)
        assert isinstance(info.value, PluginTypeError)
    finally:
        delattr(Stream, name)
        plugins._REGISTERED.pop(name, None)
    assert issubclass(PluginNameError, PluginError)


def test_plugin_module_text_is_valid() -> None:
    # guard against the fixture's module silently failing to compile
    compile(textwrap.dedent(PLUGIN_MODULE), "<plugin>", "exec")
