"""A job's checkpoint history as a page: ``rivermark ui CHECKPOINT_DIR``.

Where the live page (:mod:`rivermark.observe.ui`) shows a running job, this
one reads only its checkpoint store, so it also shows a job that has ended
(or one running in another process, or on another machine with the same
object store): one row per retained checkpoint with its time, kind (full,
delta or savepoint), state size per node and every source's position explained.

An ``aiohttp`` server (the ``ui`` extra) serves:

* ``/``: one self-contained HTML page, which reloads the history every few
  seconds, so checkpoints a running job writes appear;
* ``/api/checkpoints``: the history as JSON (the rows of
  :func:`rivermark.checkpoint.tools.inspection.checkpoint_history`) and how the
  last run stands or ended (``last_run``: running, stopped, finished,
  failed or killed, with the reason; :mod:`rivermark.observe.endstate`).

It never writes to the store: it takes no lock and creates no file.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from rivermark.checkpoint.stores.store import Store
from rivermark.checkpoint.tools.inspection import checkpoint_history, where
from rivermark.errors import ConfigurationError
from rivermark.observe.endstate import last_run

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web
from rivermark.observe.ui import page, serve

logger = logging.getLogger(__name__)

__all__ = ["HistoryServer"]


class HistoryServer:
    """Serves the checkpoint history of ``store`` on ``addr:port`` (``port=0``: a free one)."""

    def __init__(self, store: Store, port: int, addr: str = "127.0.0.1") -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigurationError(
                f"--port must be a TCP port number (0-65535), got {port!r}; pass e.g. --port 8080"
            )
        self.store = store
        self.port = port
        self.addr = addr
        self._runner: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/"

    async def start(self) -> None:
        try:
            from aiohttp import web
        except ImportError as e:
            raise ConfigurationError(
                "rivermark ui needs aiohttp: pip install 'rivermark[ui]'"
            ) from e
        app = web.Application()
        app.router.add_get("/", page("history.html"))
        app.router.add_get("/api/checkpoints", self._checkpoints)
        self._runner, self.port = await serve(
            app, self.addr, self.port, "the checkpoint history", "pick another --port", False
        )

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _checkpoints(self, request: web.Request) -> web.Response:
        from aiohttp import web

        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, checkpoint_history, self.store)
        run = last_run(await loop.run_in_executor(None, self.store.read_job_info))
        last = (
            None
            if run is None
            else {"state": run.state, "reason": run.reason, "time": run.ended_at}
        )
        return web.json_response(
            {"store": where(self.store), "checkpoints": rows, "last_run": last}
        )
