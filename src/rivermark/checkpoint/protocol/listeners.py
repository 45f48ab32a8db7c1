"""What watches a job: one listener interface, and what the layers above attach with it.

A :class:`~rivermark.checkpoint.protocol.job.Job` publishes its events to
:class:`JobListener` objects; it imports none of its watchers.  For one
run, on the job's event loop thread, in this order:

* ``started``: recovered, before the sources start (and before the
  checkpoint of a fresh start);
* per checkpoint: ``checkpoint_begun``; ``node_counts`` once its barrier
  has taken the snapshot; then ``checkpoint_completed`` once it is durable
  and committed (after a ``checkpoint_failed`` that is not ``fatal`` when
  only the prune of older checkpoints failed), or ``checkpoint_failed``
  (``fatal``) when its write failed;
* ``stopped``, with the end state (finished, stopped or failed, and why).

A barrier that fails before its write (state that cannot be pickled, a
sink that cannot pre-commit) ends the run, which ``stopped`` reports with
the failure.  A listener that raises in a checkpoint event is detached
with a WARNING (the job runs on); one that raises in ``started`` refuses
the run, as a page whose port is taken does.

The layers above attach their listeners through the registry here, filled
when they are imported (``import rivermark`` imports
:mod:`rivermark.observe`, which registers the metrics, the Prometheus
endpoint for ``metrics_port``, the live page for ``ui`` and the notebook
display): each factory is keyed by the option it serves and makes its
listener for a new job, or None when the job does not ask for it.

>>> class Epochs(JobListener):
...     def __init__(self) -> None:
...         self.seen: list[int] = []
...     def checkpoint_completed(self, info: CheckpointInfo) -> None:
...         self.seen.append(info.epoch)
>>> import tempfile
>>> from rivermark import Job, Stream
>>> job = Job(Stream.from_iterable([1, 2]), checkpoint=tempfile.mkdtemp(), every=None)
>>> epochs = Epochs()
>>> job.add_listener(epochs)
>>> job.run()
>>> epochs.seen
[1, 2]
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rivermark.checkpoint.protocol.runstate import RunState
from rivermark.errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job
    from rivermark.checkpoint.protocol.options import JobOptions

logger = logging.getLogger(__name__)

__all__ = [
    "CheckpointInfo",
    "CheckpointFailure",
    "JobListener",
    "History",
    "Listeners",
    "ListenerFactory",
    "attach_listener",
    "attach_display",
    "make_listeners",
    "display",
]


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint written by a running job (what the metrics report).

    The figures are the manifest's ``timing`` (seconds, up to the manifest's
    write; see :mod:`rivermark.checkpoint.stores.manifest`): ``duration`` end to
    end, from the pause of the sources; ``write`` the durable write of the
    state files and the manifest; ``pause`` the time the sources were held
    by then (steps 1-3 for a background write; a blocking one holds them
    throughout).  ``size`` is the bytes of state written, ``sizes`` per node id;
    ``kind`` is ``"delta"`` when a node's keyed state was written as a delta,
    ``"savepoint"`` for a savepoint.
    """

    epoch: int
    time: float
    duration: float
    pause: float
    size: int
    kind: str = "full"
    sizes: dict[str, int] = field(default_factory=dict)
    write: float = 0.0


@dataclass(frozen=True)
class CheckpointFailure:
    """A checkpoint a running job could not complete (what the history shows).

    ``fatal`` failures stop the job (the write failed, or the store's lock
    was lost); a failed prune of older checkpoints is not fatal: the
    checkpoint itself is complete and a later prune removes the old ones.
    """

    epoch: int
    time: float
    reason: str
    fatal: bool = True


class JobListener:
    """Hears a job's events; each method does nothing here: override those you need.

    Attach one with ``job.add_listener(listener)``.  Every method runs on the
    job's event loop thread: it must return quickly (hand slow work to a
    thread of your own).  ``started`` and ``stopped`` are coroutines the job
    awaits (a server starts and stops there).
    """

    async def started(self, job: Job) -> None:
        """The run recovered (``job.restored_epoch``, ``job.previous_run`` are set) and is
        about to start its sources (before the checkpoint of a fresh start)."""

    def checkpoint_begun(self, epoch: int, savepoint: bool) -> None:
        """The barrier of checkpoint ``epoch`` begins: the sources are being paused."""

    def node_counts(self, epoch: int, counts: Mapping[str, Sequence[int]]) -> None:
        """Each node's counts at the barrier of ``epoch`` (node id -> ``counts.COUNTS``)."""

    def checkpoint_completed(self, info: CheckpointInfo) -> None:
        """Checkpoint ``info.epoch`` is durable and committed."""

    def checkpoint_failed(self, failure: CheckpointFailure) -> None:
        """A checkpoint's write (``fatal``) or the prune after it (not fatal) failed."""

    async def stopped(self, job: Job, state: RunState) -> None:
        """The run ended (``state``: finished, stopped or failed, with the reason)."""

    def run_record(self) -> dict[str, str | None]:
        """What the store's ``job.json`` records of this listener for the run (the
        page's address, which ``rivermark stop DIR`` reaches); read after ``started``."""
        return {}

    def served_at(self) -> str | None:
        """Where a listener that serves the job can be reached (a URL; None: nowhere)."""
        return None


