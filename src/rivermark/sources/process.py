"""``Stream.from_process``: emit the output lines of a child process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import subprocess
from typing import Any, Unpack

from rivermark.core.node import NodeOptions, Stream
from rivermark.errors import ConfigurationError
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["FromProcess"]

#: seconds a child gets to exit after SIGTERM before it is killed
_TERM_GRACE = 2.0


@Stream.register_api(staticmethod, attribute_name="from_process")
class FromProcess(Source[int]):
    """Run ``cmd`` and emit each line (bytes, newline included) it writes to stdout.

    ``cmd`` is a list of arguments or a shell-like string (split with
    :func:`shlex.split`, not run by a shell).  ``open_kwargs`` go to
    :func:`asyncio.create_subprocess_exec`; ``with_stderr=True`` merges
    stderr into the stream; ``with_end=True`` (the default, as in streamz)
    also emits a last line without a newline.  The source finishes when the process closes its stdout;
    ``stop()`` terminates the process (and kills it if it does not exit
    within 2 s).  It cannot replay (``replayable = False``).

    >>> import sys
    >>> from rivermark.testing import wait_for
    >>> source = Stream.from_process([sys.executable, "-c", "print('a'); print('b')"])
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> wait_for(lambda: source.finished); L
    [b'a\\n', b'b\\n']
    """

    def __init__(
        self,
        cmd: list[str] | tuple[str, ...] | str,
        open_kwargs: dict[str, Any] | None = None,
        with_stderr: bool = False,
        with_end: bool = True,
        **kwargs: Unpack[NodeOptions],
    ) -> None:
        if isinstance(cmd, str):
            args = shlex.split(cmd)
        elif isinstance(cmd, (list, tuple)) and all(isinstance(a, str) for a in cmd):
            args = list(cmd)
        else:
            args = []
        if not args:
            raise ConfigurationError(
                f"from_process: cmd must be a non-empty command string or list of strings, "
                f"got {cmd!r}; pass e.g. ['ping', 'localhost']"
            )
        self.cmd = cmd
        self._args = args
        self.open_kwargs = dict(open_kwargs or {})
        self.with_stderr = with_stderr
        self.with_end = with_end
        self.process: asyncio.subprocess.Process | None = None
        super().__init__(**kwargs)
        self._position = 0

    async def run(self) -> None:
        stderr = subprocess.STDOUT if self.with_stderr else None
        self.process = process = await asyncio.create_subprocess_exec(
            *self._args, stdout=subprocess.PIPE, stderr=stderr, **self.open_kwargs
        )
        logger.info("%s: started process %s", self.display_name(), process.pid)
        assert process.stdout is not None
        at_end = False
        try:
            while not self.stopped:
                try:
                    line = await process.stdout.readuntil(b"\n")
                except asyncio.IncompleteReadError as e:
                    at_end = True
                    if self.with_end and e.partial:
                        await self._emit_record(e.partial, next_position=(self._position or 0) + 1)
                    break
                await self._emit_record(line, next_position=(self._position or 0) + 1)
        finally:
            await asyncio.shield(self._reap(process, at_end))

    async def _reap(self, process: asyncio.subprocess.Process, at_end: bool) -> None:
        if at_end and process.returncode is None:
            # stdout is closed: the process is exiting on its own; give it the grace period
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), _TERM_GRACE)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await asyncio.wait_for(process.wait(), _TERM_GRACE)
            except asyncio.TimeoutError:
                logger.warning(
                    "%s: process %s ignored SIGTERM; killing it",
                    self.display_name(),
                    process.pid,
                )
                process.kill()
                await process.wait()
        else:
            await process.wait()
        logger.info(
            "%s: process %s exited with %s", self.display_name(), process.pid, process.returncode
        )

    def state_signature(self) -> str:
        return "FromProcess()"
