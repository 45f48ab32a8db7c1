"""The control API of a running job, served next to its live page (``--ui PORT``).

Reading needs nothing; changing needs the job's control token::

    GET  /healthz          200 while the job's server runs, with its status:
                           ``starting`` (restored; its sources prepare and
                           its first checkpoint is written), ``running``,
                           ``stopping`` (its final checkpoint is written)
    GET  /readyz           200 while the job runs and takes records, else 503
    GET  /api/job          status (``running``, ... ``stopped``, ``finished``,
                           ``failed``) and its reason, epoch, positions, uptime,
                           every node's counts since the job first started
    GET  /api/checkpoints  the checkpoints this run wrote (epoch, time,
                           duration, pause, size, kind) and its failures
    POST /api/checkpoint   take a checkpoint now: {"epoch": N} once durable
    POST /api/savepoint    take a savepoint now: {"epoch": N} once durable
    POST /api/stop         stop gracefully (``?savepoint=true``: the final
                           checkpoint is a savepoint): {"epoch": N} of the
                           final checkpoint, answered before the server goes

A changing request carries ``Authorization: Bearer <token>``; the job reads
its token at start from ``RIVERMARK_CONTROL_TOKEN``, or from the first line
of the file ``RIVERMARK_CONTROL_TOKEN_FILE`` names.  A job without a token
refuses every changing request (403); a missing or wrong token is refused
with 401.  The token is compared in constant time and never printed or
logged.  ``rivermark savepoint`` and ``rivermark stop`` are the clients
(:func:`request`); they read the token from the same variables.
"""

from __future__ import annotations

import hmac
import http.client
import ipaddress
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigurationError, RivermarkError
from .endstate import run_state
from .metrics import COUNTS

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    from ..checkpoint.job import CheckpointFailure, CheckpointInfo, Job

__all__ = [
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "ControlApi",
    "ControlRequestError",
    "ControlTarget",
    "JobControl",
    "checkpoint_rows",
    "control_token",
    "failure_rows",
    "job_summary",
    "local_url",
    "request",
    "resolve",
]

TOKEN_ENV = "RIVERMARK_CONTROL_TOKEN"
TOKEN_FILE_ENV = "RIVERMARK_CONTROL_TOKEN_FILE"
#: the shortest token accepted (as for checkpoint keys)
MIN_TOKEN = 16


def control_token() -> str | None:
    """The control token from the environment, or ``None`` when none is set.

    A token shorter than 16 characters, or a file that cannot be read, is a
    :class:`ConfigurationError` naming the variable (never the token).
    """
    token = os.environ.get(TOKEN_ENV, "").strip()
    where = TOKEN_ENV
    path = os.environ.get(TOKEN_FILE_ENV, "")
    if not token and path:
        where = f"the file {TOKEN_FILE_ENV} names ({path!r})"
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ConfigurationError(
                f"{TOKEN_FILE_ENV}={path!r} cannot be read ({e.strerror or e}); point it at a "
                "file holding the control token on its first line"
            ) from None
        token = lines[0].strip() if lines else ""
    if not token:
        return None
    if len(token) < MIN_TOKEN:
        raise ConfigurationError(
            f"the control token in {where} has {len(token)} characters, fewer than "
            f"{MIN_TOKEN}; use a long random one, e.g. the output of 'openssl rand -hex 32'"
        )
    return token


#: listen addresses that mean "every interface", and the loopback address reaching them here
_EVERY_INTERFACE = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def local_url(addr: str, port: int, path: str = "/") -> str:
    """The URL that reaches a server listening on ``addr:port`` from this machine.

    An address that means every interface is reached on the loopback; an
    IPv6 address is bracketed.

    >>> local_url("0.0.0.0", 8080), local_url("::", 9000, "/metrics")
    ('http://127.0.0.1:8080/', 'http://[::1]:9000/metrics')
    >>> local_url("10.0.0.5", 80)
    'http://10.0.0.5:80/'
    """
    host = _EVERY_INTERFACE.get(addr, addr)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def job_summary(job: Job) -> dict[str, Any]:
    """What ``GET /api/job`` says of one job besides its status: store, epochs, positions."""
    return {
        "store": repr(job.store),
        "epoch": job.epoch,
        "restored_epoch": job.restored_epoch,
        "last_savepoint": job.last_savepoint,
        "positions": {job.id_of(s): s.position() for s in job.sources},
    }