class History(JobListener):
    """The checkpoints a job wrote and those that failed, the last 100 of each, oldest first.

    The job's own first listener: ``job.checkpoints``, ``job.checkpoint_failures``
    and their counts are its figures.
    """

    def __init__(self) -> None:
        self.checkpoints: deque[CheckpointInfo] = deque(maxlen=100)
        self.failures: deque[CheckpointFailure] = deque(maxlen=100)
        self.written = 0
        self.failed = 0

    def checkpoint_completed(self, info: CheckpointInfo) -> None:
        self.checkpoints.append(info)
        self.written += 1

    def checkpoint_failed(self, failure: CheckpointFailure) -> None:
        self.failures.append(failure)
        self.failed += 1


class Listeners:
    """The listeners of one job, and how each event reaches all of them."""

    def __init__(self, listeners: Iterable[JobListener] = ()) -> None:
        #: replaced, never changed in place: another thread may add one while events go out
        self._all: tuple[JobListener, ...] = tuple(listeners)

    def add(self, listener: JobListener) -> None:
        if not isinstance(listener, JobListener):
            raise ConfigurationError(
                f"Job.add_listener: {listener!r} is not a JobListener; subclass "
                "rivermark.checkpoint.protocol.listeners.JobListener and override the events you need"
            )
        if listener not in self._all:
            self._all = (*self._all, listener)

    def remove(self, listener: JobListener) -> None:
        self._all = tuple(x for x in self._all if x is not listener)

    def __iter__(self) -> Iterator[JobListener]:
        return iter(self._all)

    async def started(self, job: Job) -> None:
        for x in self._all:
            await x.started(job)

    async def stopped(self, job: Job, state: RunState) -> None:
        for x in self._all:
            try:
                await x.stopped(job, state)
            except Exception:  # the job's end (unlocking the store) goes on
                logger.warning("listener %r failed at the end of the run", x, exc_info=True)

    def _each(self, event: str, call: Callable[[JobListener], None]) -> None:
        for x in self._all:
            try:
                call(x)
            except Exception:
                self.remove(x)
                logger.warning(
                    "listener %r raised in %s and is detached; the job runs on",
                    x, event, exc_info=True,
                )  # fmt: skip

    def checkpoint_begun(self, epoch: int, savepoint: bool) -> None:
        self._each("checkpoint_begun", lambda x: x.checkpoint_begun(epoch, savepoint))

    def node_counts(self, epoch: int, counts: Mapping[str, Sequence[int]]) -> None:
        self._each("node_counts", lambda x: x.node_counts(epoch, counts))

    def checkpoint_completed(self, info: CheckpointInfo) -> None:
        self._each("checkpoint_completed", lambda x: x.checkpoint_completed(info))

    def checkpoint_failed(self, failure: CheckpointFailure) -> None:
        self._each("checkpoint_failed", lambda x: x.checkpoint_failed(failure))

    def run_record(self) -> dict[str, str | None]:
        record: dict[str, str | None] = {}
        for x in self._all:
            record.update(x.run_record())
        return record


#: makes the listener that serves an option for a new job (None: the job does not ask for it)
ListenerFactory = Callable[["Job", "JobOptions"], "JobListener | None"]

#: option -> the factory serving it, in the order they were attached (filled by the layers above)
_FACTORIES: dict[str, ListenerFactory] = {}
#: what shows a job as a cell's result in Jupyter (attached by the notebook display)
_DISPLAY: list[Callable[[Job], None]] = []


def attach_listener(option: str, factory: ListenerFactory) -> None:
    """Make ``factory`` serve ``option`` for every job made from now on (replacing another)."""
    _FACTORIES[option] = factory


def attach_display(show: Callable[[Job], None]) -> None:
    """Make ``show`` what a job shows as a cell's result (``Job._ipython_display_``)."""
    _DISPLAY[:] = [show]


def make_listeners(job: Job, options: JobOptions, made: dict[str, JobListener]) -> None:
    """Put into ``made`` the listeners the attached factories make for ``job``, by the
    option each serves (a factory finds those made before it there, through the job).

    An option set for a watcher that no layer attached (``ui`` without
    :mod:`rivermark.observe` imported) is refused, never ignored.
    """
    for option, factory in list(_FACTORIES.items()):
        listener = factory(job, options)
        if listener is not None:
            made[option] = listener
    for option, value in options.watchers().items():
        if value is not None and option not in _FACTORIES:
            raise ConfigurationError(
                f"Job: {option}={value!r} needs the observe layer; import rivermark "
                "(it attaches the metrics endpoint and the live page)"
            )


def display(job: Job) -> None:
    """Show ``job`` as a cell's result with the attached display."""
    if not _DISPLAY:
        raise ConfigurationError(
            "Job: no notebook display is attached; import rivermark (it attaches it)"
        )
    _DISPLAY[0](job)
