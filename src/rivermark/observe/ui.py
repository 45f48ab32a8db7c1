"""The live pipeline page of a running job (``Job(ui=8080)``, ``rivermark run --ui 8080``).

An ``aiohttp`` server (the ``ui`` extra) on the job's own event loop serves:

* ``/``: one self-contained HTML page (no external assets: it works
  without internet access) that draws the graph left to right, as
  ``visualize()`` does, and shows on each node its records in and out,
  rate, backlog and errors, busy time and backpressure as its colour; a
  strip of recent checkpoints, newest first; each source's records, rate,
  position and lag; the exception history.  The page holds the graph and a
  first reading (it shows data at once);
* ``/graph.json``: the nodes, edges and their layout;
* ``/events``: server-sent events, one JSON reading of the metrics about
  once a second (``interval``), which the page applies as they arrive; one
  reading per interval is shared by every open page (:meth:`UiServer.reading`);
* the control API (:mod:`rivermark.observe.control`): health, the job's
  status and checkpoints, and, with the job's token, checkpoint, savepoint
  and stop requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from rivermark.checkpoint.protocol.listeners import JobListener, attach_listener
from rivermark.checkpoint.protocol.options import JobOptions, check_port
from rivermark.checkpoint.protocol.runstate import RunState
from rivermark.errors import ConfigurationError
from rivermark.observe.control import (
    ControlApi,
    JobControl,
    checkpoint_rows,
    control_token,
    failure_rows,
    host_guard,
    local_url,
)
from rivermark.observe.endstate import run_state
from rivermark.observe.metrics import Snapshot, metrics_of
from rivermark.observe.progress import position_text

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

    from rivermark.checkpoint.protocol.job import Job

logger = logging.getLogger(__name__)

__all__ = ["UiServer", "layout", "page", "positions", "serve", "snapshot_json"]


def layout(job: Job) -> dict[str, object]:
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


#: a node's box on the page, in pixels (the page draws boxes of this size)
BOX_W, BOX_H, PAD = 200, 124, 16


def _dot_source(graph: dict[str, Any]) -> str:
    quote = json.dumps  # a JSON string is a valid quoted Graphviz id
    lines = [
        "digraph rivermark {",
        "rankdir=LR; nodesep=0.35; ranksep=0.8;",
        f"node [shape=box, fixedsize=true, width={BOX_W / 72:.3f}, height={BOX_H / 72:.3f}];",
    ]
    lines += [f"{quote(n['id'])};" for n in graph["nodes"]]
    lines += [f"{quote(e['from'])} -> {quote(e['to'])};" for e in graph["edges"]]
    return "\n".join([*lines, "}"])


def positions(graph: dict[str, Any]) -> dict[str, Any]:
    """``graph`` (from :func:`layout`) with pixel positions laid out by Graphviz ``dot``.

    Each node gets ``x``, ``y`` (its box's top left corner) and the graph its
    ``width``, ``height`` and ``layout`` (``"dot"``).  Without the ``dot``
    program (or the ``graphviz`` package) the columns of :func:`layout` are
    used and ``layout`` is ``"columns"``.
    """
    try:
        import graphviz

        placed = json.loads(graphviz.Source(_dot_source(graph)).pipe(format="json"))
        _, _, width, height = (float(v) for v in placed["bb"].split(","))
        centre = {o["name"]: o["pos"].split(",") for o in placed.get("objects", [])}
        for n in graph["nodes"]:
            cx, cy = (float(v) for v in centre[n["id"]])
            # dot's y axis points up; the page's points down
            n["x"], n["y"] = PAD + cx - BOX_W / 2, PAD + height - cy - BOX_H / 2
        graph.update(layout="dot", width=width + 2 * PAD, height=height + 2 * PAD)
    except Exception as e:  # no dot program, or no graphviz package: plain columns
        logger.debug("Graphviz layout unavailable (%s): laying out in columns", e)
        cols = rows = 0
        for n in graph["nodes"]:
            n["x"], n["y"] = PAD + n["col"] * (BOX_W + 60), PAD + n["row"] * (BOX_H + 24)
            cols, rows = max(cols, n["col"] + 1), max(rows, n["row"] + 1)
        graph.update(
            layout="columns",
            width=2 * PAD + cols * BOX_W + max(cols - 1, 0) * 60,
            height=2 * PAD + rows * BOX_H + max(rows - 1, 0) * 24,
        )
    graph.update(box_width=BOX_W, box_height=BOX_H)
    return graph


def _short(value: object, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _finite(value: float | None) -> float | None:
    """``value`` where JSON can carry it (a watermark is -inf or +inf at the ends)."""
    return value if value is not None and math.isfinite(value) else None


def _marks(marks: dict[str, float] | None) -> dict[str, float | None] | None:
    return None if marks is None else {p: _finite(v) for p, v in marks.items()}


def _state(snap: Snapshot, job: Job | None) -> dict[str, object]:
    """The run's state and its reason (:mod:`rivermark.observe.endstate`)."""
    if job is None:
        return {"state": "running" if snap.running else "ended", "reason": ""}
    state = run_state(job)
    return {"state": state.state, "reason": state.reason}


def snapshot_json(snap: Snapshot, job: Job | None = None) -> dict[str, object]:
    """A reading of the metrics as the page uses it."""
    return {
        "time": snap.time,
        "elapsed": snap.elapsed,
        "running": snap.running,
        **_state(snap, job),
        "restored_epoch": snap.restored_epoch,
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
                "busy": n.busy,
                "backpressure": n.backpressure,
                "last_error": n.last_error,
                "last_error_record": n.last_error_record,
                "state_size": n.state_size,
                "watermark": _finite(n.watermark),
                "input_ended": n.watermark == math.inf,
                "late": n.late_records,
                "open_windows": n.open_windows,
                # a join's or a table's figures, under the names GET /api/job gives them
                "join": None if n.join is None else n.join.as_json(),
            }
            for n in snap.nodes
        },
        "sources": [
            {
                "id": s.id,
                "records": s.records,
                "rate": s.rate,
                "position": s.position,
                # as the terminal words it: byte 1,234 (45% of file), lag 12, ...
                "position_text": position_text(s),
                "lag": s.lag,
                "lag_unit": s.lag_unit,
                "finished": s.finished,
                "watermark": _finite(s.watermark),
                "input_ended": s.watermark == math.inf,
                "partition_watermarks": _marks(s.partition_watermarks),
                "event_time_lag": s.event_time_lag,
            }
            for s in snap.sources
        ],
        "checkpoints": checkpoint_rows(snap.recent_checkpoints[-20:]),
        "checkpoint_failures": failure_rows(snap.checkpoint_failures[-20:]),
    }


