"""The control API of a running job, served next to its live page (``--ui PORT``).

Reading needs nothing; changing needs the job's control token::

    GET  /healthz          200 while the job's server runs, with its status:
                           ``starting`` (restored; its sources prepare and
                           its first checkpoint is written), ``running``,
                           ``stopping`` (its final checkpoint is written)
    GET  /readyz           200 while the job runs and takes records, else 503
    GET  /api/job          status (``running``, ... ``stopped``, ``finished``,
                           ``failed``) and its reason, epoch, positions, uptime,
                           every node's counts since the job first started,
                           every join's and table's running figures (``joins``)
    GET  /api/checkpoints  the checkpoints this run wrote (epoch, time,
                           duration, pause, size, kind) and its failures
    GET  /api/identity     ``?nonce=N``: ``{"run": R, "proof": P}``, P the
                           :func:`identity_proof` of R and N with the token
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
(:func:`request`); they read the token from the same variables, have the
job prove that it holds the token (``/api/identity``) before they send it,
and never follow a redirect.  Every route answers only requests whose
``Host`` names the server itself (:func:`host_allowed`; 421 otherwise).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import socket
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rivermark.checkpoint.stores.signing import check_private, refuse_empty
from rivermark.errors import ConfigurationError, RivermarkError
from rivermark.observe.endstate import run_state
from rivermark.observe.metrics import COUNTS, metrics_of

if TYPE_CHECKING:  # pragma: no cover
    import http.client
    from collections.abc import Iterable

    from aiohttp import web
    from aiohttp.typedefs import Handler, Middleware

    from rivermark.checkpoint.protocol.job import Job
    from rivermark.checkpoint.protocol.listeners import CheckpointFailure, CheckpointInfo

logger = logging.getLogger(__name__)

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
    "host_allowed",
    "host_guard",
    "identity_proof",
    "job_status",
    "job_summary",
    "join_rows",
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

    A token shorter than 16 characters, or a file that cannot be read or
    whose first line is empty, is a :class:`ConfigurationError` naming the
    variable (never the token).
    """
    refuse_empty(TOKEN_ENV, "token")
    refuse_empty(TOKEN_FILE_ENV, "path of the token file")
    token = os.environ.get(TOKEN_ENV, "").strip()
    where = TOKEN_ENV
    path = os.environ.get(TOKEN_FILE_ENV, "")
    if not token and path:
        where = f"the file {TOKEN_FILE_ENV} names ({path!r})"
        check_private(path, TOKEN_FILE_ENV)
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ConfigurationError(
                f"{TOKEN_FILE_ENV}={path!r} cannot be read ({e.strerror or e}); point it at a "
                "file holding the control token on its first line"
            ) from None
        except UnicodeDecodeError:
            raise ConfigurationError(
                f"{where} is not text (UTF-8); write the token on its first line, e.g. the "
                "output of 'openssl rand -hex 32'"
            ) from None
        token = lines[0].strip() if lines else ""
        if not token:  # an empty file is a token that went missing, not "no token"
            raise ConfigurationError(
                f"{where} holds no control token (its first line is empty); write the token "
                "on its first line, e.g. the output of 'openssl rand -hex 32'"
            )
    if not token:
        return None
    if len(token) < MIN_TOKEN:
        raise ConfigurationError(
            f"the control token in {where} has {len(token)} characters, fewer than "
            f"{MIN_TOKEN}; use a long random one, e.g. the output of 'openssl rand -hex 32'"
        )
    return token


def host_allowed(host: str | None, addr: str) -> bool:
    """Whether a request with ``Host: host`` may reach a server listening on ``addr``.

    A web page that rebinds its own DNS name to ``127.0.0.1`` reaches the
    server with its own name in ``Host``; only names that cannot be rebound
    are taken: ``localhost``, a loopback address, the address the server
    listens on, any IP address when it listens on every interface, and
    this machine's host name when it listens beyond the loopback.  A
    request without ``Host`` (no browser sends one) is taken.

    >>> host_allowed("127.0.0.1:8080", "127.0.0.1"), host_allowed("[::1]:80", "127.0.0.1")
    (True, True)
    >>> host_allowed("localhost:8080", "127.0.0.1"), host_allowed("evil.example", "127.0.0.1")
    (True, False)
    >>> host_allowed("10.0.0.5:80", "127.0.0.1"), host_allowed("10.0.0.5:80", "0.0.0.0")
    (False, True)
    """
    if host is None:
        return True
    name = host.strip().lower()
    if name.startswith("["):  # [v6]:port
        name = name[1 : name.find("]")] if "]" in name else name[1:]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    name = name.rstrip(".")
    if name == "localhost":
        return True
    listen = addr.strip("[]").lower()
    everywhere = listen in _EVERY_INTERFACE
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:  # a name: one that cannot be rebound to this machine
        if name == listen:
            return True
        beyond_loopback = everywhere or not _is_loopback(listen)
        return beyond_loopback and name == socket.gethostname().lower()
    if ip.is_loopback or everywhere:
        return True
    try:
        return ip == ipaddress.ip_address(listen)
    except ValueError:
        return False


