"""Third-party nodes, sources and sinks found through package entry points.

A distribution advertises a plugin in one of three entry-point groups::

    [rivermark.nodes]
    my_op = my_package.ops:MyOp          # used as stream.my_op(...)

    [rivermark.sinks]
    to_thing = my_package.sinks:ToThing  # used as stream.to_thing(...)

    [rivermark.sources]
    from_thing = my_package.src:FromThing  # used as Stream.from_thing(...)

:func:`register_all` (run when ``rivermark`` is imported) only reads the
entry-point tables; nothing from a plugin is imported then.  Each name gets a
lazy attribute on :class:`~rivermark.Stream` that imports the plugin on first
access and registers it with :meth:`Stream.register_api` (sources as
``staticmethod``), exactly as a built-in.  A plugin whose name is already
taken by a built-in (or by an earlier plugin) is not installed: a warning
names the distribution and the name, and the built-in stays.

The same lazy attributes open streamz's doors to the optional layers: each
name in :data:`DOORS` (``scatter``, ``to_dataframe``, ``to_batch``, the
notebook display) is defined once, by the module that implements it, which
registers it on :class:`~rivermark.Stream` when imported;
:func:`register_doors` (run when ``rivermark`` is imported) installs a stand-in
that imports that module on first call.  The package's top level
(``rivermark._optional``) fills :data:`DOORS` and :data:`LAYER_FUNCTIONS`
with functions that import those layers; this module imports none of them.  :func:`door` finds a function in
another layer the same way (``from_kafka_batched(dask=True)`` reaches Dask
through it), so connectors do not import each other.

>>> from rivermark import Stream
>>> from rivermark.plugins import GROUPS
>>> sorted(GROUPS)
['rivermark.nodes', 'rivermark.sinks', 'rivermark.sources']
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from rivermark.core.node import Stream, identity
from rivermark.entrypoints import entry_points
from rivermark.errors import RivermarkError

logger = logging.getLogger(__name__)

__all__ = [
    "GROUPS",
    "PluginError",
    "PluginNameError",
    "PluginTypeError",
    "PluginWarning",
    "register_entry_point",
    "register_plugin_entry_point",
    "register_all",
    "load_plugins",
    "DOORS",
    "LAYER_FUNCTIONS",
    "add_door",
    "add_layer_function",
    "register_doors",
    "door",
]

#: entry-point group -> the ``register_api`` modifier for its members
GROUPS: dict[str, Callable[[Any], Any]] = {
    "rivermark.nodes": identity,
    "rivermark.sources": staticmethod,
    "rivermark.sinks": identity,
}


class PluginError(RivermarkError):
    """A plugin entry point could not be loaded or is not a stream node."""


class PluginTypeError(PluginError, TypeError):
    """A plugin entry point names something that is not a ``Stream`` subclass (streamz: ``TypeError``)."""


class PluginNameError(PluginError, ValueError):
    """``register_plugin_entry_point`` with a name that is taken (streamz: ``ValueError``)."""


def _ep_value(ep: object) -> str:
    """What an entry point points at (``module:attr``), for messages."""
    # optional: importlib.metadata entry points have .value, pkg_resources ones .module_name
    value = getattr(ep, "value", None) or getattr(ep, "module_name", None)
    return str(value) if value else repr(ep)


class PluginWarning(UserWarning):
    """A plugin was not installed (its name clashes with an existing attribute)."""


#: every stub installed so far, by attribute name
_REGISTERED: dict[str, _LazyPlugin] = {}


def _dist_name(entry_point: object) -> str:
    # optional: an entry point built by hand has no distribution
    dist = getattr(entry_point, "dist", None)
    # optional: a distribution whose metadata names no project
    name = getattr(dist, "name", None) if dist is not None else None
    return str(name) if name else "<unknown distribution>"


def _class_attr(cls: type, name: str) -> object:
    """The raw class attribute ``name`` (without running descriptors), or None."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