class _ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's request-handler log: a malformed request is one DEBUG line, not a traceback.

    Anyone who can connect can send bytes that are not HTTP; aiohttp answers
    400 and would log the parser's traceback at ERROR in the job's log.
    """

    def _malformed(self, msg: Any, args: Any, kw: dict[str, Any]) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = kw.get("exc_info")
        if not isinstance(exc, HttpProcessingError):
            return False
        # optional: aiohttp's HTTP errors carry .message, other exceptions do not
        why = " ".join(str(getattr(exc, "message", "") or exc).split())[:200]
        self.logger.debug(
            "%s: a malformed HTTP request (%s), answered %s", msg % args, why, exc.code
        )
        return True

    def exception(self, msg: Any, *args: Any, **kw: Any) -> None:
        if not self._malformed(msg, args, kw):
            super().exception(msg, *args, **kw)

    def debug(self, msg: Any, *args: Any, **kw: Any) -> None:
        if not self._malformed(msg, args, kw):
            super().debug(msg, *args, **kw)


async def serve(
    app: web.Application, addr: str, port: int, what: str, remedy: str, access_log: bool = True
) -> tuple[web.AppRunner, int]:
    """Serve the aiohttp ``app`` on ``addr:port``; returns its runner and the port it got.

    A port that cannot be bound is a :class:`ConfigurationError` naming
    ``what`` and the ``remedy``.  ``access_log=False`` turns aiohttp's
    access log off.  Every route answers only requests whose ``Host`` names
    this server (:func:`~rivermark.observe.control.host_allowed`): 421 else;
    a malformed request is answered 400 and logged in one DEBUG line.
    """
    from aiohttp import web

    app.middlewares.append(host_guard(addr))

    kw: dict[str, Any] = {} if access_log else {"access_log": None}
    kw["logger"] = _ServerLog(logging.getLogger("aiohttp.server"), {})
    runner = web.AppRunner(app, handle_signals=False, **kw)
    await runner.setup()
    site = web.TCPSite(runner, addr, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise ConfigurationError(f"cannot serve {what} on {addr}:{port!r} ({e}); {remedy}") from e
    return runner, int(runner.addresses[0][1])


def page(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler answering with the package's HTML page ``name`` (``page.html``)."""

    async def handler(request: web.Request) -> web.Response:
        from aiohttp import web

        html = files("rivermark.observe").joinpath(name).read_text(encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    return handler


class UiServer(JobListener):
    """Serves the page for ``job`` on ``addr:port`` (``port=0``: a free one; see :attr:`url`).

    A listener of the job (``Job(ui=...)``): it serves from the job's start
    to its end, and ``job.json`` records where (``rivermark stop DIR``).
    """

    def __init__(self, job: Job, port: int, addr: str = "127.0.0.1", interval: float = 1.0) -> None:
        check_port(port, "ui", "ui=8080")
        self.job = job
        self.port = port
        self.addr = addr
        self.interval = interval
        self._runner: Any = None
        self._closing: asyncio.Event | None = None
        #: this run's id on the control API (``job.json`` names it; see ``control.request``)
        self.control_run = secrets.token_hex(16)
        #: the tasks streaming events to open pages
        self._streams: set[asyncio.Task[Any]] = set()
        #: the last reading as JSON, shared by every open page: (monotonic time, text)
        self._reading: tuple[float, str] | None = None
        #: exceptions of the nodes seen so far, newest first, and which were seen
        self._exceptions: deque[dict[str, Any]] = deque(maxlen=50)
        self._seen: set[int] = set()
        #: the graph with its layout (it does not change while the job runs)
        self._graph_json: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/"

    @property
    def local_url(self) -> str:
        """The page's URL from this machine (loopback when it listens on every address)."""
        return local_url(self.addr, self.port)

    async def start(self) -> None:
        """Start serving on the running loop (the job's)."""
        try:
            from aiohttp import web
        except ImportError as e:
            raise ConfigurationError("ui needs aiohttp: pip install 'rivermark[ui]'") from e
        self._closing = asyncio.Event()
        metrics_of(self.job).watch()
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/graph.json", self._graph)
        app.router.add_get("/events", self._events)
        ControlApi(JobControl(self.job), control_token(), self.control_run).add_routes(app)
        self._runner, self.port = await serve(
            app, self.addr, self.port, "the pipeline page", "pick another --ui port"
        )
        logger.info("serving the live pipeline page at %s", self.url)

    async def started(self, job: Job) -> None:
        await self.start()

    async def stopped(self, job: Job, state: RunState) -> None:
        await self.stop()

    def run_record(self) -> dict[str, str | None]:
        return {"control": self.local_url, "control_run": self.control_run}

    def served_at(self) -> str | None:
        return self.url

    async def stop(self) -> None:
        """Send every open page the job's final state, then stop serving."""
        if self._closing is not None:
            self._closing.set()
        if self._streams:
            # each open page gets its last reading (finished / failed) before the server goes
            await asyncio.wait(list(self._streams), timeout=5)
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _graph_data(self) -> dict[str, object]:
        if self._graph_json is None:
            loop = asyncio.get_running_loop()
            graph = await loop.run_in_executor(None, positions, layout(self.job))
            self._graph_json = {"store": repr(self.job.store), **graph}
        return self._graph_json

    async def _graph(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response(await self._graph_data())

    def reading(self, fresh: bool = False) -> str:
        """The metrics as the page reads them (JSON), one reading per ``interval`` shared by
        every open page: the page's cost does not grow with the number of open tabs."""
        now = time.monotonic()
        last = self._reading
        if fresh or last is None or now - last[0] >= 0.9 * self.interval:
            data = snapshot_json(metrics_of(self.job).read(), self.job)
            data["exceptions"] = self._exception_history()
            self._reading = last = (now, json.dumps(data, default=repr))
        return last[1]

    def _exception_history(self) -> list[dict[str, object]]:
        """The exceptions the nodes' user functions raised, newest first, with the time
        they were seen, the record and the traceback (the last 50)."""
        for n in self.job.nodes:
            last = n.last_error
            if last is None or id(last[1]) in self._seen:
                continue
            record, exc = last
            self._seen.add(id(last[1]))
            self._exceptions.appendleft(
                {
                    "time": time.time(),
                    "node": self.job.id_of(n),
                    "record": _short(record),
                    "exception": f"{type(exc).__name__}: {str(exc)[:300]}",
                    "traceback": "".join(
                        traceback.format_exception(type(exc), exc, exc.__traceback__)
                    )[-4000:],
                }
            )
        return list(self._exceptions)

    async def _page(self, request: web.Request) -> web.Response:
        """The page with its graph and the current reading inside: it shows data at once."""
        from aiohttp import web

        initial = {"graph": await self._graph_data(), "reading": json.loads(self.reading())}
        # inside a <script> element: no "</" may end it early
        data = json.dumps(initial, default=repr).replace("</", "<\\/")
        html = files("rivermark.observe").joinpath("page.html").read_text(encoding="utf-8")
        html = html.replace(
            "<!--initial-->", f'<script id="initial" type="application/json">{data}</script>'
        )
        return web.Response(text=html, content_type="text/html")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        assert self._closing is not None
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            while True:
                closing = self._closing.is_set()
                data = self.reading(fresh=closing)  # the final state: read once more
                await resp.write(f"data: {data}\n\n".encode())
                if closing:  # the job has ended: that was its final state
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), self.interval)
        except ConnectionResetError:
            pass
        finally:
            self._streams.discard(task)
        return resp


def _page_server(job: Job, options: JobOptions) -> UiServer | None:
    return None if options.ui is None else UiServer(job, options.ui, options.ui_addr)


attach_listener("ui", _page_server)
