"""Loading an app for ``rivermark run``: one clear error instead of a traceback.

:func:`load_app` imports ``path/to/app.py`` and returns the node that
``name`` holds.  A syntax error, an exception raised while the app is
imported, a missing file or a name that is not a node becomes an
:class:`AppError` (exit code 2) that shows the user's own frame only.

An app that starts its job itself (calls ``Job.run()`` when imported) is
refused with :class:`AppRunsItselfError`: ``rivermark run`` is the one that
runs the job, and running it twice on one graph would be wrong.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> with open(os.path.join(d, "app.py"), "w") as f:
...     _ = f.write("x = 1 / 0\\n")
>>> try:
...     load_app(os.path.join(d, "app.py") + ":x")
... except AppError as e:
...     print(str(e).splitlines()[0].replace(d, "DIR"))
rivermark run: importing 'DIR/app.py' raised ZeroDivisionError: division by zero, at DIR/app.py:1 in <module>
"""

from __future__ import annotations

import contextlib
import logging
import re
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

from ._frames import user_frames
from .core.node import Stream
from .core.timeutil import parse_interval
from .errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "AppError",
    "AppRunsItselfError",
    "load_app",
    "parse_every",
    "check_run_allowed",
    "APP_RUN_NAME",
]

#: ``__name__`` of an app imported by ``rivermark run``
APP_RUN_NAME = "__rivermark_app__"

_loading: list[str] = []
_ZERO = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


class AppError(ConfigurationError):
    """The app given to ``rivermark run`` cannot be loaded."""


class AppRunsItselfError(AppError):
    """The app called ``Job.run()`` while ``rivermark run`` was importing it."""


@contextlib.contextmanager
def _loading_app(path: str) -> Iterator[None]:
    _loading.append(path)
    try:
        yield
    finally:
        _loading.remove(path)


def check_run_allowed() -> None:
    """Refuse ``Job.run()`` from an app that ``rivermark run`` is importing."""
    if _loading:
        path = _loading[-1]
        raise AppRunsItselfError(
            f"rivermark run: {path!r} calls Job.run() itself while being imported; use one "
            f"or the other: either start it with 'python {path}', or remove the Job(...).run() "
            f"call (or put it under 'if __name__ == \"__main__\":') and start it with "
            f"'rivermark run {path}:<node> --checkpoint DIR'"
        )


def _syntax_error(path: str, e: SyntaxError) -> AppError:
    where = f"{e.filename or path}:{e.lineno}" if e.lineno else (e.filename or path)
    msg = f"rivermark run: {where}: {type(e).__name__}: {e.msg}"
    if e.text:
        msg += "\n    " + e.text.rstrip("\n").strip()
    return AppError(msg)


def _import_error(path: str, e: BaseException) -> AppError:
    msg = f"rivermark run: importing {path!r} raised {type(e).__name__}: {e}"
    frames = user_frames(e)
    if frames:
        f = frames[-1]
        msg += f", at {f.filename}:{f.lineno} in {f.name}"
        if f.line:
            msg += "\n    " + f.line.strip()
    return AppError(msg)


def load_app(target: str) -> Stream:
    """Import ``path/to/app.py:name`` and return the node ``name`` holds."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise AppError(
            f"rivermark run: expected path/to/app.py:name, got {target!r}; name a module-level "
            "variable that holds a node of the graph, e.g. 'app.py:source'"
        )
    if not Path(path).is_file():
        raise AppError(f"rivermark run: no such file {path!r}; check the path of the app")
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        with _loading_app(path):
            namespace = runpy.run_path(path, run_name=APP_RUN_NAME)
    except AppRunsItselfError:
        raise
    except SyntaxError as e:
        raise _syntax_error(path, e) from None
    except Exception as e:
        logger.debug("importing %r failed", path, exc_info=True)
        raise _import_error(path, e) from None
    node = namespace.get(name, _MISSING)
    if not isinstance(node, Stream):
        nodes = sorted(k for k, v in namespace.items() if isinstance(v, Stream))
        hint = f" ({path!r} has: {', '.join(nodes)})" if nodes else ""
        if node is _MISSING:
            raise AppError(
                f"rivermark run: {path!r} defines no {name!r}; name a module-level "
                f"variable that holds a node of the graph{hint}"
            )
        raise AppError(
            f"rivermark run: {name!r} in {path!r} must be a stream node, got {node!r}; "
            f"name a module-level variable that holds a node of the graph{hint}"
        )
    return node


_MISSING = object()


def parse_every(text: str) -> float | None:
    """The ``--every`` option: a duration, or ``none``/``0`` (in any unit) for no interval.

    >>> parse_every("2s"), parse_every("0"), parse_every("0s"), parse_every("none")
    (2.0, None, None, None)
    """
    if text.strip().lower() in ("none", "off", "never"):
        return None
    try:
        return parse_interval(text, "rivermark run", "--every")
    except ConfigurationError:
        # zero in any unit ("0", "0s", "0ms") means the same: no interval checkpoints
        m = _ZERO.match(text)
        if m is not None and float(m.group(1)) == 0.0:
            try:
                parse_interval("1" + m.group(2))  # a known unit
                return None
            except ConfigurationError:
                pass
        raise ConfigurationError(
            f"rivermark run: --every must be a duration such as 2s or 200ms, or 0/none for "
            f"no interval checkpoints, got {text!r}"
        ) from None
