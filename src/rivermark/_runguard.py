"""Whether ``Job.run()`` may start: not while ``rivermark run`` imports the app.

``rivermark run`` imports the app inside :func:`loading_app`; a job (or a
partitioned Kafka job) calls :func:`check_run_allowed` before it starts, and
an app that runs its job itself while being imported is refused with
:class:`AppRunsItselfError`.  The job depends on this module only, not on the
command line's app loader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rivermark.errors import ConfigurationError

__all__ = ["AppError", "AppRunsItselfError", "check_run_allowed", "loading_app"]

#: the apps ``rivermark run`` is importing now (innermost last)
_loading: list[str] = []


class AppError(ConfigurationError):
    """The app given to ``rivermark run`` cannot be loaded."""


class AppRunsItselfError(AppError):
    """The app called ``Job.run()`` while ``rivermark run`` was importing it."""


@contextlib.contextmanager
def loading_app(path: str) -> Iterator[None]:
    """While the block runs, ``Job.run()`` is refused (``rivermark run`` imports ``path``)."""
    _loading.append(path)
    try:
        yield
    finally:
        _loading.remove(path)


def check_run_allowed() -> None:
    """Refuse ``Job.run()`` from an app that ``rivermark run`` is importing.

    >>> check_run_allowed()  # not inside rivermark run: allowed
    >>> with loading_app("app.py"):
    ...     try:
    ...         check_run_allowed()
    ...     except AppRunsItselfError as e:
    ...         print(str(e).split(";")[0])
    rivermark run: 'app.py' calls Job.run() itself while being imported
    """
    if _loading:
        path = _loading[-1]
        raise AppRunsItselfError(
            f"rivermark run: {path!r} calls Job.run() itself while being imported; use one "
            f"or the other: either start it with 'python {path}', or remove the Job(...).run() "
            f"call (or put it under 'if __name__ == \"__main__\":') and start it with "
            f"'rivermark run {path}:<node> --checkpoint DIR'"
        )
