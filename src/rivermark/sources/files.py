"""File sources: ``Stream.filenames`` (watch a glob); ``Stream.from_textfile`` is in :mod:`.textfile`."""

from __future__ import annotations

import ast
import asyncio
import fnmatch
import glob
import logging
import os
import re
from collections.abc import Callable
from typing import Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.sources.base import Source
from rivermark.sources.textfile import FromTextfile as FromTextfile

logger = logging.getLogger(__name__)

__all__ = ["FromTextfile", "Filenames"]

_CHUNK = 1 << 16


def _some(names: list[str], most: int = 3) -> str:
    """`` (a, b, c and 4 more)``, or nothing for no names."""
    if not names:
        return ""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return f" ({', '.join(names[:most])}{more})"


@Stream.register_api(staticmethod, attribute_name="filenames")
class Filenames(Source[list[str]]):
    """Emit the name of every file matching ``path``, and of each new one as it appears.

    ``path`` is a directory (all files in it) or a glob pattern.  Names are
    emitted in sorted order per poll.

    Position: the sorted list of the names already emitted; after
    ``seek(names)`` those are not emitted again.  The source is replayable
    (files that were not yet emitted are found again).

    >>> import os, pathlib, tempfile
    >>> from rivermark.testing import wait_for
    >>> d = tempfile.mkdtemp()
    >>> for n in ("b.csv", "a.csv"):
    ...     _ = pathlib.Path(d, n).write_text("x")
    >>> source = Stream.filenames(os.path.join(d, "*.csv"), poll_interval="5ms")
    >>> L = source.map(os.path.basename).sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: len(L) == 2); source.stop(); L
    ['a.csv', 'b.csv']
    """

    replayable = True

    def __init__(
        self, path: object, poll_interval: object = 0.1, **kwargs: Unpack[NodeOptions]
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigurationError(
                f"filenames: path must be a directory or a glob pattern, got {path!r}; "
                "pass e.g. 'data/*.csv'"
            )
        path = os.fspath(path)
        if "*" not in path and os.path.isdir(path):
            path = os.path.join(path, "*")
        self.path = path
        self.poll_interval = parse_interval(poll_interval, "filenames", "poll_interval")
        self.seen: set[str] = set()
        super().__init__(**kwargs)
        self._position = []

    def position(self) -> list[str]:
        return sorted(self.seen)

    def inputs_change(self, stored: str, position: object) -> str | None:
        """The glob changed since the checkpoint: the files it now finds, those it lost (one line).

        ``None`` unless ``stored`` (the checkpoint's signature of this source)
        is a ``filenames`` signature with another glob.  Every file the glob
        finds that is not in the position is emitted (as at any start); the
        names emitted that it no longer matches are named and never emitted
        again.
        """
        m = re.fullmatch(r"Filenames\(path=(.*)\)", stored)
        try:
            old = ast.literal_eval(m[1]) if m else None
        except (ValueError, SyntaxError):
            return None
        if not isinstance(old, str) or old == self.path:
            return None
        emitted = (
            {n for n in position if isinstance(n, str)} if isinstance(position, list) else set()
        )
        found = sorted(set(glob.glob(self.path)) - emitted)
        lost = sorted(n for n in emitted if not fnmatch.fnmatch(n, self.path))
        return (
            f"the glob {self.path!r} (was {old!r}) finds {len(found)} files not emitted yet, "
            f"emitted from the start as any file it finds{_some(found)}; {len(lost)} files "
            f"emitted before no longer match it{_some(lost)}"
        )

    def restore_inputs(self, stored: str) -> None:
        """Nothing to prepare: the names in the position are never emitted again, the rest are."""

    def position_now(self) -> list[str]:
        return sorted(self.seen)

    def seek(self, position: list[str]) -> None:
        """Treat the names in ``position`` as already emitted."""
        if not isinstance(position, (list, tuple)):
            raise ConfigurationError(
                f"filenames: position must be a list of file names, got {position!r}; "
                "pass a value that position() returned"
            )
        self.seen = set(position)

    def _seen_first(self, names: list[str]) -> Callable[[int], None]:
        def advance(k: int) -> None:
            self.seen.update(names[:k])

        return advance

    async def run(self) -> None:
        while not self.stopped:
            names = sorted(set(glob.glob(self.path)) - self.seen)
            while names and not self.stopped:
                # the position moves past a name only once it has been processed
                done = await self._emit_chunk(names, self._seen_first(names))
                names = names[done:]
            if self.stopped:
                break
            await asyncio.sleep(self.poll_interval)

    def state_signature(self) -> str:
        return f"Filenames(path={self.path!r})"
