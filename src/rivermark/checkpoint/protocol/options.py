"""What a :class:`~rivermark.checkpoint.protocol.job.Job` checks and derives from its arguments.

:class:`JobOptions`, the job's options as one checked value (a wrong kind
is refused naming the option), the choice of background writes, the job's
id (stable across restarts on one store) and the ``exactly_once=True``
check of the graph; all run in the job's constructor, before anything is
started.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from rivermark.checkpoint.protocol.recovery import parse_savepoint_spec
from rivermark.checkpoint.protocol.upgrade import UpgradeRules
from rivermark.checkpoint.state.keyed import COMPACT_EVERY
from rivermark.checkpoint.state.rocks.backend import StateBackend
from rivermark.checkpoint.stores.store import LocalDirectoryStore, Store
from rivermark.core.config import ErrorPolicy
from rivermark.core.node import Stream
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.sinks.base import CheckpointedSink, EpochSealingSink
from rivermark.sources.base import Source

# the job's messages keep the job's logger name
logger = logging.getLogger(__name__)

__all__ = [
    "JobOptions",
    "check_node",
    "check_port",
    "check_compact_every",
    "choose_background",
    "derive_job_id",
    "check_exactly_once",
]


def _env_compact_every() -> int:
    text = os.environ.get("RIVERMARK_COMPACT_EVERY")
    if not text:
        return COMPACT_EVERY
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(
            f"RIVERMARK_COMPACT_EVERY must be an integer >= 1, got {text!r}; e.g. 20"
        ) from None


def check_node(node: object) -> None:
    """Refuse a job's node that is not a node of a graph."""
    if not isinstance(node, Stream):
        raise ConfigurationError(
            f"Job: node must be a Stream node of the graph to run, got {node!r}"
        )


def _check_keep(keep: object, every_batches: object) -> None:
    """Refuse ``keep`` or ``every_batches`` of the wrong kind, naming the option."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigurationError(f"Job: keep must be an integer >= 1, got {keep!r}; pass e.g. 10")
    if every_batches is not None and (
        isinstance(every_batches, bool) or not isinstance(every_batches, int) or every_batches < 1
    ):
        raise ConfigurationError(
            f"Job: every_batches must be an integer >= 1 or None, got {every_batches!r}"
        )


def check_port(port: object, option: str, example: str) -> None:
    """Refuse a TCP port number of the wrong kind, naming the option (``metrics_port``, ``ui``)."""
    if port is None:
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(
            f"{option} must be a TCP port number (0-65535), got {port!r}; pass e.g. {example}"
        )


def check_compact_every(value: object) -> int:
    """``compact_every`` (default: the environment's, else 20), refused unless an integer >= 1."""
    if value is None:
        value = _env_compact_every()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"Job: compact_every must be an integer >= 1, got {value!r}; pass e.g. 20"
        )
    return value


def choose_background(store: Store, sinks: list[CheckpointedSink], background: bool | None) -> bool:
    """Whether checkpoints are written after the sources resumed.

    Only when every checkpointed sink fixes its epoch's output at
    ``pre_commit``.  By default on local directories: a write through a
    chatty client (S3: many requests, each taking the GIL back from a busy
    pipeline) becomes durable much later in the background, while local
    directories write in a few system calls.
    """
    if background is None:
        background = isinstance(store, LocalDirectoryStore)
    chosen = bool(background) and all(
        isinstance(k, EpochSealingSink) and k.seals_epoch_at_pre_commit for k in sinks
    )
    if background and not chosen:
        logger.info(
            "checkpoints are written with the sources paused: %s",
            ", ".join(repr(k) for k in sinks if not isinstance(k, EpochSealingSink)),
        )
    return chosen


def derive_job_id(store: Store) -> str:
    """The job's id: its store's location (or directory) and a digest of it."""
    path = store.path
    location = store.location()
    if location is not None:
        resolved = location
    elif path is None:
        return "job"
    else:
        resolved = str(os.path.abspath(os.fspath(path)))
    digest = hashlib.sha1(resolved.encode()).hexdigest()[:10]
    return f"{os.path.basename(resolved) or 'job'}-{digest}"