class _LazyPlugin:
    """A class attribute standing in for a plugin until it is first accessed."""

    def __init__(self, cls: type, entry_point: Any, modifier: Callable[[Any], Any]) -> None:
        self.cls = cls
        self.entry_point = entry_point
        self.modifier = modifier
        self.name: str = entry_point.name
        self.dist = _dist_name(entry_point)
        self.__doc__ = f"Plugin {self.name!r} from {self.dist!r} (loaded on first use)."
        self.plugin: type | None = None

    def get_plugin(self) -> type:
        """The plugin class, importing it first if needed."""
        if self.plugin is None:
            self.load()
        assert self.plugin is not None
        return self.plugin

    def load(self) -> type:
        """Import the plugin and register it on the class in place of this stub."""
        ep = self.entry_point
        try:
            plugin = ep.load()
        except Exception as e:
            raise PluginError(
                f"plugin {self.name!r} from distribution {self.dist!r}: cannot load "
                f"entry point {_ep_value(ep)!r}: {type(e).__name__}: {e}. Fix or uninstall "
                f"the plugin distribution {self.dist!r}."
            ) from e
        if not (isinstance(plugin, type) and issubclass(plugin, Stream)):
            raise PluginTypeError(
                f"plugin {self.name!r} from distribution {self.dist!r}: entry point "
                f"{_ep_value(ep)!r} is {plugin!r}, not a subclass of rivermark.Stream; point "
                f"the entry point at a Stream subclass."
            )
        self.plugin = plugin
        if self.cls.__dict__.get(self.name) is self:
            # register_api replaces this stub on the class with the real attribute;
            # if something else has taken the name since (a built-in imported
            # later), that one stays
            self.cls.register_api(self.modifier, attribute_name=self.name)(plugin)
        logger.debug("loaded plugin %r from %r: %r", self.name, self.dist, plugin)
        return plugin

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if self.cls.__dict__.get(self.name) is self:
            self.get_plugin()
        real = self.cls.__dict__[self.name]
        if hasattr(real, "__get__"):
            return real.__get__(obj, owner if owner is not None else type(obj))
        return real


def register_entry_point(
    cls: type, entry_point: Any, modifier: Callable[[Any], Any] = identity, strict: bool = False
) -> bool:
    """Install a lazy attribute on ``cls`` for ``entry_point``; True if installed.

    The plugin is imported on first access of ``cls.<entry_point.name>``.  When the
    name is already taken (a built-in operator, a method of ``cls``, or another
    plugin), a :class:`PluginWarning` names the distribution and the name, and the
    existing attribute is kept; with ``strict=True`` (an explicit
    ``Stream.register_plugin_entry_point``) that raises :class:`PluginNameError`
    (a ``ValueError``) instead.  Registering the same entry point twice is a no-op.

    >>> from importlib.metadata import EntryPoint
    >>> ep = EntryPoint("map", "somewhere:Thing", "rivermark.nodes")
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     register_entry_point(Stream, ep)
    False
    >>> "keeping the built-in" in str(w[0].message)
    True
    """
    name = entry_point.name
    dist = _dist_name(entry_point)
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        warnings.warn(
            f"rivermark plugin {name!r} from distribution {dist!r} is not installed: "
            f"an entry-point name must be a public Python identifier; rename it.",
            PluginWarning,
            stacklevel=2,
        )
        return False
    earlier = _REGISTERED.get(name)
    if earlier is not None and earlier.cls is cls and earlier.entry_point == entry_point:
        return False  # already registered (loaded or not)
    existing = _class_attr(cls, name)
    if existing is not None:
        if isinstance(existing, _LazyPlugin):
            what = f"the plugin from {existing.dist!r}"
        elif earlier is not None and earlier.cls is cls:
            what = f"the plugin from {earlier.dist!r}"
        else:
            what = "the built-in"
        message = (
            f"rivermark plugin {name!r} from distribution {dist!r} "
            f"({_ep_value(entry_point)!r}) clashes with an existing {cls.__name__}.{name}; "
            f"keeping {what}. Rename the entry point or uninstall {dist!r}."
        )
        if strict:
            raise PluginNameError(message)
        warnings.warn(message, PluginWarning, stacklevel=2)
        return False
    stub = _LazyPlugin(cls, entry_point, modifier)
    setattr(cls, name, stub)
    _REGISTERED[name] = stub
    logger.debug("registered lazy plugin %r from %r", name, dist)
    return True