def checkpoint_rows(checkpoints: Iterable[CheckpointInfo]) -> list[dict[str, Any]]:
    """The checkpoints a job wrote, as the page and the control API show them."""
    return [
        {
            "epoch": c.epoch,
            "time": c.time,
            "duration": c.duration,
            "write": c.write,
            "pause": c.pause,
            "size": c.size,
            "kind": c.kind,
        }
        for c in checkpoints
    ]


def failure_rows(failures: Iterable[CheckpointFailure]) -> list[dict[str, Any]]:
    """The checkpoints a job could not complete, as the page and the control API show them."""
    return [
        {"epoch": f.epoch, "time": f.time, "reason": f.reason, "fatal": f.fatal} for f in failures
    ]


class ControlTarget(Protocol):
    """What the control API serves: a :class:`~rivermark.checkpoint.Job`
    (:class:`JobControl`) or a group of tasks (``rivermark.kafka.PartitionedJob``)."""

    def status(self) -> str:
        """``starting``, ``running``, ``stopping`` (a stop was asked for), or how it
        ended: ``stopped``, ``finished``, ``failed`` (:mod:`rivermark.observe.endstate`)."""

    def describe(self) -> dict[str, Any]:
        """The body of ``GET /api/job``."""

    def history(self) -> dict[str, Any]:
        """The body of ``GET /api/checkpoints``."""

    async def take(self, savepoint: bool) -> dict[str, Any]:
        """Take a checkpoint (a savepoint) now; the answer once it is durable."""

    async def stop_with(self, savepoint: bool) -> dict[str, Any]:
        """Stop gracefully; the answer once the final checkpoint is durable."""


