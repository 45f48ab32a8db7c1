"""rivermark's own classes that a node's state may hold, registered by the layer that defines them.

A checkpoint writes a node's state as data (``rivermark.checkpoint``'s
codec), and reading it back calls no constructor that a file names: only
those of the classes registered here.  Each layer registers its classes when
it is imported (``register_state_class(WindowResult, ("start", ...))`` in
the operators, the DataFrame partials in ``rivermark.dataframe``, Dask's
``Remote``, ``to_sql``'s tombstone), so the codec knows them without
importing any of those layers.

A checkpoint may be read in a process that has not imported the layer whose
class it holds yet (``rivermark checkpoints show`` on a DataFrame job's
checkpoint).  The package's top level adds a *loader* per optional layer
(:func:`add_state_loader`): a function that imports it.  A name not
registered runs the loaders not run yet, once each, and looks again.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Span:
...     start: float
...     end: float
>>> register_state_class(Span, ("start", "end"))
>>> state_class("Span") == (Span, ("start", "end"))
True
>>> state_class("Unknown") is None
True
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

__all__ = ["register_state_class", "state_class", "registered", "add_state_loader"]

#: class name (``__qualname__``, what a state file holds) -> the class and its
#: attributes, all of them, in the order its constructor takes them as keywords
_CLASSES: dict[str, tuple[type, tuple[str, ...]]] = {}

#: functions that import a layer that registers classes, not run yet
_LOADERS: list[Callable[[], None]] = []
_lock = threading.Lock()


def register_state_class(cls: type, fields: tuple[str, ...]) -> None:
    """Let checkpoints write ``cls`` as data: its name and ``fields`` (every attribute).

    Reading calls ``cls(**fields)``.  The name is what a state file holds, so
    two classes of one name cannot both be registered.
    """
    name = cls.__qualname__
    known = _CLASSES.get(name)
    if known is not None and known[0] is not cls:
        raise ValueError(
            f"register_state_class: {name!r} is registered already by "
            f"{known[0].__module__}; give the class another name"
        )
    _CLASSES[name] = (cls, tuple(fields))


def add_state_loader(load: Callable[[], None]) -> None:
    """Run ``load`` (which imports a layer that registers classes) when a name is not known."""
    with _lock:
        _LOADERS.append(load)


def state_class(name: str) -> tuple[type, tuple[str, ...]] | None:
    """The registered class of ``name`` with its fields, or ``None``.

    An unknown name runs the loaders not run yet first (a layer that cannot
    be imported here, its optional dependency missing, is skipped).
    """
    known = _CLASSES.get(name)
    if known is not None:
        return known
    with _lock:
        loaders = list(_LOADERS)
        _LOADERS.clear()
    for load in loaders:
        try:
            load()
        except ImportError as e:
            logger.debug("state classes: a layer could not be imported (%s)", e)
    return _CLASSES.get(name)


def registered(cls: type) -> tuple[str, ...] | None:
    """The fields ``cls`` was registered with, or ``None`` (no loader runs)."""
    known = _CLASSES.get(cls.__qualname__)
    return known[1] if known is not None and known[0] is cls else None