def _is_loopback(addr: str) -> bool:
    try:
        return addr == "localhost" or ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def host_guard(addr: str) -> Middleware:
    """An aiohttp middleware answering 421 to a request whose ``Host`` is not :func:`host_allowed`."""
    from aiohttp import web

    refused: set[str | None] = set()  # Host headers refused (None: none given)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if host_allowed(host, addr):
            return await handler(request)
        if host not in refused and len(refused) < 16:
            refused.add(host)
            logger.warning(
                "refused requests for host %r (the server listens on %s; a page that "
                "rebinds its name to this machine sends its own name)",
                host,
                addr,
            )
        return web.Response(
            status=421,
            text=f"this server answers only requests for its own address ({addr} or a "
            "loopback name), not for the host the request names\n",
        )

    return guard


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


def job_summary(job: Job) -> dict[str, object]:
    """What ``GET /api/job`` says of one job besides its status: store, epochs, positions,
    joins' and tables' figures."""
    return {
        "store": repr(job.store),
        "epoch": job.epoch,
        "restored_epoch": job.restored_epoch,
        "last_savepoint": job.last_savepoint,
        "positions": {job.id_of(s): s.position() for s in job.sources},
        # per join and table, its running figures (rivermark.core.figures.JoinFigures)
        "joins": join_rows(job),
    }


def join_rows(job: Job) -> dict[str, dict[str, object]]:
    """Each join's and table's running figures by node id, as ``GET /api/job`` and the
    live page give them (:class:`~rivermark.core.figures.JoinFigures`)."""
    rows = {}
    for n in job.nodes:
        figures = n.join_figures()
        if figures is not None:
            rows[job.id_of(n)] = figures.as_json()
    return rows


def checkpoint_rows(checkpoints: Iterable[CheckpointInfo]) -> list[dict[str, object]]:
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


def failure_rows(failures: Iterable[CheckpointFailure]) -> list[dict[str, object]]:
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

    def describe(self) -> dict[str, object]:
        """The body of ``GET /api/job``."""

    def history(self) -> dict[str, object]:
        """The body of ``GET /api/checkpoints``."""

    async def take(self, savepoint: bool) -> dict[str, object]:
        """Take a checkpoint (a savepoint) now; the answer once it is durable."""

    async def stop_with(self, savepoint: bool) -> dict[str, object]:
        """Stop gracefully; the answer once the final checkpoint is durable."""


def job_status(job: Job) -> str:
    """A job's status in the control API: ``starting``, ``running``, ``stopping``, or
    how it ended (:func:`rivermark.observe.endstate.run_state`)."""
    if not job.running:
        return run_state(job).state  # stopped, finished, failed (or not started)
    if job.stop_requested:
        return "stopping"
    # restored, its sources preparing (Kafka assignments) and its first checkpoint
    # being written: it takes no records yet
    return "running" if all(s.started for s in job.sources) else "starting"


