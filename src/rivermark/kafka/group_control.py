"""The control API of a :class:`~rivermark.kafka.PartitionedJob`: one address for its tasks.

``PartitionedJob(..., control_port=PORT)`` serves the routes of
:mod:`rivermark.observe.control` for the tasks this process runs: reading
needs nothing, changing needs the control token, as for a single job.  A
request is answered for every task, keyed ``topic[partition]``:

* ``GET /api/job``: the process's status (``running``, ``stopping``, then
  ``stopped`` or ``failed``, in the words of :mod:`rivermark.observe.endstate`)
  and its reason, its group member identity and, per task, its status and
  reason as a single job's ``/api/job`` gives them, epoch, last savepoint and
  position;
* ``GET /api/checkpoints``: per task, the checkpoints its job wrote in this
  process and its failures;
* ``POST /api/checkpoint`` and ``POST /api/savepoint``: every task takes one
  at once; ``{"tasks": {"events[0]": 7, ...}}`` once each is durable.  A
  task that fails its checkpoint is named with its error and the answer is
  an error (500);
* ``POST /api/stop`` (``?savepoint=true``): every task stops with a final
  checkpoint (a savepoint) and the process leaves the group;
  ``{"tasks": {...}}`` of the final epochs, once the last task stopped.

Each task's checkpoints live in its own store, so a savepoint of the group is
one savepoint per partition, each restorable on its own (``from_savepoint``
of a task's store) or by the group: a task restores the newest checkpoint of
its store, the savepoint when it is the newest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from rivermark.observe.control import (
    ControlApi,
    checkpoint_rows,
    control_token,
    failure_rows,
    job_status,
    job_summary,
    local_url,
)
from rivermark.observe.endstate import RunState, failure_text, run_state

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job

logger = logging.getLogger(__name__)

__all__ = ["GroupControl", "TaskGroup", "group_state", "task_key"]


class Task(Protocol):
    """One task of a group: the job that runs one partition."""

    @property
    def job(self) -> Job: ...


class TaskGroup(Protocol):
    """What the control API reads from a :class:`~rivermark.kafka.PartitionedJob`."""

    @property
    def tasks(self) -> Mapping[tuple[str, int], Task]: ...

    @property
    def ended(self) -> bool: ...

    @property
    def stop_requested(self) -> bool: ...

    @property
    def stop_reason(self) -> str | None: ...

    @property
    def error(self) -> BaseException | None: ...

    @property
    def consumer_params(self) -> Mapping[str, object]: ...

    @property
    def member_identity(self) -> str | None: ...

    @property
    def location(self) -> str: ...

    def request_stop(self, savepoint: bool = False, reason: str = ...) -> None: ...

    def wait_stopped(self, timeout: float | None = None) -> bool: ...


def task_key(topic: str, partition: int) -> str:
    """How a task is named in the answers: ``events[3]``."""
    return f"{topic}[{partition}]"


def group_state(group: TaskGroup) -> RunState:
    """How a group's process stands: ``running``, ``stopping``, then ``failed`` (a task's or
    the group consumer's error) or ``stopped`` (who asked), as
    :func:`rivermark.observe.endstate.run_state` words a job (a group's input never ends)."""
    if not group.ended:
        return RunState("stopping" if group.stop_requested else "running")
    if group.error is not None:
        return RunState("failed", failure_text(group.error))
    return RunState("stopped", group.stop_reason or "PartitionedJob.stop()")


class GroupControl:
    """:class:`~rivermark.observe.control.ControlTarget` of a partitioned job's tasks."""

    def __init__(self, group: TaskGroup) -> None:
        self.group = group
        self.started = time.time()
        self._runner: Any = None
        self.port: int | None = None

    # ------------------------------------------------------------------ the target
    def _tasks(self) -> dict[str, Task]:
        return {task_key(*tp): task for tp, task in sorted(self.group.tasks.items())}

    def status(self) -> str:
        return group_state(self.group).state

    def describe(self) -> dict[str, object]:
        tasks = {}
        for key, task in self._tasks().items():
            job = task.job
            tasks[key] = {
                "status": job_status(job),
                "reason": run_state(job).reason,
                **job_summary(job),
            }
        state = group_state(self.group)
        return {
            "status": state.state,
            "reason": state.reason,
            "group": str(self.group.consumer_params["group.id"]),
            "member": self.group.member_identity,
            "location": self.group.location,
            "tasks": tasks,
            "uptime_seconds": round(time.time() - self.started, 3),
        }

    def history(self) -> dict[str, object]:
        return {
            "tasks": {
                key: {
                    "checkpoints": checkpoint_rows(task.job.checkpoints),
                    "failures": failure_rows(task.job.checkpoint_failures),
                }
                for key, task in self._tasks().items()
            }
        }

    async def take(self, savepoint: bool) -> dict[str, object]:
        tasks = self._tasks()
        if not tasks:
            raise RuntimeError("this process runs no task yet (no partition assigned to it)")
        take = [
            t.job.savepoint_async if savepoint else t.job.checkpoint_async for t in tasks.values()
        ]
        results = await asyncio.gather(*(f() for f in take), return_exceptions=True)
        failed = {k: r for k, r in zip(tasks, results) if isinstance(r, BaseException)}
        if failed:
            raise RuntimeError(
                "; ".join(f"task {k}: {type(e).__name__}: {e}" for k, e in failed.items())
            )
        return {"tasks": dict(zip(tasks, results)), "savepoint": savepoint}

    async def stop_with(self, savepoint: bool) -> dict[str, object]:
        tasks = self._tasks()
        self.group.request_stop(savepoint=savepoint, reason="rivermark stop (POST /api/stop)")
        # the polling thread stops every task with its final checkpoint, then leaves
        await asyncio.get_running_loop().run_in_executor(None, self.group.wait_stopped)
        finals = {
            key: task.job.last_savepoint if savepoint else task.job.epoch
            for key, task in tasks.items()
        }
        return {"tasks": finals, "savepoint": savepoint}

    # ------------------------------------------------------------------ the server
    async def start(self, port: int, addr: str) -> None:
        """Serve the control API on ``addr:port`` (``0``: a free port, see :attr:`port`)."""
        from aiohttp import web

        from rivermark.observe.ui import serve

        app = web.Application()
        ControlApi(self, control_token()).add_routes(app)
        self._runner, self.port = await serve(
            app, addr, port, "the control API", "pick another control_port", access_log=False
        )
        logger.info("serving the control API at %s", local_url(addr, self.port))

    async def stop(self) -> None:
        """Stop serving (a stop request still being answered is answered first)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