class JobControl:
    """:class:`ControlTarget` of one job."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.started = time.time()

    def status(self) -> str:
        job = self.job
        if not job.running:
            return run_state(job).state  # stopped, finished, failed (or not started)
        if job.stop_requested:
            return "stopping"
        # restored, its sources preparing (Kafka assignments) and its first checkpoint
        # being written: it takes no records yet
        return "running" if all(s.started for s in job.sources) else "starting"

    def describe(self) -> dict[str, Any]:
        job = self.job
        return {
            "status": self.status(),
            # how the run ended (empty while it runs): rivermark.observe.endstate
            "reason": run_state(job).reason,
            **job_summary(job),
            "uptime_seconds": round(time.time() - (job.started_at or self.started), 3),
            # per node, every count since the job first started (they carry over a restore)
            "counts": {
                nid: dict(zip(COUNTS, values)) for nid, values in job.metrics.totals().items()
            },
        }

    def history(self) -> dict[str, Any]:
        return {
            "checkpoints": checkpoint_rows(self.job.checkpoints),
            "failures": failure_rows(self.job.checkpoint_failures),
        }

    async def take(self, savepoint: bool) -> dict[str, Any]:
        take = self.job.savepoint_async if savepoint else self.job.checkpoint_async
        return {"epoch": await take(), "savepoint": savepoint}

    async def stop_with(self, savepoint: bool) -> dict[str, Any]:
        # on the loop: returns at once
        self.job.stop(savepoint=savepoint, reason="rivermark stop (POST /api/stop)")
        # answered by the final checkpoint (a savepoint when asked for)
        return await self.take(savepoint)


class ControlApi:
    """The routes of the control API for ``target`` (added to an aiohttp application)."""

    def __init__(self, target: ControlTarget, token: str | None) -> None:
        self.target = target
        self._token = token

    def add_routes(self, app: Any) -> None:
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/api/job", self._job)
        app.router.add_get("/api/checkpoints", self._checkpoints)
        app.router.add_post("/api/checkpoint", self._checkpoint)
        app.router.add_post("/api/savepoint", self._savepoint)
        app.router.add_post("/api/stop", self._stop)

    # ------------------------------------------------------------------ reading
    async def _healthz(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"status": self.target.status()})

    async def _readyz(self, request: Any) -> Any:
        from aiohttp import web

        status = self.target.status()
        return web.json_response({"status": status}, status=200 if status == "running" else 503)

    async def _job(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(
            self.target.describe(), dumps=lambda v: json.dumps(v, default=repr)
        )

    async def _checkpoints(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.target.history())

    # ------------------------------------------------------------------ changing
    def _refused(self, request: Any) -> Any:
        """The refusal of a changing request without the right token, or ``None``."""
        from aiohttp import web

        if self._token is None:
            return web.json_response(
                {
                    "error": "this job takes no control requests: start it with "
                    f"{TOKEN_ENV} (or {TOKEN_FILE_ENV}) set; see docs/security.md"
                },
                status=403,
            )
        given = request.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self._token.encode()
        ):
            return web.json_response(
                {
                    "error": "missing or wrong control token: send 'Authorization: Bearer "
                    f"<token>' with the job's {TOKEN_ENV}"
                },
                status=401,
            )
        status = self.target.status()
        if status != "running":
            return web.json_response({"error": f"the job is {status}"}, status=409)
        return None

    async def _answer(self, request: Any, act: Callable[[bool], Awaitable[Any]], sp: bool) -> Any:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            answer = await act(sp)
        except Exception as e:
            return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=500)
        return web.json_response(answer)

    async def _checkpoint(self, request: Any) -> Any:
        return await self._answer(request, self.target.take, False)

    async def _savepoint(self, request: Any) -> Any:
        return await self._answer(request, self.target.take, True)

    async def _stop(self, request: Any) -> Any:
        savepoint = request.query.get("savepoint", "").lower() in ("1", "true", "yes")
        return await self._answer(request, self.target.stop_with, savepoint)


# ---------------------------------------------------------------------- the client
class ControlRequestError(RivermarkError):
    """The job refused a control request, failed it, or did not answer (exit status 1)."""

    exit_code = 1


def resolve(target: str) -> str:
    """The control URL for ``target``: a URL, or a local checkpoint directory's job.

    A directory's ``job.json`` names the URL of the job running on it (when
    it serves its page); only a loopback address is taken from there, so a
    writer of the store cannot send the token elsewhere.
    """
    if target.startswith(("http://", "https://")):
        return target.rstrip("/") + "/"
    info = Path(target) / "job.json"
    try:
        url = json.loads(info.read_text(encoding="utf-8")).get("control")
    except (OSError, ValueError, AttributeError):
        url = None
    if not isinstance(url, str) or not url:
        raise ConfigurationError(
            f"{target!r} names no running job's control address (no 'control' in "
            f"{str(info)!r}); pass the job's page URL (http://HOST:PORT/, rivermark run "
            "--ui PORT), or the checkpoint directory of a job started with --ui"
        )
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigurationError(
            f"{str(info)!r} names the control address {url!r}, which is not on this "
            "machine's loopback; pass that URL yourself if you trust it"
        )
    return url


def request(target: str, path: str, token: str | None, timeout: float = 600.0) -> dict[str, Any]:
    """POST ``path`` of the job at ``target`` with ``token``; the JSON answer.

    An answer that is not 2xx, or no answer, is a :class:`ControlRequestError`
    with the job's own message.
    """
    url = resolve(target) + path.lstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            answer: dict[str, Any] = json.load(r)
            return answer
    except (http.client.HTTPException, ValueError) as e:
        # the job went away while it answered (an answer cut short, or not JSON)
        raise ControlRequestError(
            f"the job at {url} stopped answering ({type(e).__name__}: {e}); see "
            "'rivermark checkpoints list' for what it wrote"
        ) from None
    except urllib.error.HTTPError as e:
        try:
            why = json.load(e).get("error", e.reason)
        except ValueError:
            why = e.reason
        raise ControlRequestError(f"the job at {url} answered {e.code}: {why}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ControlRequestError(
            f"no job answers at {url} ({reason}); is it running, with --ui?"
        ) from None
