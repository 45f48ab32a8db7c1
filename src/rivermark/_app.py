"""Loading an app for ``rivermark run``: one clear error instead of a traceback.

:func:`load_app` imports ``path/to/app.py:name`` or ``package.module:name``
and returns the node that ``name`` holds.  A syntax error, an exception
raised while the app is imported, a missing file or module or a name that is
not a node becomes an :class:`AppError` (exit code 2) that shows the user's
own frame only.  An app that calls ``sys.exit(N)`` while being imported ends
the command with that status and one line saying so (:class:`AppExitedError`);
Ctrl-C while it is imported ends it with status 130 and one line
(:class:`AppInterruptedError`).  Neither runs anything.

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

import importlib
import logging
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rivermark._frames import user_frames
from rivermark._runguard import AppError as AppError
from rivermark._runguard import AppRunsItselfError as AppRunsItselfError
from rivermark._runguard import check_run_allowed as check_run_allowed
from rivermark._runguard import loading_app
from rivermark.core.node import Stream
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "AppError",
    "AppRunsItselfError",
    "AppExitedError",
    "AppInterruptedError",
    "load_app",
    "parse_every",
    "check_run_allowed",
    "APP_RUN_NAME",
]

#: the package in ``sys.modules`` of the script apps ``rivermark run`` imports
APP_RUN_NAME = "__rivermark_app__"

_ZERO = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


class AppExitedError(AppError):
    """The app called ``sys.exit()`` while being imported; the command exits with its status."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class AppInterruptedError(AppError):
    """Ctrl-C (SIGINT) arrived while the app was being imported."""

    exit_code = 130


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


def _exit_error(what: str, e: SystemExit) -> AppExitedError:
    code = e.code
    if code is None or isinstance(code, int):
        status = code or 0
        said = f"sys.exit({code})" if code is not None else "sys.exit()"
    else:  # sys.exit("message"): Python prints the message and exits 1
        status = 1
        said = f"sys.exit({str(code)!r})"
    return AppExitedError(
        f"rivermark run: {what} called {said} while being imported; nothing was run "
        f"(exit status {status})",
        status,
    )


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or "/" in spec or Path(spec).is_file()


def _import_namespace(spec: str) -> dict[str, object]:
    """Run the app's module and return its globals (a script path or a module name)."""
    if _is_path(spec):
        if not Path(spec).is_file():
            raise AppError(f"rivermark run: no such file {spec!r}; check the path of the app")
        sys.path.insert(0, str(Path(spec).resolve().parent))
        return _run_script(spec)
    # a module name, found like 'python -m' finds it: from the working directory first
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as e:
        if e.name is not None and (e.name == spec or spec.startswith(e.name + ".")):
            raise AppError(
                f"rivermark run: no module named {e.name!r}; give a file (path/to/app.py:name) "
                "or a module importable from the working directory (package.module:name)"
            ) from None
        raise
    return vars(module)


def _script_module_name(path: str) -> str:
    """The ``__name__`` of the script ``path`` under ``rivermark run``: its classes' ``__module__``.

    >>> _script_module_name("jobs/my-app.py")
    '__rivermark_app__.my_app'
    """
    stem = re.sub(r"\W", "_", Path(path).stem)
    return f"{APP_RUN_NAME}.{stem}"


def _run_script(path: str) -> dict[str, object]:
    """Run the script ``path`` as a module in ``sys.modules``; return its globals.

    It stays there for the life of the process, so that pickle finds the
    classes it defines as it finds a module's: by the module's name, which
    is the script's (:func:`_script_module_name`).  As under ``python path``,
    ``sys.argv[0]`` is ``path`` while it runs, and no bytecode is cached.
    """
    name = _script_module_name(path)
    module = types.ModuleType(name)
    module.__file__ = path
    module.__package__ = ""  # no parent package: a relative import fails as in a script
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec")
    sys.modules.setdefault(APP_RUN_NAME, types.ModuleType(APP_RUN_NAME))
    sys.modules[name] = module
    argv0 = sys.argv[:1]
    sys.argv[:1] = [path]
    try:
        exec(code, vars(module))
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.argv[:1] = argv0
    return vars(module)


def _load_namespace(spec: str) -> dict[str, object]:
    what = repr(spec)
    try:
        with loading_app(spec):
            return _import_namespace(spec)
    except AppError:
        raise
    except SyntaxError as e:
        raise _syntax_error(spec, e) from None
    except SystemExit as e:
        raise _exit_error(what, e) from None
    except KeyboardInterrupt:
        raise AppInterruptedError(
            f"rivermark run: interrupted (Ctrl-C) while importing {what}; nothing was run"
        ) from None
    except Exception as e:
        logger.debug("importing %r failed", spec, exc_info=True)
        raise _import_error(spec, e) from None


def load_app(target: str) -> Stream:
    """Import ``path/to/app.py:name`` or ``package.module:name``; return the node ``name`` holds."""
    return _load_app(target)[0]


def load_app_with_migrations(
    target: str, migrate: Mapping[str, str]
) -> tuple[Stream, dict[str, Callable[[Any], Any]]]:
    """:func:`load_app`, and the functions ``--migrate NODE=FUNCTION`` names.

    ``FUNCTION`` is a function the app defines (``upgrade_totals``) or one
    in an importable module (``package.module:function``); each turns the
    node's old state into its new one (``Job(migrate=...)``).
    """
    node, namespace, path = _load_app(target)
    functions: dict[str, Callable[[Any], Any]] = {}
    for nid, spec in migrate.items():
        module, sep, name = spec.rpartition(":")
        where = repr(module) if sep else f"the app {path!r}"
        fn: Any
        if sep:
            try:
                fn = getattr(importlib.import_module(module), name, _MISSING)
            except ImportError as e:
                raise AppError(
                    f"rivermark run: --migrate {nid}={spec}: cannot import {module!r} ({e}); "
                    "give a function of the app (NAME) or of an importable module (module:NAME)"
                ) from None
        else:
            fn = namespace.get(name, _MISSING)
        if not callable(fn):
            raise AppError(
                f"rivermark run: --migrate {nid}={spec}: {where} defines no function {name!r}; "
                f"define def {name}(old_state): return new_state there"
            )
        functions[nid] = fn
    return node, functions


def _load_app(target: str) -> tuple[Stream, dict[str, object], str]:
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise AppError(
            f"rivermark run: expected path/to/app.py:name or package.module:name, got "
            f"{target!r}; name a module-level variable that holds a node of the graph, "
            "e.g. 'app.py:source'"
        )
    namespace = _load_namespace(path)
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
    return node, namespace, path


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