class JobControl:
    """:class:`ControlTarget` of one job."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.started = time.time()

    def status(self) -> str:
        return job_status(self.job)

    def describe(self) -> dict[str, object]:
        job = self.job
        return {
            "status": self.status(),
            # how the run ended (empty while it runs): rivermark.observe.endstate
            "reason": run_state(job).reason,
            **job_summary(job),
            "uptime_seconds": round(time.time() - (job.started_at or self.started), 3),
            # per node, every count since the job first started (they carry over a restore)
            "counts": {
                nid: dict(zip(COUNTS, values)) for nid, values in metrics_of(job).totals().items()
            },
        }

    def history(self) -> dict[str, object]:
        return {
            "checkpoints": checkpoint_rows(self.job.checkpoints),
            "failures": failure_rows(self.job.checkpoint_failures),
        }

    async def take(self, savepoint: bool) -> dict[str, object]:
        take = self.job.savepoint_async if savepoint else self.job.checkpoint_async
        return {"epoch": await take(), "savepoint": savepoint}

    async def stop_with(self, savepoint: bool) -> dict[str, object]:
        # on the loop: returns at once
        self.job.stop(savepoint=savepoint, reason="rivermark stop (POST /api/stop)")
        # answered by the final checkpoint (a savepoint when asked for)
        return await self.take(savepoint)


class ControlApi:
    """The routes of the control API for ``target`` (added to an aiohttp application)."""

    def __init__(self, target: ControlTarget, token: str | None, run: str | None = None) -> None:
        self.target = target
        self._token = token
        #: this run's id (not secret): ``job.json`` names it, :func:`identity_proof` covers it
        self.run = run or secrets.token_hex(16)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/api/job", self._job)
        app.router.add_get("/api/checkpoints", self._checkpoints)
        app.router.add_get("/api/identity", self._identity)
        app.router.add_post("/api/checkpoint", self._checkpoint)
        app.router.add_post("/api/savepoint", self._savepoint)
        app.router.add_post("/api/stop", self._stop)

    # ------------------------------------------------------------------ reading
    async def _healthz(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response({"status": self.target.status()})

    async def _readyz(self, request: web.Request) -> web.Response:
        from aiohttp import web

        status = self.target.status()
        return web.json_response({"status": status}, status=200 if status == "running" else 503)

    async def _job(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response(
            self.target.describe(), dumps=lambda v: json.dumps(v, default=repr)
        )

    async def _checkpoints(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response(self.target.history())

    async def _identity(self, request: web.Request) -> web.Response:
        """Proof that this server holds the token, before a client sends it."""
        from aiohttp import web

        if self._token is None:
            return self._no_token()
        nonce = request.query.get("nonce", "")
        if not 32 <= len(nonce) <= 128 or not all(c in "0123456789abcdef" for c in nonce):
            return web.json_response(
                {"error": "give nonce=<32 to 128 lowercase hex digits, fresh each time>"},
                status=400,
            )
        proof = identity_proof(self._token, self.run, nonce)
        return web.json_response({"run": self.run, "proof": proof})

    # ------------------------------------------------------------------ changing
    def _no_token(self) -> web.Response:
        from aiohttp import web

        return web.json_response(
            {
                "error": "this job takes no control requests: start it with "
                f"{TOKEN_ENV} (or {TOKEN_FILE_ENV}) set; see docs/security.md"
            },
            status=403,
        )

    def _refused(self, request: web.Request) -> web.Response | None:
        """The refusal of a changing request without the right token, or ``None``."""
        from aiohttp import web

        if self._token is None:
            return self._no_token()
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

    async def _answer(
        self,
        request: web.Request,
        act: Callable[[bool], Awaitable[dict[str, object]]],
        sp: bool,
    ) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            answer = await act(sp)
        except Exception as e:
            return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=500)
        return web.json_response(answer)

    async def _checkpoint(self, request: web.Request) -> web.Response:
        return await self._answer(request, self.target.take, False)

    async def _savepoint(self, request: web.Request) -> web.Response:
        return await self._answer(request, self.target.take, True)

    async def _stop(self, request: web.Request) -> web.Response:
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
    return _resolve(target)[0]


def _resolve(target: str) -> tuple[str, str | None]:
    """The control URL for ``target``, and the run ``job.json`` names (``None``: a URL)."""
    if target.startswith(("http://", "https://")):
        try:
            _host(target)
        except ValueError as e:
            raise ConfigurationError(
                f"{target!r} is not a control URL ({e}); pass the job's page URL "
                "(http://HOST:PORT/, a port from 1 to 65535), or its checkpoint directory"
            ) from None
        return target.rstrip("/") + "/", None
    info = Path(target) / "job.json"
    try:
        named = json.loads(info.read_text(encoding="utf-8"))
        url, run = named.get("control"), named.get("control_run")
    except (OSError, ValueError, AttributeError, RecursionError):
        url = run = None
    if not isinstance(url, str) or not url:
        raise ConfigurationError(
            f"{target!r} names no running job's control address (no 'control' in "
            f"{str(info)!r}); pass the job's page URL (http://HOST:PORT/, rivermark run "
            "--ui PORT), or the checkpoint directory of a job started with --ui"
        )
    try:
        host = _host(url)
    except ValueError as e:
        raise ConfigurationError(
            f"{str(info)!r} names the control address {url!r}, which is not a valid URL ({e}); "
            "pass the job's page URL (http://HOST:PORT/) yourself"
        ) from None
    if not _is_loopback(host):
        raise ConfigurationError(
            f"{str(info)!r} names the control address {url!r}, which is not on this "
            "machine's loopback; pass that URL yourself if you trust it"
        )
    return url, run if isinstance(run, str) else ""


def _host(url: str) -> str:
    """The host ``url`` names; ValueError when it names none, or a malformed one or port."""
    parts = urllib.parse.urlsplit(url)  # ValueError: an unclosed '[' (IPv6)
    host, _ = parts.hostname, parts.port  # ValueError: a port out of range or not a number
    if not host:
        raise ValueError("no host")
    return host


def identity_proof(token: str, run: str, nonce: str) -> str:
    """What a job answers to ``GET /api/identity?nonce=N``: proof that it holds ``token``.

    An HMAC-SHA256 keyed with the token over the job's run id and the
    client's nonce: only a holder of the token can compute it, and a fresh
    nonce makes an old answer useless.
    """
    text = f"rivermark-control-identity\n{run}\n{nonce}".encode()
    return hmac.new(token.encode(), text, hashlib.sha256).hexdigest()


def _exchange(
    conn: http.client.HTTPConnection, method: str, path: str, headers: dict[str, str]
) -> tuple[int, dict[str, Any] | None, str]:
    """One request on ``conn``: the status, the JSON body (``None``: not JSON), ``Location``."""
    conn.request(method, path, body=b"" if method == "POST" else None, headers=headers)
    r = conn.getresponse()
    data = r.read()
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):  # a peer's answer is data: not JSON, or too deep
        body = None
    return r.status, body if isinstance(body, dict) else None, r.getheader("Location") or ""


def _not_the_job(url: str, target: str, what: str) -> ControlRequestError:
    return ControlRequestError(
        f"the process at {url} is not the job of {target} ({what}); the job has probably "
        "ended and another program holds its port: the control token was not sent"
    )


def _check_identity(
    conn: http.client.HTTPConnection, url: str, target: str, token: str, run: str | None
) -> None:
    """Have the peer prove it holds ``token`` (and is ``run``) before the token is sent."""
    nonce = secrets.token_hex(16)
    base = urllib.parse.urlsplit(url).path or "/"
    status, body, location = _exchange(conn, "GET", f"{base}api/identity?nonce={nonce}", {})
    if status == 403 and body is not None and isinstance(body.get("error"), str):
        # a job started without a token says so (an impostor saying it learns nothing)
        raise ControlRequestError(f"the job at {url} answered 403: {body['error']}")
    if 300 <= status < 400:
        raise _not_the_job(
            url, target, f"it answered {status}, a redirect to {location!r}, never followed"
        )
    if status != 200 or body is None:
        raise _not_the_job(url, target, f"it answered {status} to the identity check")
    theirs, proof = body.get("run"), body.get("proof")
    if not isinstance(theirs, str) or not isinstance(proof, str):
        raise _not_the_job(url, target, "its identity answer is not a job's")
    if run and theirs != run:
        raise _not_the_job(
            url, target, f"it is another run than the one job.json names ({theirs} != {run})"
        )
    if not hmac.compare_digest(proof.encode(), identity_proof(token, theirs, nonce).encode()):
        # the job itself with another token, or a program that took its port: the
        # client cannot tell them apart (neither proves it holds this token)
        raise ControlRequestError(
            f"the process at {url} could not prove that it holds your control token, so the "
            f"token was not sent: if the job of {target} runs there, your token is not its "
            f"token (set {TOKEN_ENV}, or {TOKEN_FILE_ENV}, to the token the job was started "
            "with); if the job has ended, another program holds its port"
        )


def request(target: str, path: str, token: str | None, timeout: float = 600.0) -> dict[str, Any]:
    """POST ``path`` of the job at ``target`` with ``token``; the JSON answer.

    The job first proves, on the same connection, that it holds the token
    (and, for a directory, that it is the run its ``job.json`` names):
    :func:`identity_proof` of a fresh nonce.  Only then is the token sent;
    a redirect is never followed.  An answer that is not 2xx, or no answer,
    is a :class:`ControlRequestError` with the job's own message.
    """
    url, run = _resolve(target)
    if not token:
        raise ConfigurationError(
            f"no control token: set {TOKEN_ENV} (or {TOKEN_FILE_ENV}) to the token the job "
            "was started with (see docs/security.md)"
        )
    import http.client  # here: a job process that is never asked needs none of it

    parts = urllib.parse.urlsplit(url)
    connection = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    conn = connection(parts.hostname or "", parts.port, timeout=min(timeout, 60.0))
    try:
        _check_identity(conn, url, target, token, run)
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        headers = {"Authorization": f"Bearer {token}", "Content-Length": "0"}
        status, answer, location = _exchange(
            conn, "POST", (parts.path or "/") + path.lstrip("/"), headers
        )
    except (http.client.HTTPException, ValueError) as e:
        # the job went away while it answered (an answer cut short, or not JSON)
        raise ControlRequestError(
            f"the job at {url} stopped answering ({type(e).__name__}: {e}); see "
            "'rivermark checkpoints list' for what it wrote"
        ) from None
    except OSError as e:
        raise ControlRequestError(
            f"no job answers at {url} ({e.strerror or e}); is it running, with --ui?"
        ) from None
    finally:
        conn.close()
    if 200 <= status < 300 and answer is not None:
        return answer
    if 300 <= status < 400:
        why = f"a redirect to {location!r}, not followed"
    else:
        why = (answer or {}).get("error") or http.client.responses.get(status, "no JSON answer")
    raise ControlRequestError(f"the job at {url} answered {status}: {why}")
