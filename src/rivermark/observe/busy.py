"""Busy time and backpressure per node, sampled from the running threads' stacks.

Timing every record would slow the record path, so nothing is timed there.
Instead a daemon thread looks at every thread's Python stack about
``1 / interval`` times a second and charges the sample to the innermost
frame that belongs to one of the job's nodes: a user function the node
holds (``map``'s ``func``, ``filter``'s predicate, a sink's function, ...)
or the node's own ``update``.  ``busy_seconds`` of a node adds up
``interval`` per sample charged to it: its rate is the fraction of time the
node's step runs (1.0 = always).

A node whose record is being worked on below it waits: in the synchronous
push a node's emit returns only once its downstreams are done with the
record.  Its ``backpressure_seconds`` add up the samples charged to any node
downstream of it: the time its upstream waits is the busy time of what lies
below it.  Asynchronous work awaited on the event loop is not on a stack and
is not counted in either; the framework's glue between nodes (the
generated per-source loop, counting) is charged to no node.

>>> import time, tempfile
>>> from rivermark import Stream
>>> from rivermark.checkpoint import Job
>>> def slow(x):
...     time.sleep(0.001)
...     return x
>>> source = Stream.from_iterable(range(300), name="numbers")
>>> _ = source.map(slow, name="slow").sink_to_list()
>>> job = Job(source, checkpoint=tempfile.mkdtemp(), every=None)
>>> sampler = BusySampler(job, interval=0.005)
>>> sampler.start()
>>> job.run()
>>> sampler.busy_seconds()["slow"] > 0
True
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import TYPE_CHECKING

from rivermark.core.node import Stream

if TYPE_CHECKING:  # pragma: no cover
    from rivermark.checkpoint.protocol.job import Job

__all__ = ["BusySampler"]

#: how far up a stack a sample looks for a node's frame
_MAX_DEPTH = 80
#: where the operators keep the user functions they call per record
_FUNCTION_ATTRS = ("func", "predicate", "key", "_key", "_fn", "agg", "callback", "on_error")
#: rivermark's own code (and generated code) is glue, not a node's user function
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _code(value: object) -> CodeType | None:
    # optional: a bound method has __func__, a builtin or callable object no __code__
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    return code if isinstance(code, CodeType) else None


def _user_codes(value: object) -> Iterator[CodeType]:
    """The code of a user function a node holds (a function, bound method or partial)."""
    # optional: only a functools.partial has .func
    for candidate in (value, getattr(value, "func", None)):  # functools.partial
        code = _code(candidate)
        if code is None or code.co_filename.startswith(("<rivermark", _PACKAGE)):
            continue
        yield code


class BusySampler:
    """Samples where ``job``'s threads are, every ``interval`` seconds, until the job ends."""

    def __init__(self, job: Job, interval: float = 0.01) -> None:
        self.job = job
        self.interval = interval
        #: code of a user function -> the id of the node that holds it
        self._funcs: dict[CodeType, str] = {}
        #: code of a node class's ``update`` -> {id(node instance): node id}
        self._updates: dict[CodeType, dict[int, str]] = {}
        for n in job.nodes:
            nid = job.id_of(n)
            for attr in _FUNCTION_ATTRS:
                # by name, never vars(n): making a node's __dict__ a real dict slows
                # every attribute read of it on the record path
                value = getattr(n, attr, None)
                if callable(value) and not isinstance(value, (Stream, type)):
                    for code in _user_codes(value):
                        self._funcs.setdefault(code, nid)
            update = _code(type(n).update)
            if update is not None:
                self._updates.setdefault(update, {})[id(n)] = nid
        self._busy: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._me = -1

    def start(self) -> None:
        """Start sampling until the job's current (or next) run ends; idempotent while sampling."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name="rivermark-busy-sampler", daemon=True
            )
        self._thread.start()

    def busy_seconds(self) -> dict[str, float]:
        """Seconds each node's step was seen running so far (nodes never seen are absent)."""
        with self._lock:
            return {k: v * self.interval for k, v in self._busy.items()}

    def _run(self) -> None:
        self._me = threading.get_ident()
        while not self.job.wait_ended(self.interval):
            if not self.job.running:
                continue
            self.sample()

    def sample(self) -> None:
        """Take one sample of every thread but this one."""
        charged = []
        # the documented way to read other threads' stacks
        for ident, frame in sys._current_frames().items():  # noqa: SLF001
            if ident == self._me:
                continue
            node = self._node_of(frame)
            if node is not None:
                charged.append(node)
        if charged:
            with self._lock:
                for node in charged:
                    self._busy[node] = self._busy.get(node, 0) + 1

    def _node_of(self, frame: FrameType | None) -> str | None:
        depth = 0
        while frame is not None and depth < _MAX_DEPTH:
            code = frame.f_code
            nid = self._funcs.get(code)
            if nid is not None:
                return nid
            owners = self._updates.get(code)
            if owners is not None:
                nid = owners.get(id(frame.f_locals.get("self")))
                if nid is not None:
                    return nid
            frame = frame.f_back
            depth += 1
        return None
