"""Find the user's own frame in a traceback, for one-line error messages.

An error raised by a user function travels through rivermark's nodes and
perhaps through libraries; the frame a user wants to see is the last one in
their own code: not in rivermark, not in the standard library, not in an
installed package.

>>> def parse(x):
...     return int(x)
>>> try:
...     parse("a")
... except ValueError as e:
...     print(user_frame(e))
<doctest rivermark._frames[0]>:2 in parse
>>> try:
...     list(map(int, ["a"]))
... except ValueError as e:
...     print(user_frame(e))
<doctest rivermark._frames[2]>:2 in <module>
"""

from __future__ import annotations

import logging
import os
import sysconfig
import traceback

logger = logging.getLogger(__name__)

__all__ = ["user_frame", "user_frames"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _library_dirs() -> tuple[str, ...]:
    dirs = {_PACKAGE_DIR + os.sep}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.abspath(path) + os.sep)
    return tuple(dirs)


def user_frames(exc: BaseException | None) -> list[traceback.FrameSummary]:
    """The frames of ``exc``'s traceback that lie in the user's own code."""
    if exc is None or exc.__traceback__ is None:
        return []
    libs = _library_dirs()
    return [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not os.path.abspath(f.filename).startswith(libs)
        # the standard library's frozen modules, and rivermark's generated code
        # (``<rivermark graph>``, ``<rivermark step ...>``): a builtin called from
        # there (``map(int)``) has no frame of the user's
        and not f.filename.startswith(("<frozen", "<rivermark"))
    ]


def user_frame(exc: BaseException | None) -> str | None:
    """``"file:line in function"`` of the last user frame of ``exc``, or ``None``."""
    frames = user_frames(exc)
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}"
