"""The live pipeline page of a running job (``Job(ui=8080)``, ``rivermark run --ui 8080``).

An ``aiohttp`` server (the ``ui`` extra) on the job's own event loop serves:

* ``/``: one self-contained HTML page (no external assets: it works
  without internet access) that draws the graph left to right, as
  ``visualize()`` does, and shows on each node its records in and out,
  rate, backlog and errors; a strip of recent checkpoints (epoch,
  duration, size); each source's records, rate, position and lag;
* ``/graph.json``: the nodes, edges and their layout;
* ``/events``: server-sent events, one JSON reading of the metrics about
  once a second (``interval``), which the page applies as they arrive.
"""

from __future__ import annotations

import asyncio
import json
import logging
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .metrics import Snapshot

if TYPE_CHECKING:  # pragma: no cover
    from ..checkpoint.job import Job

logger = logging.getLogger(__name__)

__all__ = ["UiServer", "layout", "snapshot_json"]


def layout(job: Job) -> dict[str, Any]:
    """Nodes with a column (longest path from a root) and a row, and the edges.

    >>> import tempfile
    >>> from rivermark import Stream
    >>> from rivermark.checkpoint import Job
    >>> s = Stream.from_iterable([1], name="src")
    >>> _ = s.map(str, name="a").sink_to_list(name="out")
    >>> _ = s.map(repr, name="b")
    >>> g = layout(Job(s, checkpoint=tempfile.mkdtemp()))
    >>> [(n["id"], n["col"], n["row"]) for n in g["nodes"]]
    [('src', 0, 0), ('a', 1, 0), ('b', 1, 1), ('out', 2, 0)]
    """
    col: dict[str, int] = {}
    nodes: list[dict[str, Any]] = []
    edges = []
    for n in job.nodes:  # topological: upstreams first
        nid = job.id_of(n)
        ups = [job.id_of(u) for u in n.upstreams]
        col[nid] = 1 + max((col[u] for u in ups), default=-1)
        edges += [{"from": u, "to": nid} for u in ups]
        nodes.append(
            {
                "id": nid,
                "kind": type(n).__name__,
                "label": str(n),
                "source": not n.upstreams,
            }
        )
    rows: dict[int, int] = {}
    for node in nodes:
        c = col[node["id"]]
        row = rows.get(c, 0)
        node["col"], node["row"] = c, row
        rows[c] = row + 1
    nodes.sort(key=lambda d: (d["col"], d["row"]))
    return {"nodes": nodes, "edges": edges}


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    """A reading of the metrics as the page uses it."""
    return {
        "time": snap.time,
        "elapsed": snap.elapsed,
        "running": snap.running,
        "checkpoints_written": snap.checkpoints_written,
        "last_checkpoint_age": snap.last_checkpoint_age,
        "nodes": {
            n.id: {
                "in": n.records_in,
                "out": n.records_out,
                "rate": n.rate,
                "backlog": n.backlog,
                "errors": n.errors,
                "raised": n.errors_raised,
                "skipped": n.errors_skipped,
                "handled": n.errors_handled,
            }
            for n in snap.nodes
        },
        "sources": [
            {
                "id": s.id,
                "records": s.records,
                "rate": s.rate,
                "position": s.position,
                "lag": s.lag,
                "lag_unit": s.lag_unit,
                "finished": s.finished,
            }
            for s in snap.sources
        ],
        "checkpoints": [
            {
                "epoch": c.epoch,
                "time": c.time,
                "duration": c.duration,
                "pause": c.pause,
                "size": c.size,
            }
            for c in snap.recent_checkpoints[-20:]
        ],
    }


class UiServer:
    """Serves the page for ``job`` on ``addr:port`` (``port=0``: a free one; see :attr:`url`)."""

    def __init__(self, job: Job, port: int, addr: str = "127.0.0.1", interval: float = 1.0) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigurationError(
                f"ui must be a TCP port number (0-65535), got {port!r}; pass e.g. ui=8080"
            )
        self.job = job
        self.port = port
        self.addr = addr
        self.interval = interval
        self._runner: Any = None
        self._closing: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/"

    async def start(self) -> None:
        """Start serving on the running loop (the job's)."""
        try:
            from aiohttp import web
        except ImportError as e:
            raise ConfigurationError("ui needs aiohttp: pip install 'rivermark[ui]'") from e
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/graph.json", self._graph)
        app.router.add_get("/events", self._events)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.addr, self.port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise ConfigurationError(
                f"cannot serve the pipeline page on {self.addr}:{self.port!r} ({e}); "
                "pick another --ui port"
            ) from e
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        logger.info("serving the live pipeline page at %s", self.url)

    async def stop(self) -> None:
        if self._closing is not None:
            self._closing.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _page(self, request: Any) -> Any:
        from aiohttp import web

        html = files("rivermark.observe").joinpath("page.html").read_text(encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def _graph(self, request: Any) -> Any:
        from aiohttp import web

        body = {"store": repr(self.job.store), **layout(self.job)}
        return web.json_response(body)

    async def _events(self, request: Any) -> Any:
        from aiohttp import web

        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        assert self._closing is not None
        try:
            while True:
                data = json.dumps(snapshot_json(self.job.metrics.read()), default=repr)
                await resp.write(f"data: {data}\n\n".encode())
                try:
                    await asyncio.wait_for(self._closing.wait(), self.interval)
                    break
                except asyncio.TimeoutError:
                    pass
        except ConnectionResetError:
            pass
        return resp
