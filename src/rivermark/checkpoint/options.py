"""What a :class:`~rivermark.checkpoint.job.Job` checks and derives from its arguments.

The option checks (a wrong kind is refused naming the option), the choice
of background writes, the job's id (stable across restarts on one store)
and the ``exactly_once=True`` check of the graph; all run in the job's
constructor, before anything is started.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

from ..core.node import Stream
from ..errors import ConfigurationError
from ..sinks.base import CheckpointedSink, EpochSealingSink
from ..sources.base import Source
from .keyed import COMPACT_EVERY
from .store import LocalDirectoryStore, Store

# the job's messages keep the job's logger name
logger = logging.getLogger(__name__)

__all__ = [
    "check_options",
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


def check_options(node: Any, keep: Any, every_batches: Any) -> None:
    """Refuse a job's node, ``keep`` or ``every_batches`` of the wrong kind, naming the option."""
    if not isinstance(node, Stream):
        raise ConfigurationError(
            f"Job: node must be a Stream node of the graph to run, got {node!r}"
        )
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigurationError(f"Job: keep must be an integer >= 1, got {keep!r}; pass e.g. 10")
    if every_batches is not None and (
        isinstance(every_batches, bool) or not isinstance(every_batches, int) or every_batches < 1
    ):
        raise ConfigurationError(
            f"Job: every_batches must be an integer >= 1 or None, got {every_batches!r}"
        )


def check_compact_every(value: Any) -> int:
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