def check_exactly_once(nodes: list[Stream]) -> None:
    """Refuse (``exactly_once=True``) a graph with a leaf or a source that cannot give it."""
    weak = [
        n
        for n in nodes
        if (not n.downstreams and not n.is_stateful and not isinstance(n, CheckpointedSink))
        or (not n.upstreams and not (isinstance(n, Source) and n.replayable))
    ]
    if weak:
        raise ConfigurationError(
            "Job(exactly_once=True): "
            + ", ".join(repr(n) for n in weak)
            + " cannot give exactly-once results (a sink without the checkpointed-sink "
            "contract is at-least-once, a source that is not replayable is at-most-once); "
            "use checkpointed sinks (e.g. sink_to_textfile) and replayable sources, "
            "or pass exactly_once=False"
        )


#: a key, keys (the first signs), or the path of a key file
CheckpointKey = str | bytes | os.PathLike[str] | Sequence[str | bytes] | None


@dataclass(frozen=True)
class JobOptions:
    """A job's options, checked when made: ``Job(node, **options)`` takes these keywords.

    The names and defaults are :class:`~rivermark.checkpoint.protocol.job.Job`'s
    keywords (and ``rivermark run``'s flags).  A value of the wrong kind is
    refused with a ``ConfigurationError`` naming the option.  The store
    (``checkpoint``: a directory, a URL or a ``Store``) and the signing
    keys (``checkpoint_key``) are opened and read by the job, which refuses
    them.

    ``every`` is the checkpoint interval (``"2s"``, ``"200ms"``, seconds, or
    ``None``); ``every_batches`` checkpoints after that many records emitted by
    the sources; ``keep`` is how many checkpoints are retained.  Running the
    same program on the same directory resumes where the last checkpoint was.
    ``allow_new_nodes=True`` lets stateful nodes added since the checkpoint
    start empty; ``rename={"old-id": "new-id"}`` restores a node's state under
    its new id; ``allow_dropped_state`` (``True`` or the ids) lets the state of
    removed nodes go; ``migrate={"node-id": fn}`` turns a node's old state into
    the state its changed code expects (see ``docs/upgrading.md``).  ``on_error`` is the default error policy of the graph's
    nodes that have none.  ``exactly_once=True`` refuses (``ConfigurationError``)
    graphs that cannot deliver it: a leaf that is neither a checkpointed sink nor
    stateful (``sink(func)``), or a source that is not replayable.
    ``from_scratch=True`` starts over explicitly: every checkpoint in the
    store is set aside (kept, not deleted), nothing is restored, and every
    checkpointed sink starts its output over (``start_over()``).
    ``from_savepoint="DIR"`` (the newest savepoint there) or ``"DIR@EPOCH"``
    restores that savepoint, verified like any checkpoint: in the job's own
    location the newer checkpoints are set aside; into an empty location it
    is first copied as that location's first checkpoint; a different location
    that holds checkpoints is refused (see ``docs/checkpointing.md``).
    ``background=True`` (the default for a local directory; ``None`` picks
    it) writes each checkpoint in a worker thread after the sources resumed; it counts only once its manifest is
    durable, and one is in flight at a time (see ``docs/checkpointing.md``).
    A node whose state holds a :class:`rivermark.KeyedState` is written as a
    delta of its changed keys; ``compact_every`` deltas (or deltas outweighing
    the base) are followed by a new base (default 20, or the environment
    variable ``RIVERMARK_COMPACT_EVERY``, which is how ``rivermark run`` is
    configured).
    ``metrics_port`` serves Prometheus metrics over HTTP at
    ``metrics_addr:metrics_port/metrics`` while the job runs (0 picks a free
    port: ``job.metrics_url``); ``job.metrics.read()`` gives the same
    figures in Python.  ``ui`` serves the live pipeline page at
    ``ui_addr:ui`` on the job's event loop (``job.ui_url``).
    ``checkpoint_key`` (a key, a list whose first key signs and the others
    are old keys still accepted, or the path of a key file; default: the
    environment variables ``RIVERMARK_CHECKPOINT_KEY`` and
    ``RIVERMARK_CHECKPOINT_KEY_FILE``) signs every checkpoint and refuses to
    resume from one that is unsigned or signed otherwise.  ``trust_store=True``
    resumes from unsigned checkpoints and loads pickled state without a
    verified signature (see ``docs/security.md``).
    ``state="rocksdb"`` keeps every node's ``KeyedState`` in RocksDB (or
    ``state={"node-id": "rocksdb"}`` some nodes'), in ``state_dir`` (locked
    while the job runs; default: a directory named after the job in this
    user's private ``<temporary directory>/rivermark-state-<uid>``, removed
    when the job ends),
    with ``state_cache`` bytes of RocksDB cache (default 256 MiB); each
    checkpoint uploads only the database files the store does not hold yet
    (see "Keyed state in RocksDB" in ``docs/checkpointing.md``).

    >>> JobOptions(every="200ms").interval()
    0.2
    >>> JobOptions(keep=0)
    Traceback (most recent call last):
    ...
    rivermark.errors.ConfigurationError: Job: keep must be an integer >= 1, got 0; pass e.g. 10
    """

    checkpoint: str | Store = "ckpt/job1"
    every: float | str | None = "2s"
    every_batches: int | None = None
    keep: int = 10
    exactly_once: bool = False
    allow_new_nodes: bool = False
    on_error: ErrorPolicy | None = None
    from_scratch: bool = False
    from_savepoint: str | os.PathLike[str] | None = None
    background: bool | None = None
    compact_every: int | None = None
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    ui: int | None = None
    ui_addr: str = "127.0.0.1"
    checkpoint_key: CheckpointKey = None
    trust_store: bool = False
    rename: Mapping[str, str] | None = None
    allow_dropped_state: bool | Iterable[str] = False
    migrate: Mapping[str, Callable[[Any], Any]] | None = None
    state: str | Mapping[str, str] = "memory"
    state_dir: str | os.PathLike[str] | None = None
    state_cache: int | str | None = None

    def __post_init__(self) -> None:
        # in the order the job has always checked them: the first bad one is reported
        _check_keep(self.keep, self.every_batches)
        self.state_backend()
        self.upgrade_rules()
        self.interval()
        if self.from_savepoint is not None and self.from_scratch:
            raise ConfigurationError(
                "Job: from_scratch and from_savepoint exclude each other; pass one of them"
            )
        savepoint = self.savepoint_location()
        if savepoint is not None:
            parse_savepoint_spec(savepoint)  # a malformed one is refused here
        check_port(self.metrics_port, "metrics_port", "9100")
        check_port(self.ui, "ui", "ui=8080")
        self.compaction()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options' names, in the order of ``Job``'s keywords."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def of_job(cls, checkpoint: str | Store, options: Mapping[str, Any]) -> JobOptions:
        """``Job``'s keywords, checked: an unknown one is refused with the nearest name.

        >>> JobOptions.of_job("ckpt", {"evry": "1s"})
        Traceback (most recent call last):
        TypeError: Job: no option 'evry'; did you mean 'every'? the options are listed in help(rivermark.checkpoint.JobOptions)
        """
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            close = difflib.get_close_matches(unknown[0], cls.names(), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise TypeError(
                f"Job: no option {unknown[0]!r}; {hint}the options are listed in "
                "help(rivermark.checkpoint.JobOptions)"
            )
        return cls(checkpoint=checkpoint, **options)

    def interval(self) -> float | None:
        """``every`` in seconds (None: no checkpoints by time)."""
        return None if self.every is None else parse_interval(self.every, "Job", "every")

    def savepoint_location(self) -> str | None:
        """``from_savepoint`` as a string (``DIR`` or ``DIR@EPOCH``; None: not given)."""
        return None if self.from_savepoint is None else os.fspath(self.from_savepoint)

    def compaction(self) -> int:
        """``compact_every``, or the environment's ``RIVERMARK_COMPACT_EVERY``, or 20."""
        return check_compact_every(self.compact_every)

    def state_backend(self) -> StateBackend:
        """A new backend for a job's keyed state (``state``, ``state_dir``, ``state_cache``)."""
        return StateBackend(self.state, self.state_dir, self.state_cache)

    def upgrade_rules(self) -> UpgradeRules:
        """How a restore meets a graph that changed since the checkpoint."""
        return UpgradeRules.checked(
            self.rename, self.allow_dropped_state, self.allow_new_nodes, self.migrate
        )

    def watchers(self) -> dict[str, object]:
        """The options served by the observe layer's listeners (None: not asked for)."""
        return {"metrics_port": self.metrics_port, "ui": self.ui}