def register_plugin_entry_point(
    cls: type, entry_point: Any, modifier: Callable[[Any], Any] = identity
) -> None:
    """``Stream.register_plugin_entry_point``: a lazily loaded plugin from an entry point.

    A name that is taken raises :class:`PluginNameError` (a ``ValueError``), as in streamz.
    """
    register_entry_point(cls, entry_point, modifier, strict=True)


# a classmethod of Stream, as in streamz (installed here: the engine does not import plugins)
setattr(Stream, "register_plugin_entry_point", classmethod(register_plugin_entry_point))  # noqa: B010


def register_all() -> list[str]:
    """Install a lazy attribute for every plugin entry point; returns the new names.

    Cheap: it reads the installed distributions' entry-point tables and imports
    nothing.  Safe to call again (for example after installing a plugin).

    >>> isinstance(register_all(), list)
    True
    """
    added: list[str] = []
    for ep in entry_points(GROUPS):  # one scan of the distributions for every group
        if register_entry_point(Stream, ep, GROUPS[ep.group]):
            added.append(ep.name)
    return added


def load_plugins() -> dict[str, type]:
    """Register and import every plugin now; returns ``{name: class}``.

    Useful to surface a broken plugin at start-up rather than on first use.

    >>> isinstance(load_plugins(), dict)
    True
    """
    register_all()
    return {name: stub.get_plugin() for name, stub in _REGISTERED.items()}


#: ``Stream`` attribute -> the module that defines it (named in messages) and a
#: function that imports it (the module registers the attribute when imported);
#: filled by the package's top level (``rivermark._optional``), which may import
#: every layer, so that this module imports none of them
DOORS: dict[str, tuple[str, Callable[[], None]]] = {}

#: a function one layer calls in another -> a function that imports and returns it
LAYER_FUNCTIONS: dict[str, Callable[[], Callable[..., Any]]] = {}


def add_door(name: str, module: str, load: Callable[[], None]) -> None:
    """Declare the door ``name``: defined by ``module``, which ``load`` imports."""
    DOORS[name] = (module, load)


def add_layer_function(name: str, load: Callable[[], Callable[..., Any]]) -> None:
    """Declare the layer function ``name``: ``load`` imports and returns it."""
    LAYER_FUNCTIONS[name] = load


class _LazyDoor:
    """A ``Stream`` attribute standing in for a door until it is first called.

    Looking the attribute up imports nothing (``hasattr`` stays cheap and true
    without the optional dependency); calling it imports :attr:`module`, whose
    ``register_api`` replaces this stand-in, and calls the real attribute.
    """

    def __init__(self, cls: type, name: str, module: str, load: Callable[[], None]) -> None:
        self.cls = cls
        self.name = name
        self.module = module
        self._load = load
        self.__doc__ = f"Defined by {module} (imported on first call)."

    def load(self) -> Any:
        """Import the module that defines the door; the class's real attribute."""
        self._load()
        real = self.cls.__dict__.get(self.name)
        if real is None or real is self:
            raise PluginError(
                f"{self.cls.__name__}.{self.name}: importing {self.module} did not register it; "
                f"the module must register {self.name!r} with {self.cls.__name__}.register_api"
            )
        return real

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            real = self.load()
            bound = real.__get__(obj, owner if owner is not None else type(obj))
            return bound(*args, **kwargs)

        call.__name__ = self.name
        call.__doc__ = self.__doc__
        return call


def register_doors(cls: type = Stream) -> None:
    """Install the stand-in of every door of :data:`DOORS` that ``cls`` does not have yet.

    >>> register_doors()
    >>> callable(Stream().to_batch)
    True
    """
    for name, (module, load) in DOORS.items():
        if _class_attr(cls, name) is None:
            setattr(cls, name, _LazyDoor(cls, name, module, load))


def door(name: str) -> Callable[..., Any]:
    """The function ``name`` of :data:`LAYER_FUNCTIONS`, importing its layer.

    >>> door("from_kafka_batched_dask").__module__
    'rivermark.dask.kafka'
    """
    return LAYER_FUNCTIONS[name]()
